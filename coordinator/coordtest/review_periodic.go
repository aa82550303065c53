package coordtest

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
)

// Tests from a review of periodic schedules, unique jobs and queue control.
// Run adds them to the suite.
var periodicReviewTests = []suiteTest{
	{"PeriodicChangedSpecDoesNotBackfill", testPeriodicChangedSpec},
	{"PeriodicClockBackwardsEnqueuesNoTickTwice", testPeriodicClockBackwards},
	{"PeriodicDSTFallBackFiresOnce", testPeriodicDSTFallBack},
	{"PeriodicDSTSpringForwardFires", testPeriodicDSTSpringForward},
	{"PeriodicDSTWildcardHoursUnchanged", testPeriodicDSTWildcard},
	{"PeriodicDSTHalfHourShiftFiresOnce", testPeriodicDSTHalfHour},
	{"UniqueHolderDeletedDuringEnqueue", testUniqueHolderDeleted},
	{"GlobalLimitSlotFreedByEveryOutcome", testSlotFreedByEveryOutcome},
	{"PeriodicEveryNeedsWholeSeconds", testPeriodicEveryWholeSeconds},
	{"PeriodicTickHeldByAJobIsSkipped", testPeriodicTickHeld},
	{"PeriodicTickKeyTakenDuringItsWriteIsSkipped", testPeriodicTickTakenMeanwhile},
	{"PeriodicTicksFitTheStoresRequestLimit", testPeriodicTicksFitRequestLimit},
	{"PeriodicDSTHalfHourFallBackKeepsEveryDay", testPeriodicDSTHalfHourFallBackDays},
}

// clockedAt returns a coordinator on h's store and namespace with a clock
// of its own, at t0.
func (h *harness) clockedAt(t0 time.Time) (*Clock, *coordinator.Coordinator) {
	h.t.Helper()
	clk := NewClock(t0)
	c, err := coordinator.New(h.store, coordinator.Config{Namespace: h.ns, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		h.t.Fatalf("coordinator.New: %v", err)
	}
	return clk, c
}

// tickTimes returns the ticks of the periodic jobs of kind (from their
// unique keys), in order.
func tickTimes(t *testing.T, jobs []*coordinator.Job, name string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, j := range jobs {
		ts, ok := strings.CutPrefix(j.UniqueKey, "periodic:"+name+":")
		if !ok {
			t.Fatalf("periodic job %s has unique key %q", j.ID, j.UniqueKey)
		}
		tick, err := time.Parse(time.RFC3339, ts)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tick.UTC())
	}
	for i := 1; i < len(out); i++ {
		for k := i; k > 0 && out[k].Before(out[k-1]); k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return out
}

// stepTicks calls EnqueueDueTicks every step until the clock has moved by
// total.
func stepTicks(t *testing.T, c *coordinator.Coordinator, clk *Clock, pj coordinator.PeriodicJob, step, total time.Duration) {
	t.Helper()
	for d := time.Duration(0); d < total; d += step {
		clk.Advance(step)
		if _, err := c.EnqueueDueTicks(context.Background(), pj); err != nil {
			t.Fatal(err)
		}
	}
}

// testPeriodicChangedSpec: a schedule whose spec changes (a new config
// while the store holds the old spec's last tick) starts anew, as a new
// schedule does: it does not back-fill the new spec's ticks between the
// old spec's last tick and now.
func testPeriodicChangedSpec(t *testing.T, h *harness) {
	pj := coordinator.PeriodicJob{Name: "changed", Spec: "@every 1h", Job: coordinator.EnqueueParams{Kind: "changed"}}
	if _, err := h.c.EnqueueDueTicks(h.ctx(), pj); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Hour)
	if st, err := h.c.EnqueueDueTicks(h.ctx(), pj); err != nil || st.Enqueued != 1 {
		t.Fatalf("first hourly tick: %+v, %v", st, err)
	}
	h.clock.Advance(59 * time.Minute)
	pj.Spec = "@every 1m"
	st, err := h.c.EnqueueDueTicks(h.ctx(), pj)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(h.jobsOf("changed")); n != 1 {
		t.Fatalf("changing the spec from hourly to every minute enqueued %d ticks at once (state %+v); want none until the new spec's first tick", n-1, st)
	}
	if st.Spec != "@every 1m" || !st.NextAt.After(h.clock.Now()) {
		t.Fatalf("state after the change: %+v (now %v)", st, h.clock.Now())
	}
	h.clock.Advance(time.Minute)
	if st, err = h.c.EnqueueDueTicks(h.ctx(), pj); err != nil || st.Enqueued != 2 {
		t.Fatalf("first tick of the new spec: %+v, %v", st, err)
	}
	if l, err := h.c.ListPeriodic(h.ctx()); err != nil || len(l) != 1 || !l[0].NextAt.Equal(st.NextAt) {
		t.Fatalf("ListPeriodic = %+v, %v; want next %v", l, err, st.NextAt)
	}
}

