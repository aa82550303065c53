package coordtest

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
)

// Tests of a wall clock that steps (NTP, a VM's clock set after a resume)
// or that differs between daemons. The store keys times of day (when a
// job is due, when it finished, a schedule's last tick); what measures a
// length of time (a session's deadline, a job's timeout, a worker's
// pauses) runs on the monotonic clock and has tests of its own. Run adds
// them to the suite.
var clockStepTests = []suiteTest{
	{"ClockStepBackLeavesAvailableJobsClaimable", testClockStepBackClaimable},
	{"ClockStepsMoveTimedJobsByTheStep", testClockStepsMoveTimedJobs},
	{"PeriodicSkewedLeadersEnqueueEachTickOnce", testPeriodicSkewedLeaders},
	{"RetryAtPastIsNow", testRetryAtPastIsNow},
	{"RetryPastTheLatestTimeIsClamped", testRetryPastLatestClamped},
}

// testClockStepBackClaimable: after the clock steps back an hour, the
// jobs enqueued before the step (their times now an hour ahead of the
// clock), the jobs enqueued after it (keyed before the claim floor), and a
// lost run re-queued after it are all claimable at once: an available
// job's time orders it in its queue, and no claim waits for it.
func testClockStepBackClaimable(t *testing.T, h *harness) {
	woke := h.watchAvailable()
	s := h.session(h.c)
	var before []string
	for range 3 {
		h.seen(woke, "a job enqueued", func() { before = append(before, h.enqueue(coordinator.EnqueueParams{Kind: "k"}).ID) })
	}
	if r := h.claimOne(s); r.Job().ID != before[0] {
		t.Fatalf("claimed %s, want the oldest job %s", r.Job().ID, before[0])
	}
	// A run of the second job is lost after the step.
	lost := h.session(h.c)
	lostRun := h.claimOne(lost)

	h.clock.Advance(-time.Hour)
	var after []string
	for range 2 {
		h.seen(woke, "a job enqueued after the step", func() { after = append(after, h.enqueue(coordinator.EnqueueParams{Kind: "k"}).ID) })
	}
	if err := lost.Close(h.ctx()); err != nil {
		t.Fatal(err)
	}
	h.seen(woke, "the lost run re-queued", func() {
		if n, err := h.c.Reap(h.ctx(), nil, nil); err != nil || n != 1 {
			t.Fatalf("Reap = %d, %v; want the lost run re-queued", n, err)
		}
	})
	if got := h.get(lostRun.Job().ID); got.State != coordinator.StateAvailable || !got.ScheduledAt.Equal(h.clock.Now()) {
		t.Fatalf("lost run re-queued as %s at %s; want available at the clock's now %s", got.State, got.ScheduledAt, h.clock.Now())
	}
	runs, _, err := h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, 10, false)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range runs {
		got[r.Job().ID] = true
	}
	for _, id := range append(append([]string{lostRun.Job().ID}, before[2]), after...) {
		if !got[id] {
			t.Errorf("job %s not claimed after the clock stepped back an hour (claimed %d jobs)", id, len(runs))
		}
	}
	if len(runs) != 4 {
		t.Fatalf("claimed %d jobs, want 4", len(runs))
	}
}

