package coordtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
)

// Tests from a review of maintenance and elections (2026-12-06). Run adds
// them to the suite.
var retentionReviewTests = []suiteTest{
	{"PurgeKeepsJobsRetriedMeanwhile", testPurgeKeepsRetried},
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
