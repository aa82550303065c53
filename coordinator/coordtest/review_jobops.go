package coordtest

import (
	"context"
	"errors"
	"strings"
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
	{"UniquePeriodIsTheScheduledTimes", testUniquePeriodOfScheduledTime},
	{"RetryFromRefusesAJobThatChanged", testRetryFromChanged},
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

// testUniquePeriodOfScheduledTime: a unique period is that of the job's
// scheduled time, as the README says, not of the enqueue: a job enqueued
// ahead for tomorrow holds tomorrow's key, so that tomorrow's enqueue
// (scheduled then, or made then without a time) finds it and today's does
// not; a time already past is now, when the job runs. Keying every job on
// the enqueue's period passed every other test.
func testUniquePeriodOfScheduledTime(t *testing.T, h *harness) {
	const day = 24 * time.Hour
	enq := func(at time.Time) coordinator.EnqueueResult {
		t.Helper()
		r, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "nightly", ScheduledAt: at,
			Unique: &coordinator.UniqueOpts{ByPeriod: day}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	want := func(what string, r coordinator.EnqueueResult, existed *coordinator.Job) {
		t.Helper()
		switch {
		case existed == nil && r.Existed:
			t.Fatalf("%s: answered with job %s (key %s) as existing; want a new job", what, r.Job.ID, r.Job.UniqueKey)
		case existed != nil && (!r.Existed || r.Job.ID != existed.ID):
			t.Fatalf("%s: job %s, existed %v (key %s); want job %s (key %s) as existing", what, r.Job.ID, r.Existed, r.Job.UniqueKey, existed.ID, existed.UniqueKey)
		}
	}
	tomorrow := h.clock.Now().UTC().Truncate(day).Add(day)
	ahead := enq(tomorrow.Add(2 * time.Hour))
	want("tomorrow 02:00", ahead, nil)
	if !strings.Contains(ahead.Job.UniqueKey, "period="+tomorrow.Format(time.RFC3339Nano)+"/") {
		t.Fatalf("key of a job scheduled tomorrow: %q; want tomorrow's period %s", ahead.Job.UniqueKey, tomorrow.Format(time.RFC3339Nano))
	}
	want("tomorrow 20:00", enq(tomorrow.Add(20*time.Hour)), ahead.Job)
	today := enq(time.Time{})
	want("now, today", today, nil)
	want("a time already past", enq(h.clock.Now().Add(-day)), today.Job)
	want("the day after", enq(tomorrow.Add(day+time.Hour)), nil)
	// Tomorrow, the job enqueued ahead (still unfinished) holds the day.
	h.clock.Advance(tomorrow.Add(time.Hour).Sub(h.clock.Now()))
	want("now, tomorrow", enq(time.Time{}), ahead.Job)
}

// testRetryFromChanged: RetryFrom retries a job only in the state its
// caller saw (the dashboard's "run now" of a scheduled job), also when the
// job changes between the retry's read and its write: a scheduled job
// cancelled by another user meanwhile stays cancelled, ErrWrongState
// naming both states, where the retry revived it; in the state given, it
// is retried.
func testRetryFromChanged(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k", ScheduledAt: h.clock.Now().Add(time.Hour)})
	store := &beforeWrite{Store: h.store, hook: func() {
		if _, err := h.c.Cancel(h.ctx(), j.ID); err != nil {
			t.Errorf("Cancel: %v", err)
		}
	}}
	c := h.coordinator(store, coordinator.Config{})
	got, err := c.RetryFrom(h.ctx(), j.ID, coordinator.StateScheduled)
	if !errors.Is(err, coordinator.ErrWrongState) || !strings.Contains(err.Error(), "cancelled") || !strings.Contains(err.Error(), "scheduled") {
		t.Fatalf("RetryFrom(scheduled) of a job cancelled during it = %+v, %v; want ErrWrongState naming both states", got, err)
	}
	h.wantState(j.ID, coordinator.StateCancelled)
	if _, err := c.RetryFrom(h.ctx(), j.ID, coordinator.StateDiscarded); !errors.Is(err, coordinator.ErrWrongState) {
		t.Fatalf("RetryFrom(discarded) of a cancelled job: %v", err)
	}
	h.wantState(j.ID, coordinator.StateCancelled)
	if got, err := c.RetryFrom(h.ctx(), j.ID, coordinator.StateCancelled); err != nil || got.State != coordinator.StateAvailable {
		t.Fatalf("RetryFrom(cancelled) of a cancelled job = %+v, %v; want it available", got, err)
	}
	h.wantState(j.ID, coordinator.StateAvailable)
}