// testClockStepsMoveTimedJobsByTheStep: a scheduled or retryable job is
// due at a time of day, as the clock of whoever promotes it reads it: a
// step back of an hour holds it an hour longer, a step forward makes it
// due at once; each is promoted once.
func testClockStepsMoveTimedJobs(t *testing.T, h *harness) {
	t0 := h.clock.Now()
	s := h.session(h.c)
	failed := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	if err := h.claimOne(s).Fail(h.ctx(), errors.New("boom"), coordinator.FailOpts{RetryAt: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	delayed := h.enqueue(coordinator.EnqueueParams{Kind: "k", ScheduledAt: t0.Add(time.Minute)})
	promote := func(want int) {
		t.Helper()
		if n, err := h.c.PromoteDue(h.ctx()); err != nil || n != want {
			t.Fatalf("PromoteDue at %s (%s from the start) = %d, %v; want %d", h.clock.Now().Format(time.RFC3339), h.clock.Now().Sub(t0), n, err, want)
		}
	}
	h.clock.Advance(-time.Hour)
	h.clock.Advance(2 * time.Minute) // both were due by now, had the clock not stepped
	promote(0)
	h.wantState(failed.ID, coordinator.StateRetryable)
	h.wantState(delayed.ID, coordinator.StateScheduled)
	h.clock.Advance(time.Hour - 2*time.Minute + time.Second) // back at the retry's time
	promote(1)
	h.wantState(failed.ID, coordinator.StateAvailable)
	h.clock.Advance(time.Minute - time.Second)
	promote(1)
	h.wantState(delayed.ID, coordinator.StateAvailable)

	// A step forward of a day: a job delayed by an hour is due at once.
	later := h.enqueue(coordinator.EnqueueParams{Kind: "k", ScheduledAt: h.clock.Now().Add(time.Hour)})
	h.clock.Advance(24 * time.Hour)
	promote(1)
	h.wantState(later.ID, coordinator.StateAvailable)
	promote(0)
}

// testPeriodicSkewedLeaders: two daemons whose clocks are two minutes
// apart lead in turn. Each tick is enqueued once, by the clock of the
// leader that enqueues it; the one behind enqueues nothing until its clock
// passes the last tick the other enqueued (it never enqueues that tick or
// an earlier one again), then goes on; none is lost.
func testPeriodicSkewedLeaders(t *testing.T, h *harness) {
	t0 := h.clock.Now().Truncate(time.Minute)
	aheadClk, ahead := h.clockedAt(t0.Add(2 * time.Minute))
	behindClk, behind := h.clockedAt(t0)
	pj := coordinator.PeriodicJob{Name: "skewed", Spec: "@every 1m", Job: coordinator.EnqueueParams{Kind: "skewed"}}
	step := func(c *coordinator.Coordinator, d time.Duration) coordinator.PeriodicState {
		t.Helper()
		aheadClk.Advance(d)
		behindClk.Advance(d)
		st, err := c.EnqueueDueTicks(h.ctx(), pj)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	step(ahead, 0) // the schedule starts at the clock ahead's now
	for range 5 {
		step(ahead, time.Minute)
	}
	if n := len(h.jobsOf("skewed")); n != 5 {
		t.Fatalf("the leader ahead enqueued %d ticks in 5 minutes, want 5", n)
	}
	// Their jobs run and complete, which frees their ticks' unique keys:
	// only the schedule's last tick keeps them from being enqueued again.
	s := h.session(h.c)
	for range 5 {
		if err := h.claimOne(s).Complete(h.ctx(), nil); err != nil {
			t.Fatal(err)
		}
	}
	// Leadership moves to the daemon two minutes behind: its clock reads
	// the last tick two minutes from now.
	for i := range 2 {
		if st := step(behind, 0); st.Enqueued != 5 {
			t.Fatalf("the leader behind, %d minutes before the last tick by its clock, enqueued a tick: %+v", 2-i, st)
		}
		behindClk.Advance(time.Minute)
		aheadClk.Advance(time.Minute)
	}
	if st := step(behind, time.Minute); st.Enqueued != 6 {
		t.Fatalf("the leader behind, a minute past the last tick by its clock: %+v; want the next tick enqueued", st)
	}
	// And back: the leader ahead catches up the two minutes its clock
	// is ahead by, within its catch-up window.
	if st := step(ahead, 0); st.Enqueued != 8 {
		t.Fatalf("the leader ahead again: %+v; want two more ticks", st)
	}
	checkTicks(t, h.jobsOf("skewed"), pj.Name, 8, time.Minute)
}

// testRetryAtPastIsNow: a handler's retry time in the past, even before
// the store's earliest keyable time (1678: times are keyed as Unix
// nanoseconds), makes the job due at once, as a past time of an enqueue
// does; it was keyed as due in the 23rd century.
func testRetryAtPastIsNow(t *testing.T, h *harness) {
	s := h.session(h.c)
	for _, at := range []time.Time{h.clock.Now().Add(-time.Hour), time.Date(1500, time.January, 1, 0, 0, 0, 0, time.UTC)} {
		j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
		if err := h.claimOne(s).Fail(h.ctx(), errors.New("boom"), coordinator.FailOpts{RetryAt: at}); err != nil {
			t.Fatal(err)
		}
		if got := h.get(j.ID); got.State != coordinator.StateRetryable || !got.ScheduledAt.Equal(h.clock.Now()) {
			t.Fatalf("failed with a retry at %s: %s at %s; want retryable at the clock's now %s", at, got.State, got.ScheduledAt, h.clock.Now())
		}
		if n, err := h.c.PromoteDue(h.ctx()); err != nil || n != 1 {
			t.Fatalf("PromoteDue = %d, %v; want the job due at once", n, err)
		}
		h.wantState(j.ID, coordinator.StateAvailable)
		r := h.claimOne(s)
		if r.Job().ID != j.ID {
			t.Fatalf("claimed %s, want %s", r.Job().ID, j.ID)
		}
		if err := r.Complete(h.ctx(), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// testRetryPastLatestClamped: a retry time after MaxScheduledAt (the
// latest time the store keys as Unix nanoseconds), a handler's or a retry
// policy's (the longest duration), is until that time, as a snooze's is:
// kept as it was, it was keyed past the end of Unix nanoseconds, as due at
// once (a job to be retried in three centuries ran again at once).
func testRetryPastLatestClamped(t *testing.T, h *harness) {
	longest := coordinator.Config{RetryPolicy: func(int, *coordinator.Job) time.Duration { return time.Duration(1<<63 - 1) }}
	for name, c := range map[string]*coordinator.Coordinator{"RetryAt": h.c, "RetryPolicy": h.coordinator(h.store, longest)} {
		j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
		runs, _, err := c.Claim(h.ctx(), h.session(c), coordinator.DefaultQueue, 1, false)
		if err != nil || len(runs) != 1 || runs[0].Job().ID != j.ID {
			t.Fatalf("%s: claim: %d runs, %v", name, len(runs), err)
		}
		var o coordinator.FailOpts
		if name == "RetryAt" {
			o.RetryAt = time.Date(2300, time.January, 1, 0, 0, 0, 0, time.UTC)
		}
		if err := runs[0].Fail(h.ctx(), errors.New("boom"), o); err != nil {
			t.Fatalf("%s: fail: %v", name, err)
		}
		if got := h.get(j.ID); got.State != coordinator.StateRetryable || !got.ScheduledAt.Equal(coordinator.MaxScheduledAt) {
			t.Fatalf("%s: failed with a retry after %s: %s at %s; want retryable at that time", name, coordinator.MaxScheduledAt, got.State, got.ScheduledAt)
		}
		if n, err := h.c.PromoteDue(h.ctx()); err != nil || n != 0 {
			t.Fatalf("%s: PromoteDue = %d, %v; want nothing due", name, n, err)
		}
		h.wantState(j.ID, coordinator.StateRetryable)
		if _, err := h.c.Cancel(h.ctx(), j.ID); err != nil {
			t.Fatal(err)
		}
	}
}