// testPeriodicClockBackwards: a clock that jumps back after a tick was
// enqueued never enqueues that tick (or an earlier one) again.
func testPeriodicClockBackwards(t *testing.T, h *harness) {
	pj := coordinator.PeriodicJob{Name: "backwards", Spec: "@every 10m", Job: coordinator.EnqueueParams{Kind: "backwards"}}
	if _, err := h.c.EnqueueDueTicks(h.ctx(), pj); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(20 * time.Minute)
	if st, err := h.c.EnqueueDueTicks(h.ctx(), pj); err != nil || st.Enqueued != 2 {
		t.Fatalf("two ticks: %+v, %v", st, err)
	}
	h.clock.Advance(-25 * time.Minute)
	for range 3 {
		if st, err := h.c.EnqueueDueTicks(h.ctx(), pj); err != nil || st.Enqueued != 2 {
			t.Fatalf("after the clock went back: %+v, %v", st, err)
		}
		h.clock.Advance(5 * time.Minute)
	}
	// Back at 10 minutes after the start: the tick at 30 is next.
	h.clock.Advance(20 * time.Minute)
	if st, err := h.c.EnqueueDueTicks(h.ctx(), pj); err != nil || st.Enqueued != 3 {
		t.Fatalf("next tick: %+v, %v", st, err)
	}
	checkTicks(t, h.jobsOf("backwards"), pj.Name, 3, 10*time.Minute)
}

// testPeriodicDSTFallBack: a daily job at a wall-clock time that occurs
// twice when the clocks go back (02:30 in Paris on 2026-10-25) runs once
// that day, as cron does.
func testPeriodicDSTFallBack(t *testing.T, h *harness) {
	clk, c := h.clockedAt(time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC))
	pj := coordinator.PeriodicJob{Name: "fallback", Spec: "CRON_TZ=Europe/Paris 30 2 * * *", Job: coordinator.EnqueueParams{Kind: "fallback"}}
	if _, err := c.EnqueueDueTicks(h.ctx(), pj); err != nil {
		t.Fatal(err)
	}
	stepTicks(t, c, clk, pj, 15*time.Minute, 3*24*time.Hour)
	got := tickTimes(t, h.jobsOf("fallback"), pj.Name)
	want := []time.Time{
		time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), // 02:30 CEST
		time.Date(2026, 10, 26, 1, 30, 0, 0, time.UTC), // 02:30 CET
		time.Date(2026, 10, 27, 1, 30, 0, 0, time.UTC),
	}
	if !equalTimes(got, want) {
		t.Fatalf("ticks %v, want %v (one a day)", got, want)
	}
}

// testPeriodicDSTSpringForward: a daily job at a wall-clock time that does
// not exist when the clocks go forward (02:30 in Paris on 2026-03-29) runs
// at the change (03:00 CEST), as cron does, instead of not at all.
func testPeriodicDSTSpringForward(t *testing.T, h *harness) {
	clk, c := h.clockedAt(time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC))
	pj := coordinator.PeriodicJob{Name: "springforward", Spec: "CRON_TZ=Europe/Paris 30 2 * * *", Job: coordinator.EnqueueParams{Kind: "springforward"}}
	if _, err := c.EnqueueDueTicks(h.ctx(), pj); err != nil {
		t.Fatal(err)
	}
	stepTicks(t, c, clk, pj, 15*time.Minute, 3*24*time.Hour)
	got := tickTimes(t, h.jobsOf("springforward"), pj.Name)
	want := []time.Time{
		time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), // 03:00 CEST, the change
		time.Date(2026, 3, 30, 0, 30, 0, 0, time.UTC),
		time.Date(2026, 3, 31, 0, 30, 0, 0, time.UTC),
	}
	if !equalTimes(got, want) {
		t.Fatalf("ticks %v, want %v (one a day)", got, want)
	}
}

