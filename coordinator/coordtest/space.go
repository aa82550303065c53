package coordtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// Tests of a store short of room. Run adds them to the suite.
var spaceTests = []suiteTest{
	{"ShortStoreRefusesNewJobsOnly", testShortStoreRefusesNewJobsOnly},
	{"OutcomeAppliedButAnsweredNoSpace", testOutcomeAppliedButAnsweredNoSpace},
	{"ShortStoreAnswersHeldUniqueKeys", testShortStoreAnswersHeldUniqueKeys},
}

// shortOfSpace is a store that says it is short of room while short is set
// ([kv.SpaceChecker]), as localstore does when its disk's free space is
// under its reserve. Its writes still succeed.
type shortOfSpace struct {
	kv.Store
	short  atomic.Bool
	checks atomic.Int64
}

var errShort = fmt.Errorf("coordtest: under the reserve: %w", kv.ErrNoSpace)

func (s *shortOfSpace) CheckSpace() error {
	s.checks.Add(1)
	if s.short.Load() {
		return errShort
	}
	return nil
}

// testShortStoreRefusesNewJobsOnly: a store short of room refuses new jobs
// (one, a batch, a periodic tick) with kv.ErrNoSpace and writes nothing
// for them, while the jobs it holds are claimed, finished, retried and
// cancelled; once it has room, new jobs are taken, and the tick refused
// is enqueued once.
func testShortStoreRefusesNewJobsOnly(t *testing.T, h *harness) {
	st := &shortOfSpace{Store: unwatchedRegistrations(h.store, h.keysRoot()+"w/")}
	c, err := coordinator.New(st, coordinator.Config{Namespace: h.ns, Clock: h.clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if st.checks.Load() != 3 {
		t.Fatalf("three enqueues asked the store for room %d times, want 3", st.checks.Load())
	}

	st.short.Store(true)
	if _, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k"}); !errors.Is(err, kv.ErrNoSpace) {
		t.Fatalf("enqueue on a store short of room: %v, want kv.ErrNoSpace", err)
	}
	if _, err := c.EnqueueBatch(h.ctx(), []coordinator.EnqueueParams{{Kind: "k"}, {Kind: "k", UniqueKey: "u"}}); !errors.Is(err, kv.ErrNoSpace) {
		t.Fatalf("batch on a store short of room: %v, want kv.ErrNoSpace", err)
	}
	// Bad input is still told apart from a lack of room.
	if _, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", Payload: json.RawMessage(`{`)}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("bad input on a store short of room: %v, want ErrInvalid", err)
	}
	pj := coordinator.PeriodicJob{Name: "short", Spec: "@every 1m", Job: coordinator.EnqueueParams{Kind: "tick"}}
	if _, err := c.EnqueueDueTicks(h.ctx(), pj); err != nil {
		t.Fatalf("first look at a schedule (nothing due): %v", err)
	}
	h.clock.Advance(90 * time.Second)
	if _, err := c.EnqueueDueTicks(h.ctx(), pj); !errors.Is(err, kv.ErrNoSpace) {
		t.Fatalf("a due tick on a store short of room: %v, want kv.ErrNoSpace", err)
	}
	if n := h.counts(); n[coordinator.StateAvailable] != 3 || total(n) != 3 {
		t.Fatalf("after the refusals: %v, want the 3 jobs held, available", n)
	}

	// The jobs held go on.
	s := h.session(c)
	runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 3, false)
	if err != nil || len(runs) != 3 {
		t.Fatalf("claim of the jobs held: %d runs, %v", len(runs), err)
	}
	if err := runs[0].Complete(h.ctx(), json.RawMessage(`{"ok":true}`)); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if err := runs[1].Fail(h.ctx(), errors.New("boom"), coordinator.FailOpts{}); err != nil {
		t.Fatalf("fail: %v", err)
	}
	if err := runs[2].Complete(h.ctx(), nil); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if _, err := c.Cancel(h.ctx(), runs[1].Job().ID); err != nil {
		t.Fatalf("cancel of a retryable job: %v", err)
	}
	if _, err := c.Retry(h.ctx(), runs[1].Job().ID); err != nil {
		t.Fatalf("retry of a cancelled job: %v", err)
	}
	if n := h.counts(); n[coordinator.StateCompleted] != 2 || n[coordinator.StateAvailable] != 1 || total(n) != 3 {
		t.Fatalf("after the runs: %v, want two completed and one available again", n)
	}

	st.short.Store(false)
	if _, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k"}); err != nil {
		t.Fatalf("enqueue once there is room: %v", err)
	}
	ps, err := c.EnqueueDueTicks(h.ctx(), pj)
	if err != nil {
		t.Fatalf("the due tick once there is room: %v", err)
	}
	if ps.Enqueued != 1 {
		t.Fatalf("the tick refused for lack of room: enqueued %d times, want once", ps.Enqueued)
	}
}

