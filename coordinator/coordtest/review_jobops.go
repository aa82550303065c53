package coordtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// Tests from a review of the operations on jobs under concurrency: unique
// keys, cancel, retry, delete, bulk cancel and retention (2026-12-06). Run
// adds them to the suite.
var jobOpsReviewTests = []suiteTest{
	{"CancelManyMissesNoJobMovingBetweenIndexes", testCancelManyMovingJobs},
}

// beforeScan is a store that runs a hook, once, before the first range
// read that starts at a given key: a move made while a scan of several
// indexes is between them.
type beforeScan struct {
	kv.Store
	mu    sync.Mutex
	hooks map[string]func()
}

func (s *beforeScan) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	s.mu.Lock()
	hook := s.hooks[r.Start]
	delete(s.hooks, r.Start)
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	return s.Store.Range(ctx, r)
}

// testCancelManyMovingJobs (ADR 0043): a bulk cancel reads the available,
// timer and running indexes one after another. A job that was unfinished
// when it began and stays so must not escape it by moving into an index
// already read: a scheduled job promoted after the available index was
// read, a running job given back (released, reaped, snoozed) after the
// available and timer indexes were. Both were left available, to run,
// after a cancel --all that said it was done.
func testCancelManyMovingJobs(t *testing.T, h *harness) {
	due := h.enqueue(coordinator.EnqueueParams{Kind: "k", ScheduledAt: h.clock.Now().Add(time.Minute)})
	s := h.session(h.c)
	h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	run := h.claimOne(s)
	store := &beforeScan{Store: h.store, hooks: map[string]func(){
		// Between the available and the timer index: the scheduled job
		// falls due and is promoted.
		h.keysRoot() + "t/": func() {
			h.clock.Advance(2 * time.Minute)
			if n, err := h.c.PromoteDue(h.ctx()); err != nil || n != 1 {
				t.Errorf("PromoteDue = %d, %v; want 1 job", n, err)
			}
		},
		// Between the timer and the running index: the running job is
		// given back, available.
		h.keysRoot() + "r/": func() {
			if err := run.Release(h.ctx()); err != nil {
				t.Errorf("Release: %v", err)
			}
		},
	}}
	c := h.coordinator(store, coordinator.Config{})
	res, err := c.CancelMany(h.ctx(), coordinator.CancelFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{due.ID, run.Job().ID} {
		if j := h.get(id); j.State != coordinator.StateCancelled {
			t.Errorf("job %s is %s after a bulk cancel of every job (result %+v), want cancelled: it moved into an index the cancel had read", id, j.State, res)
		}
	}
	if res.Cancelled != 2 || res.CancelRequested != 0 {
		t.Errorf("CancelMany = %+v, want 2 cancelled", res)
	}
}
