package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/worker"
)

// slotThief is a store on which, once armed, another daemon takes the
// global-limit slot that the next claim commit tries, just before that
// commit reaches the store: the claim's unit is refused although its job
// stays available. It holds the commit until open is closed.
type slotThief struct {
	kv.Store
	armed      atomic.Bool
	held, open chan struct{}
}

// claimSlot returns the global-limit slot a claim commit tries (its first
// unit's), or "".
func claimSlot(t kv.Txn) string {
	for _, op := range t.Then {
		if op.Type != kv.OpTxn {
			continue
		}
		for _, c := range op.Txn.If {
			if c.Target == kv.Version && c.Op == kv.Equal && c.Int == 0 && strings.Contains(c.Key, "/qm/s/") {
				return c.Key
			}
		}
	}
	return ""
}

func (s *slotThief) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if slot := claimSlot(t); slot != "" && s.armed.CompareAndSwap(true, false) {
		close(s.held)
		<-s.open
		// Another daemon's claim: its slot hangs on for as long as its
		// job runs, longer than this test.
		if _, err := s.Store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put(slot, []byte("another daemon's job"), 0)}}); err != nil {
			return kv.TxnResult{}, err
		}
	}
	return s.Store.Txn(ctx, t)
}

// TestRefusedCandidateClaimedBesideAnEmptyFinding: two claims in flight;
// one tries the only job, the other skips it (its sibling holds it), finds
// the queue empty, and the queue is left until the next wake-up. Then the
// first claim's unit is refused because another daemon took the global-limit
// slot it tried, not the job: the job stays available, a slot of the limit
// is still free, and no watch event says so (its entry did not change, and
// a slot taken wakes no one). The job must be claimed again at once, not at
// the next poll (an hour here).
func TestRefusedCandidateClaimedBesideAnEmptyFinding(t *testing.T) {
	th := &slotThief{held: make(chan struct{}), open: make(chan struct{})}
	e := newEnv(t, func(s kv.Store) kv.Store { th.Store = s; return th })
	if _, _, err := e.c.SetQueueLimit(context.Background(), coordinator.DefaultQueue, 2); err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool
	emptyBeside := make(chan struct{}, 1)
	e.worker(worker.Config{
		Concurrency:  2, // two claims in flight, one slot each
		PollInterval: time.Hour,
		OnClaim: func(_ string, n int, st coordinator.ClaimStats) {
			if armed.Load() && n == 0 && st.Candidates == 0 {
				signal(emptyBeside)
			}
		},
	}, map[string]worker.Handler{"k": func(context.Context, *worker.Job) error { return nil }})
	// The start's wake-ups are behind the worker once a job has run.
	for range 2 {
		if j := e.wait(e.enqueue(coordinator.EnqueueParams{Kind: "k"})); j.State != coordinator.StateCompleted {
			t.Fatalf("warm-up job %s", j.State)
		}
	}
	armed.Store(true)
	th.armed.Store(true)
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	awaitSignal(t, th.held, "a claim of the job is committing")
	awaitSignal(t, emptyBeside, "the claim beside it found the queue empty")
	close(th.open)
	if j := e.wait(id); j.State != coordinator.StateCompleted {
		t.Fatalf("job %s is %s, want completed", j.ID, j.State)
	}
}

// splitClaims is a store whose transactions hold one claimed job each (a
// claim of two jobs commits in two), and on which, once armed, the second
// commit of the next claim fails without landing after its claim beside
// it reported; it holds that commit until open is closed.
type splitClaims struct {
	kv.Store
	armed      atomic.Bool
	commits    atomic.Int32
	held, open chan struct{}
}

func (s *splitClaims) Limits() kv.Limits {
	l := s.Store.Limits()
	l.MaxOps = 5 // one claim unit (four operations) and its nesting
	return l
}

func (s *splitClaims) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if s.armed.Load() && isClaimCommit(t) && s.commits.Add(1) == 2 {
		close(s.held)
		<-s.open
		return kv.TxnResult{}, errors.New("store briefly unreachable")
	}
	return s.Store.Txn(ctx, t)
}