// appliesThenNoSpace answers kv.ErrNoSpace for the next writes while
// armed, after applying them when apply is set: etcd answers NOSPACE for
// the writes that took it over its backend quota having applied them (its
// quota applier applies, then finds the quota exceeded and raises the
// alarm), and refuses the later ones unapplied (its capped applier).
type appliesThenNoSpace struct {
	kv.Store
	armed, apply atomic.Bool
}

func (s *appliesThenNoSpace) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if !s.armed.Load() || !writes(t) {
		return s.Store.Txn(ctx, t)
	}
	if s.apply.Load() {
		if _, err := s.Store.Txn(ctx, t); err != nil {
			return kv.TxnResult{}, err
		}
	}
	return kv.TxnResult{}, fmt.Errorf("coordtest: etcdserver: mvcc: database space exceeded: %w", kv.ErrNoSpace)
}

// writes reports whether t puts or deletes in any branch.
func writes(t kv.Txn) bool {
	for _, ops := range [][]kv.Op{t.Then, t.Else} {
		for _, o := range ops {
			if o.Type == kv.OpPut || o.Type == kv.OpDelete || o.Type == kv.OpTxn && writes(*o.Txn) {
				return true
			}
		}
	}
	return false
}

// testOutcomeAppliedButAnsweredNoSpace: an outcome answered with
// kv.ErrNoSpace may have been applied (etcd answers so the write that
// crossed its quota), and is recorded as such, not taken for refused: the
// run ends completed, not lost; one refused without being applied is
// retried and recorded once there is room.
func testOutcomeAppliedButAnsweredNoSpace(t *testing.T, h *harness) {
	st := &appliesThenNoSpace{Store: h.store}
	c := h.coordinator(st, coordinator.Config{})
	s := h.session(c)
	for _, apply := range []bool{true, false} {
		j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
		r := h.claimOneFrom(c, s)
		if r.Job().ID != j.ID {
			t.Fatalf("claimed %s, want %s", r.Job().ID, j.ID)
		}
		st.apply.Store(apply)
		st.armed.Store(true)
		err := r.Complete(h.ctx(), nil)
		st.armed.Store(false)
		if err != nil {
			if !errors.Is(err, kv.ErrNoSpace) {
				t.Fatalf("complete answered NOSPACE (applied %v): %v", apply, err)
			}
			// The worker retries an outcome the store had no room for.
			if err := r.Complete(h.ctx(), nil); err != nil {
				t.Fatalf("complete retried after NOSPACE (the first applied: %v): %v, want nil (the outcome is recorded)", apply, err)
			}
		}
		if err := r.Lost(); err != nil {
			t.Fatalf("after a complete answered NOSPACE (applied %v): the run is lost: %v", apply, err)
		}
		got, err := c.Get(h.ctx(), j.ID)
		if err != nil || got.State != coordinator.StateCompleted {
			t.Fatalf("job after its complete answered NOSPACE (applied %v): %+v, %v; want completed", apply, got, err)
		}
	}
}

// testShortStoreAnswersHeldUniqueKeys: a store short of room still answers
// an enqueue whose unique keys are all held by live jobs (the retry the
// README advises after an enqueue's 503), with those jobs, Existed set: it
// writes nothing. One with a key not held is refused, writing nothing.
func testShortStoreAnswersHeldUniqueKeys(t *testing.T, h *harness) {
	st := &shortOfSpace{Store: unwatchedRegistrations(h.store, h.keysRoot()+"w/")}
	c, err := coordinator.New(st, coordinator.Config{Namespace: h.ns, Clock: h.clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", UniqueKey: "held"})
	if err != nil {
		t.Fatal(err)
	}
	st.short.Store(true)
	res, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", UniqueKey: "held"})
	if err != nil {
		t.Fatalf("enqueue of a held unique key on a store short of room: %v, want the existing job", err)
	}
	if !res.Existed || res.Job.ID != first.Job.ID {
		t.Fatalf("enqueue of a held unique key on a store short of room: existed %v, job %s; want existed, job %s", res.Existed, res.Job.ID, first.Job.ID)
	}
	if _, err := c.EnqueueBatch(h.ctx(), []coordinator.EnqueueParams{{Kind: "k", UniqueKey: "held"}, {Kind: "k", UniqueKey: "new"}}); !errors.Is(err, kv.ErrNoSpace) {
		t.Fatalf("a batch with a new unique key on a store short of room: %v, want kv.ErrNoSpace", err)
	}
	if n := h.counts(); total(n) != 1 {
		t.Fatalf("after the enqueues on a store short of room: %v, want the one job", n)
	}
}

// total adds up counts by state.
func total(n map[coordinator.State]int) int {
	sum := 0
	for _, v := range n {
		sum += v
	}
	return sum
}