// testPeriodicDSTWildcard: specs that run every hour keep running every
// hour of real time across both changes (the repeated hour runs again, the
// missing one has no ticks), and ListPeriodic agrees.
func testPeriodicDSTWildcard(t *testing.T, h *harness) {
	for _, tc := range []struct {
		name string
		from time.Time
	}{
		{"wildfall", time.Date(2026, 10, 24, 22, 0, 0, 0, time.UTC)},
		{"wildspring", time.Date(2026, 3, 28, 22, 0, 0, 0, time.UTC)},
	} {
		clk, c := h.clockedAt(tc.from)
		pj := coordinator.PeriodicJob{Name: tc.name, Spec: "CRON_TZ=Europe/Paris 0 * * * *", Job: coordinator.EnqueueParams{Kind: tc.name}}
		if _, err := c.EnqueueDueTicks(h.ctx(), pj); err != nil {
			t.Fatal(err)
		}
		stepTicks(t, c, clk, pj, 20*time.Minute, 6*time.Hour)
		got := tickTimes(t, h.jobsOf(tc.name), pj.Name)
		if len(got) != 6 {
			t.Fatalf("%s: ticks %v, want 6, an hour apart", tc.name, got)
		}
		for i := 1; i < len(got); i++ {
			if got[i].Sub(got[i-1]) != time.Hour {
				t.Fatalf("%s: ticks %v, want an hour apart", tc.name, got)
			}
		}
	}
}

// testPeriodicDSTHalfHour: on Lord Howe Island the clocks move by half
// an hour (02:00 → 02:30 on 2026-10-04, 02:00 → 01:30 on 2026-04-05). A
// daily job at 01:45 runs once each day across both changes; robfig/cron,
// which assumes whole-hour changes, also ran it at 02:45 on the first.
func testPeriodicDSTHalfHour(t *testing.T, h *harness) {
	for _, tc := range []struct {
		name string
		from time.Time
		want []time.Time
	}{
		{"halfspring", time.Date(2026, 10, 3, 12, 0, 0, 0, time.UTC), []time.Time{
			time.Date(2026, 10, 3, 15, 15, 0, 0, time.UTC), // 01:45 +10:30
			time.Date(2026, 10, 4, 14, 45, 0, 0, time.UTC), // 01:45 +11:00
			time.Date(2026, 10, 5, 14, 45, 0, 0, time.UTC),
		}},
		{"halffall", time.Date(2026, 4, 4, 12, 0, 0, 0, time.UTC), []time.Time{
			time.Date(2026, 4, 4, 14, 45, 0, 0, time.UTC), // 01:45 +11:00
			time.Date(2026, 4, 5, 15, 15, 0, 0, time.UTC), // 01:45 +10:30
			time.Date(2026, 4, 6, 15, 15, 0, 0, time.UTC),
		}},
	} {
		clk, c := h.clockedAt(tc.from)
		pj := coordinator.PeriodicJob{Name: tc.name, Spec: "CRON_TZ=Australia/Lord_Howe 45 1 * * *", Job: coordinator.EnqueueParams{Kind: tc.name}}
		if _, err := c.EnqueueDueTicks(h.ctx(), pj); err != nil {
			t.Fatal(err)
		}
		stepTicks(t, c, clk, pj, 15*time.Minute, 3*24*time.Hour)
		if got := tickTimes(t, h.jobsOf(tc.name), pj.Name); !equalTimes(got, tc.want) {
			t.Fatalf("%s: ticks %v, want %v (one a day)", tc.name, got, tc.want)
		}
	}
}

