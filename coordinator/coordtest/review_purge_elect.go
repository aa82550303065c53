package coordtest

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
)

// Tests from a review of maintenance and elections (2026-12-06). Run adds
// them to the suite.
var purgeElectReviewTests = []suiteTest{
	{"PurgeKeepsJobsRetriedMeanwhile", testPurgeKeepsRetried},
	{"LostCampaignReplyLeadsThenResigns", testLostCampaignReply},
}

// beforeWrite is a store that runs a hook, once, before the first
// transaction that writes: a change made between a caller's read and its
// write.
type beforeWrite struct {
	kv.Store
	once sync.Once
	hook func()
}

func (s *beforeWrite) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if kvtest.Writes(t) {
		s.once.Do(s.hook)
	}
	return s.Store.Txn(ctx, t)
}

// testPurgeKeepsRetried: retention reads the finished jobs past it, then
// deletes them. A job retried between the two (jobs retry), or retried and
// run to its end again, is no longer the finished job it read: it must be
// left whole, record, index entry and unique key, not have its record
// deleted under an index entry that still lists, counts and claims it.
// The deletes are conditional on the index entry read; nothing else
// tested that.
func testPurgeKeepsRetried(t *testing.T, h *harness) {
	unique := &coordinator.UniqueOpts{ByState: []coordinator.State{coordinator.StateCancelled}}
	again := coordinator.EnqueueParams{Kind: "k", UniqueKey: "again", Unique: unique}
	retried := h.enqueue(again)
	rerun := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	for _, j := range []*coordinator.Job{retried, rerun} {
		if _, err := h.c.Cancel(h.ctx(), j.ID); err != nil {
			t.Fatal(err)
		}
	}
	h.clock.Advance(2 * time.Hour)
	s := h.session(h.c)
	store := &beforeWrite{Store: h.store, hook: func() {
		// Past the read of the finished jobs, before their deletes.
		if _, err := h.c.Retry(h.ctx(), rerun.ID); err != nil {
			t.Errorf("retry %s: %v", rerun.ID, err)
			return
		}
		if err := h.claimOne(s).Complete(h.ctx(), nil); err != nil {
			t.Errorf("complete %s again: %v", rerun.ID, err)
		}
		if _, err := h.c.Retry(h.ctx(), retried.ID); err != nil {
			t.Errorf("retry %s: %v", retried.ID, err)
		}
	}}
	rc := h.coordinator(store, coordinator.Config{Retention: time.Hour})
	if n, err := rc.PurgeFinished(h.ctx()); err != nil || n != 0 {
		t.Fatalf("PurgeFinished = %d, %v; want 0 (both jobs were retried after its read)", n, err)
	}
	h.wantState(retried.ID, coordinator.StateAvailable)
	h.wantState(rerun.ID, coordinator.StateCompleted)
	if n := h.counts(); n[coordinator.StateAvailable] != 1 || n[coordinator.StateCompleted] != 1 || n[coordinator.StateCancelled] != 0 {
		t.Fatalf("counts %v; want 1 available and 1 completed", n)
	}
	if r, err := h.c.Enqueue(h.ctx(), again); err != nil || !r.Existed || r.Job.ID != retried.ID {
		t.Fatalf("enqueue with the retried job's unique key: %+v, %v; want its job", r, err)
	}
	if r := h.claimOne(s); r.Job().ID != retried.ID {
		t.Fatalf("claimed %s, want the retried job %s", r.Job().ID, retried.ID)
	}
	// Once finished again and past retention, it goes, whole.
	h.clock.Advance(2 * time.Hour)
	if n, err := rc.PurgeFinished(h.ctx()); err != nil || n != 1 {
		t.Fatalf("PurgeFinished = %d, %v; want the completed job", n, err)
	}
	if n := h.counts(); n[coordinator.StateRunning] != 1 || n[coordinator.StateCompleted] != 0 {
		t.Fatalf("counts after the purge %v; want the running job alone", n)
	}
}

// aftersClock is a Clock that says the length of each timer asked of it.
type aftersClock struct {
	*Clock
	afters chan time.Duration
}

func (c aftersClock) After(d time.Duration) <-chan time.Time {
	ch := c.Clock.After(d)
	c.afters <- d
	return ch
}

// testLostCampaignReply: a campaign whose write was applied but whose reply
// was lost leaves the election key under the candidate's own lease. Its
// next campaign must take that key for its own (by its create revision)
// and lead: waiting for the key to go, as for another's, waited for its
// own lease to end, which it renews, and no daemon maintained. Its
// resignation then deletes the key, which other candidates wait for.
func testLostCampaignReply(t *testing.T, h *harness) {
	clk := aftersClock{NewClock(h.clock.Now()), make(chan time.Duration, 4)}
	store := &flakyStore{Store: h.store}
	store.fail.Store(1) // the first campaign
	c, err := coordinator.New(store, coordinator.Config{Namespace: h.ns, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s := h.session(h.c)
	led := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(h.ctx())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.RunElected(ctx, "lost", func() *coordinator.Session { return s }, func(ctx context.Context) error {
			led <- struct{}{}
			<-ctx.Done()
			return nil
		})
	}()
	// The pause after the failed campaign; then it campaigns again.
	if d := <-clk.afters; d != time.Second {
		t.Fatalf("pause after the campaign's lost reply: %s, want 1s", d)
	}
	if store.lost.Load() != 1 {
		t.Fatal("the campaign's reply was not lost")
	}
	// A write meanwhile: the store's revision is no longer the key's.
	h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	clk.Advance(time.Second)
	select {
	case <-led:
	case <-time.After(10 * time.Second):
		t.Fatal("no leadership after a campaign whose reply was lost: the candidate waits for its own key to go")
	}
	if got, err := h.c.Leader(h.ctx(), "lost"); err != nil || got != s.WorkerID() {
		t.Fatalf("Leader = %q, %v; want %s", got, err, s.WorkerID())
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("RunElected = %v, want context.Canceled", err)
	}
	// Resigned: the key is gone while the session lives on.
	if got, err := h.c.Leader(h.ctx(), "lost"); err != nil || got != "" {
		t.Fatalf("Leader after the resignation = %q, %v; want none", got, err)
	}
}