// TestPartlyLandedClaimLeavesNoJobWaiting: two claims in flight; one tries
// both jobs of the queue, the other skips them and finds the queue empty.
// The first claim's commit lands for one job and fails for the other (its
// jobs took two transactions): resolved from the ownership keys, the claim
// reports one run and no error, and the other job is available again with
// no watch event to say so. It must be claimed at once, not at the next
// poll (an hour here).
func TestPartlyLandedClaimLeavesNoJobWaiting(t *testing.T) {
	sc := &splitClaims{held: make(chan struct{}), open: make(chan struct{})}
	e := newEnv(t, func(s kv.Store) kv.Store { sc.Store = s; return sc })
	var armed atomic.Bool
	emptyBeside := make(chan struct{}, 1)
	e.worker(worker.Config{
		Concurrency:  4, // two claims in flight, two slots each
		PollInterval: time.Hour,
		OnClaim: func(_ string, n int, st coordinator.ClaimStats) {
			if armed.Load() && n == 0 && st.Candidates == 0 {
				signal(emptyBeside)
			}
		},
	}, map[string]worker.Handler{"k": func(context.Context, *worker.Job) error { return nil }})
	if j := e.wait(e.enqueue(coordinator.EnqueueParams{Kind: "k"})); j.State != coordinator.StateCompleted {
		t.Fatalf("warm-up job %s", j.State)
	}
	// Both jobs in one transaction: the claim woken by it reads both.
	armed.Store(true)
	sc.armed.Store(true)
	rs, err := e.c.EnqueueBatch(context.Background(), []coordinator.EnqueueParams{{Kind: "k"}, {Kind: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	awaitSignal(t, sc.held, "the second commit of a claim of both jobs")
	awaitSignal(t, emptyBeside, "the claim beside it found the queue empty")
	close(sc.open)
	for _, r := range rs {
		if j := e.wait(r.Job.ID); j.State != coordinator.StateCompleted {
			t.Fatalf("job %s is %s, want completed", j.ID, j.State)
		}
	}
}

// TestSlotFreedElsewhereWakesAWaitingWorker: a worker whose claim found
// every slot of its queue's global limit held (by another daemon's run)
// leaves the queue until a wake-up. That run's outcome frees the slot:
// the worker must claim the job waiting at once, not at its next poll (an
// hour here).
func TestSlotFreedElsewhereWakesAWaitingWorker(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, _, err := e.c.SetQueueLimit(ctx, coordinator.DefaultQueue, 1); err != nil {
		t.Fatal(err)
	}
	other, err := e.c.NewSession(ctx, coordinator.SessionConfig{TTL: 30 * time.Second, Worker: coordinator.WorkerInfo{ID: coordinator.NewWorkerID()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	first := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	runs, _, err := e.c.Claim(ctx, other, coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 || runs[0].Job().ID != first {
		t.Fatalf("the other daemon's claim: %d runs, %v", len(runs), err)
	}
	var armed atomic.Bool
	held := make(chan struct{}, 1)
	e.worker(worker.Config{
		Queues:       []string{"warm", coordinator.DefaultQueue},
		PollInterval: time.Hour,
		OnClaim: func(q string, n int, st coordinator.ClaimStats) {
			if armed.Load() && q == coordinator.DefaultQueue && n == 0 && st.Held {
				signal(held)
			}
		},
	}, map[string]worker.Handler{"k": func(context.Context, *worker.Job) error { return nil }})
	// The start's wake-ups are behind the worker once a job has run.
	if j := e.wait(e.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: "warm"})); j.State != coordinator.StateCompleted {
		t.Fatalf("warm-up job %s", j.State)
	}
	armed.Store(true)
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	awaitSignal(t, held, "a claim found the queue's only slot held")
	if err := runs[0].Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if j := e.wait(id); j.State != coordinator.StateCompleted {
		t.Fatalf("job %s is %s, want completed once the slot was freed", id, j.State)
	}
}