// testPeriodicDSTHalfHourFallBackKeepsEveryDay: when the clocks go back
// half an hour on Lord Howe Island (02:00 → 01:30 on 2026-04-05), daily
// jobs at times that occur once still run every day: robfig/cron, which
// steps hours in the zone, ran the 03:00 job of that day a day late and
// skipped the next day's 00:00.
func testPeriodicDSTHalfHourFallBackDays(t *testing.T, h *harness) {
	for _, tc := range []struct {
		name, spec string
		want       []time.Time
	}{
		{"halfthree", "0 3 * * *", []time.Time{
			time.Date(2026, 4, 3, 16, 0, 0, 0, time.UTC),  // 03:00 +11:00
			time.Date(2026, 4, 4, 16, 30, 0, 0, time.UTC), // 03:00 +10:30, the day of the change
			time.Date(2026, 4, 5, 16, 30, 0, 0, time.UTC),
		}},
		{"halfmidnight", "0 0 * * *", []time.Time{
			time.Date(2026, 4, 3, 13, 0, 0, 0, time.UTC),  // 00:00 +11:00
			time.Date(2026, 4, 4, 13, 0, 0, 0, time.UTC),  // 00:00 +11:00, the day of the change
			time.Date(2026, 4, 5, 13, 30, 0, 0, time.UTC), // 00:00 +10:30
		}},
	} {
		clk, c := h.clockedAt(time.Date(2026, 4, 3, 12, 0, 0, 0, time.UTC))
		pj := coordinator.PeriodicJob{Name: tc.name, Spec: "CRON_TZ=Australia/Lord_Howe " + tc.spec, Job: coordinator.EnqueueParams{Kind: tc.name}}
		if _, err := c.EnqueueDueTicks(h.ctx(), pj); err != nil {
			t.Fatal(err)
		}
		stepTicks(t, c, clk, pj, 15*time.Minute, 3*24*time.Hour)
		if got := tickTimes(t, h.jobsOf(tc.name), pj.Name); !equalTimes(got, tc.want) {
			t.Errorf("%s (%s): ticks %v, want %v (one a day)", tc.name, tc.spec, got, tc.want)
		}
	}
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// testUniqueHolderDeleted: an enqueue whose unique key is held by a job
// that is finished and deleted before the enqueue reads it inserts its
// job (the key is free) instead of failing with the holder's ErrNotFound.
func testUniqueHolderDeleted(t *testing.T, h *harness) {
	a := h.enqueue(coordinator.EnqueueParams{Kind: "u", UniqueKey: "holder-deleted"})
	gate := kvtest.NewGate(h.store)
	jobKey := "/j/" + a.ID
	gate.Match = func(t kv.Txn) bool {
		return !kvtest.Writes(t) && len(t.Then) > 0 && strings.HasSuffix(t.Then[0].Key, jobKey)
	}
	gated := h.coordinator(gate, coordinator.Config{})
	gate.Arm()
	type result struct {
		r   coordinator.EnqueueResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := gated.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "u", UniqueKey: "holder-deleted"})
		done <- result{r, err}
	}()
	<-gate.Held() // the insert found the key held by a; reading a
	if _, err := h.c.Cancel(h.ctx(), a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Delete(h.ctx(), a.ID); err != nil {
		t.Fatal(err)
	}
	gate.Open()
	res := <-done
	if res.err != nil {
		t.Fatalf("enqueue whose unique key's holder was deleted meanwhile: %v", res.err)
	}
	if res.r.Existed || res.r.Job == nil || res.r.Job.ID == a.ID {
		t.Fatalf("enqueue = %+v, want a new job inserted", res.r)
	}
	if j := h.get(res.r.Job.ID); j.State != coordinator.StateAvailable || j.UniqueKey != "holder-deleted" {
		t.Fatalf("inserted job = %+v", j)
	}
	// It holds the key: a second enqueue finds it.
	r, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "u", UniqueKey: "holder-deleted"})
	if err != nil || !r.Existed || r.Job.ID != res.r.Job.ID {
		t.Fatalf("second enqueue = %+v, %v", r, err)
	}
}

// testSlotFreedByEveryOutcome: with a global limit of 1, every way a run
// ends (complete, fail to retryable, fail to discarded, snooze, cancel,
// release, its session's lease ending) frees the slot for the next claim.
func testSlotFreedByEveryOutcome(t *testing.T, h *harness) {
	const q = "slotted"
	if _, _, err := h.c.SetQueueLimit(h.ctx(), q, 1); err != nil {
		t.Fatal(err)
	}
	sess := h.session(h.c)
	claim := func(s *coordinator.Session) *coordinator.Run {
		t.Helper()
		runs, st, err := h.c.Claim(h.ctx(), s, q, 4, false)
		if err != nil || len(runs) != 1 {
			t.Fatalf("claim: %d runs, %+v, %v; want 1", len(runs), st, err)
		}
		// The slot is taken: nothing more until it is freed.
		more, st, err := h.c.Claim(h.ctx(), s, q, 4, false)
		if err != nil || len(more) != 0 || !st.Held {
			t.Fatalf("claim over the limit: %d runs, %+v, %v", len(more), st, err)
		}
		return runs[0]
	}
	outcomes := []struct {
		name string
		end  func(r *coordinator.Run) error
	}{
		{"complete", func(r *coordinator.Run) error { return r.Complete(h.ctx(), nil) }},
		{"fail", func(r *coordinator.Run) error { return r.Fail(h.ctx(), errors.New("x"), coordinator.FailOpts{}) }},
		{"discard", func(r *coordinator.Run) error {
			return r.Fail(h.ctx(), errors.New("x"), coordinator.FailOpts{Discard: true})
		}},
		{"snooze", func(r *coordinator.Run) error { return r.Snooze(h.ctx(), time.Hour) }},
		{"cancel", func(r *coordinator.Run) error { return r.Cancel(h.ctx(), nil) }},
		{"release", func(r *coordinator.Run) error { return r.Release(h.ctx()) }},
	}
	for range len(outcomes) + 2 {
		h.enqueue(coordinator.EnqueueParams{Kind: "s", Queue: q})
	}
	for _, o := range outcomes {
		if err := o.end(claim(sess)); err != nil {
			t.Fatalf("%s: %v", o.name, err)
		}
	}
	// The lease ends: the slot goes with it, and the reaper re-queues the
	// job.
	lost := claim(sess)
	if err := h.store.Revoke(h.ctx(), sess.Lease()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Reap(h.ctx(), nil, nil); err != nil {
		t.Fatal(err)
	}
	h.wantState(lost.Job().ID, coordinator.StateAvailable)
	claim(h.session(h.c))
	qs, err := h.c.Queues(h.ctx())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range qs {
		if x.Name == q && x.Held != 1 {
			t.Fatalf("queue %s holds %d slots, want 1", q, x.Held)
		}
	}
}

// testPeriodicEveryWholeSeconds: an @every that is not a whole number of
// seconds (robfig/cron truncates it: @every 1500ms ran every second) is
// refused, saying to use whole seconds, before anything is written.
func testPeriodicEveryWholeSeconds(t *testing.T, h *harness) {
	for _, spec := range []string{"@every 1500ms", "@every 1.5s", "@every 1m0.5s", "CRON_TZ=Europe/Paris @every 2500ms"} {
		_, err := coordinator.ParseSchedule(spec)
		if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "whole seconds") || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseSchedule(%q): %v, want ErrInvalid saying to use whole seconds", spec, err)
		}
		pj := coordinator.PeriodicJob{Name: "frac", Spec: spec, Job: coordinator.EnqueueParams{Kind: "frac"}}
		if err := h.c.ValidatePeriodic([]coordinator.PeriodicJob{pj}); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("ValidatePeriodic(%q): %v, want ErrInvalid", spec, err)
		}
		if _, err := h.c.EnqueueDueTicks(h.ctx(), pj); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("EnqueueDueTicks(%q): %v, want ErrInvalid", spec, err)
		}
		// Refused at once, before the loop (which a cancelled context
		// ends).
		ctx, cancel := context.WithCancel(h.ctx())
		cancel()
		if err := h.c.RunPeriodic(ctx, []coordinator.PeriodicJob{pj}); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("RunPeriodic(%q): %v, want ErrInvalid", spec, err)
		}
	}
	for _, spec := range []string{"@every 2s", "@every 90s", "@every 1m30s", "@every 1h"} {
		if _, err := coordinator.ParseSchedule(spec); err != nil {
			t.Errorf("ParseSchedule(%q): %v", spec, err)
		}
	}
	if st, err := h.c.ListPeriodic(h.ctx()); err != nil || len(st) != 0 {
		t.Errorf("refused schedules wrote state: %+v, %v", st, err)
	}
}

// recordLogs is a slog handler that keeps every record.
type recordLogs struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recordLogs) Enabled(context.Context, slog.Level) bool { return true }
func (r *recordLogs) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *recordLogs) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recordLogs) WithGroup(string) slog.Handler      { return r }

// messages returns the messages logged with periodic=name, each with its
// attributes as key=value.
func (r *recordLogs) messages(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		line, ours := rec.Message, false
		rec.Attrs(func(a slog.Attr) bool {
			ours = ours || (a.Key == "periodic" && a.Value.String() == name)
			line += " " + a.String()
			return true
		})
		if ours {
			out = append(out, line)
		}
	}
	return out
}

// testPeriodicTickHeld: a tick whose unique key a job already holds (a
// user's job enqueued with that key) enqueues nothing: it is counted as
// skipped, not as enqueued, and logged as skipped, naming the holder.
func testPeriodicTickHeld(t *testing.T, h *harness) {
	logs := &recordLogs{}
	c := h.coordinator(h.store, coordinator.Config{Logger: slog.New(logs)})
	pj := coordinator.PeriodicJob{Name: "held", Spec: "@every 10m", Job: coordinator.EnqueueParams{Kind: "held"}}
	st, err := c.EnqueueDueTicks(h.ctx(), pj)
	if err != nil {
		t.Fatal(err)
	}
	first := st.NextAt
	user := h.enqueue(coordinator.EnqueueParams{Kind: "user", UniqueKey: "periodic:held:" + first.UTC().Format(time.RFC3339)})
	h.clock.Advance(10 * time.Minute)
	if st, err = c.EnqueueDueTicks(h.ctx(), pj); err != nil {
		t.Fatal(err)
	}
	if n := len(h.jobsOf("held")); n != 0 {
		t.Fatalf("%d tick jobs enqueued over a held unique key", n)
	}
	if st.Enqueued != 0 || st.Skipped != 1 || st.LastTick == nil || !st.LastTick.Equal(first) || st.LastJobID != "" {
		t.Fatalf("state after a held tick: %+v; want enqueued 0, skipped 1, last tick %v, no job", st, first)
	}
	msgs := logs.messages("held")
	if len(msgs) != 1 || strings.Contains(msgs[0], "enqueued") || !strings.Contains(msgs[0], "skipped") || !strings.Contains(msgs[0], user.ID) {
		t.Fatalf("logged %q; want one line saying the tick was skipped, naming job %s", msgs, user.ID)
	}
	// The next tick, its key free, is enqueued and counted as such.
	h.clock.Advance(10 * time.Minute)
	if st, err = c.EnqueueDueTicks(h.ctx(), pj); err != nil {
		t.Fatal(err)
	}
	jobs := h.jobsOf("held")
	if len(jobs) != 1 || st.Enqueued != 1 || st.Skipped != 1 || st.LastJobID != jobs[0].ID {
		t.Fatalf("next tick: %d jobs, state %+v", len(jobs), st)
	}
	if msgs := logs.messages("held"); len(msgs) != 2 || !strings.Contains(msgs[1], "enqueued") || !strings.Contains(msgs[1], jobs[0].ID) {
		t.Fatalf("logged %q; want the second tick logged as enqueued", msgs)
	}
}

// testPeriodicTickTakenMeanwhile: a tick whose unique key was free when
// its schedule read it, and is taken by a user's job before the tick's
// write commits, is skipped and counted so (the write compares the keys
// read free): not counted as enqueued, with no job written.
func testPeriodicTickTakenMeanwhile(t *testing.T, h *harness) {
	logs := &recordLogs{}
	gate := kvtest.NewGate(h.store)
	gate.Match = func(x kv.Txn) bool { // the schedule's write
		for _, op := range x.Then {
			if op.Type == kv.OpPut && strings.HasSuffix(op.Key, "p/taken") {
				return true
			}
		}
		return false
	}
	c := h.coordinator(gate, coordinator.Config{Logger: slog.New(logs)})
	pj := coordinator.PeriodicJob{Name: "taken", Spec: "@every 10m", Job: coordinator.EnqueueParams{Kind: "taken"}}
	st, err := c.EnqueueDueTicks(h.ctx(), pj)
	if err != nil {
		t.Fatal(err)
	}
	tick := st.NextAt
	h.clock.Advance(10 * time.Minute)
	gate.Arm()
	type result struct {
		st  coordinator.PeriodicState
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := c.EnqueueDueTicks(h.ctx(), pj)
		done <- result{st, err}
	}()
	<-gate.Held() // the tick's key read free; its write not committed
	user := h.enqueue(coordinator.EnqueueParams{Kind: "user", UniqueKey: "periodic:taken:" + tick.UTC().Format(time.RFC3339)})
	gate.Open()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if n := len(h.jobsOf("taken")); n != 0 || r.st.Enqueued != 0 || r.st.Skipped != 1 || r.st.LastJobID != "" {
		t.Fatalf("tick whose key was taken during its write: %d jobs, state %+v; want none, enqueued 0, skipped 1", n, r.st)
	}
	if msgs := logs.messages("taken"); len(msgs) != 1 || !strings.Contains(msgs[0], "skipped") || !strings.Contains(msgs[0], user.ID) {
		t.Fatalf("logged %q; want one line saying the tick was skipped, naming job %s", msgs, user.ID)
	}
}

// testPeriodicTicksFitRequestLimit: ticks due together (after a downtime)
// whose jobs, as stored, do not fit in one request of the store together
// (JSON escaping grows a payload: "<" is stored as "\u003c") are enqueued
// in as many transactions as they need, each tick once; a schedule whose
// one tick's job does not fit at all is refused as bad input before
// anything is written, as such an enqueue is.
func testPeriodicTicksFitRequestLimit(t *testing.T, h *harness) {
	const limit = 256 << 10
	c := h.coordinator(&kvtest.Limit{Store: h.store, MaxBytes: limit}, coordinator.Config{})
	// 9 KiB of payload, 54 KiB as stored, twice per job: four jobs fit in
	// one request, not ten.
	payload := json.RawMessage(`"` + strings.Repeat("<", 9<<10) + `"`)
	pj := coordinator.PeriodicJob{Name: "escaped", Spec: "@every 1m", Job: coordinator.EnqueueParams{Kind: "escaped", Payload: payload}}
	if _, err := c.EnqueueDueTicks(h.ctx(), pj); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(10 * time.Minute)
	st, err := c.EnqueueDueTicks(h.ctx(), pj)
	if err != nil {
		t.Fatalf("ten ticks due at once, whose jobs fit one by one: %v", err)
	}
	if st.Enqueued != 10 || !st.NextAt.After(h.clock.Now()) {
		t.Fatalf("state after ten ticks due at once: %+v; want 10 enqueued", st)
	}
	checkTicks(t, h.jobsOf("escaped"), pj.Name, 10, time.Minute)

	// 30 KiB, within the payload limit (56 KiB on this store), 180 KiB
	// as stored: the job and its queue's copy do not fit.
	big := coordinator.PeriodicJob{Name: "toobig", Spec: "@every 1m", Job: coordinator.EnqueueParams{Kind: "toobig", Payload: json.RawMessage(`"` + strings.Repeat("<", 30<<10) + `"`)}}
	if err := c.ValidatePeriodic([]coordinator.PeriodicJob{big}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("ValidatePeriodic of a schedule whose job does not fit the store's request: %v, want ErrInvalid", err)
	}
	if _, err := c.EnqueueDueTicks(h.ctx(), big); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("EnqueueDueTicks of a schedule whose job does not fit the store's request: %v, want ErrInvalid", err)
	}
	if l, err := c.ListPeriodic(h.ctx()); err != nil || len(l) != 1 {
		t.Fatalf("ListPeriodic = %+v, %v; want the refused schedule not stored", l, err)
	}
}
