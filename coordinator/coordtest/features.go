package coordtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
	"golang.org/x/sync/errgroup"
)

// Tests of periodic jobs, unique options, queue control and operations on
// jobs (issue 6). Run adds them to the suite.
var featureTests = []suiteTest{
	{"PeriodicLeadersInTurnEnqueueEachTickOnce", testPeriodicLeaders},
	{"PeriodicOverlappingLeadersEnqueueEachTickOnce", testPeriodicOverlap},
	{"PeriodicCatchUpWindow", testPeriodicCatchUp},
	{"PeriodicBadSpecRefused", testPeriodicBadSpec},
	{"UniqueByArgsRaceInsertsOne", testUniqueByArgsRace},
	{"UniqueByQueuePeriodAndState", testUniqueOptions},
	{"UniqueDuplicatesInOneBatch", testUniqueDuplicatesInOneBatch},
	{"PausedQueueNotClaimedAcrossRestart", testPauseAcrossRestart},
	{"PauseRefusesClaimInFlight", testPauseRefusesClaimInFlight},
	{"RefusedCandidatesStayClaimable", testRefusedCandidatesStayClaimable},
	{"FloorHidesNoJobInABusyQueue", testFloorHidesNoJobInABusyQueue},
	{"FloorHidesNoJobAfterClockStepsBack", testFloorHidesNoJobAfterClockStepBack},
	{"FailedClaimLeavesItsJobsClaimable", testFailedClaimLeavesJobsClaimable},
	{"GlobalQueueLimitUnderLeases", testGlobalLimit},
	{"GlobalQueueLimitRace", testGlobalLimitRace},
	{"OrphanedClaimFreesItsSlot", testOrphanFreesSlot},
	{"RetryAndDeleteByState", testRetryDelete},
	{"CancelManyByFilter", testCancelMany},
	{"CancelManyPastOnePage", testCancelManyPastOnePage},
	{"EnqueueHooksAndMetadata", testEnqueueHooks},
	{"FailMaxAttemptsOverride", testFailMaxAttempts},
}

// jobsOf lists every job of kind.
func (h *harness) jobsOf(kind string) []*coordinator.Job {
	h.t.Helper()
	page, err := h.c.List(h.ctx(), coordinator.ListParams{Kind: kind, Limit: coordinator.MaxListLimit})
	if err != nil {
		h.t.Fatalf("List: %v", err)
	}
	return page.Jobs
}

// eventually polls cond (in real time) until it holds or 15s pass.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkTicks checks that the periodic jobs of kind are exactly one per
// tick, the ticks consecutive multiples of every after the first.
func checkTicks(t *testing.T, jobs []*coordinator.Job, name string, want int, every time.Duration) {
	t.Helper()
	var ticks []time.Time
	seen := map[string]string{}
	for _, j := range jobs {
		if prev, dup := seen[j.UniqueKey]; dup {
			t.Fatalf("tick %s enqueued twice: jobs %s and %s", j.UniqueKey, prev, j.ID)
		}
		seen[j.UniqueKey] = j.ID
		ts, ok := strings.CutPrefix(j.UniqueKey, "periodic:"+name+":")
		if !ok {
			t.Fatalf("periodic job %s has unique key %q", j.ID, j.UniqueKey)
		}
		tick, err := time.Parse(time.RFC3339, ts)
		if err != nil {
			t.Fatal(err)
		}
		ticks = append(ticks, tick)
	}
	if len(ticks) != want {
		t.Fatalf("%d ticks enqueued, want %d: %v", len(ticks), want, ticks)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != every {
			t.Fatalf("ticks %v and %v are %s apart, want %s (a tick was skipped)", ticks[i-1], ticks[i], d, every)
		}
	}
}

// testPeriodicLeaders: two daemons run the periodic loop under the
// maintenance election; the leader loses its lease every other tick, so
// they lead in turn. Every tick is enqueued once, none is skipped (ticks
// due while no leader ran are caught up).
func testPeriodicLeaders(t *testing.T, h *harness) {
	pj := coordinator.PeriodicJob{Name: "every-minute", Spec: "@every 1m", Job: coordinator.EnqueueParams{Kind: "tick"}}
	type daemon struct {
		c    *coordinator.Coordinator
		sess atomic.Pointer[coordinator.Session]
	}
	ctx, cancel := context.WithCancel(h.ctx())
	var wg sync.WaitGroup
	var ds []*daemon
	for range 2 {
		d := &daemon{c: h.coordinator(h.store, coordinator.Config{})}
		d.sess.Store(h.session(d.c))
		ds = append(ds, d)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = d.c.RunElected(ctx, "maintenance", d.sess.Load, func(ctx context.Context) error {
				return d.c.RunPeriodic(ctx, []coordinator.PeriodicJob{pj})
			})
		}()
	}
	defer func() {
		cancel()
		for _, d := range ds {
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = d.sess.Load().Close(cctx)
			ccancel()
		}
		wg.Wait()
	}()
	h.eventually("the schedule to be registered", func() bool {
		st, err := h.c.ListPeriodic(h.ctx())
		return err == nil && len(st) == 1
	})
	leaders := map[string]bool{}
	for round := 1; round <= 6; round++ {
		var leader string
		h.eventually("a leader", func() bool {
			l, err := h.c.Leader(h.ctx(), "maintenance")
			leader = l
			return err == nil && l != ""
		})
		leaders[leader] = true
		h.clock.Advance(time.Minute)
		nudged := time.Duration(0)
		h.eventually(fmt.Sprintf("tick %d", round), func() bool {
			if len(h.jobsOf("tick")) >= round {
				return true
			}
			// The leader may have armed its timer just after the advance
			// (on the new time), for at most a second (RunPeriodic looks
			// at the clock that often): nudge the fake clock so it fires.
			// The nudges, 5 s a round at most, stay far below the next
			// minute's tick over all six rounds.
			if nudged < 5*time.Second {
				h.clock.Advance(100 * time.Millisecond)
				nudged += 100 * time.Millisecond
			}
			return false
		})
		if round%2 == 1 {
			// The leader's lease goes: the other daemon takes over; the
			// old one starts a new session and campaigns again.
			for _, d := range ds {
				if s := d.sess.Load(); s.WorkerID() == leader {
					if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
						t.Fatal(err)
					}
					d.sess.Store(h.session(d.c))
				}
			}
			h.eventually("a new leader", func() bool {
				l, err := h.c.Leader(h.ctx(), "maintenance")
				return err == nil && l != "" && l != leader
			})
		}
	}
	// Give a late duplicate a chance to show.
	time.Sleep(50 * time.Millisecond)
	checkTicks(t, h.jobsOf("tick"), pj.Name, 6, time.Minute)
	if len(leaders) < 2 {
		t.Fatalf("only %d daemon led", len(leaders))
	}
	st, err := h.c.ListPeriodic(h.ctx())
	if err != nil || len(st) != 1 || st[0].Enqueued != 6 || st[0].Skipped != 0 || st[0].Kind != "tick" || st[0].Spec != "@every 1m" {
		t.Fatalf("ListPeriodic = %+v, %v", st, err)
	}
	if !st[0].NextAt.After(h.clock.Now().Add(-time.Second)) || st[0].LastTick == nil {
		t.Fatalf("next run %v, last tick %v; now %v", st[0].NextAt, st[0].LastTick, h.clock.Now())
	}
}

// testPeriodicOverlap: leaders that overlap (a paused one that has not
// noticed it lost) race on every tick while tick jobs finish (which frees
// their unique keys, so only the stored last tick stops a stale leader);
// each tick is enqueued once.
func testPeriodicOverlap(t *testing.T, h *harness) {
	pj := coordinator.PeriodicJob{Name: "overlap", Spec: "*/10 * * * * *", Job: coordinator.EnqueueParams{Kind: "tock", Payload: json.RawMessage(`{"x":1}`)}}
	cs := []*coordinator.Coordinator{h.c, h.coordinator(h.store, coordinator.Config{})}
	if _, err := h.c.EnqueueDueTicks(h.ctx(), pj); err != nil {
		t.Fatal(err)
	}
	// A stale leader read the schedule before the tick was enqueued and
	// writes after its job finished: the stored last tick refuses it.
	gate := kvtest.NewGate(h.store)
	stale := h.coordinator(gate, coordinator.Config{})
	h.clock.Advance(10 * time.Second)
	gate.Arm()
	staleDone := make(chan error, 1)
	go func() {
		_, err := stale.EnqueueDueTicks(h.ctx(), pj)
		staleDone <- err
	}()
	<-gate.Held()
	if _, err := h.c.EnqueueDueTicks(h.ctx(), pj); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.CancelMany(h.ctx(), coordinator.CancelFilter{Kind: "tock"}); err != nil {
		t.Fatal(err)
	}
	gate.Open()
	if err := <-staleDone; err != nil {
		t.Fatal(err)
	}
	checkTicks(t, h.jobsOf("tock"), pj.Name, 1, 0)

	const rounds, racers = 12, 8
	ctx, stop := context.WithCancel(h.ctx())
	g, gctx := errgroup.WithContext(ctx)
	for i := range racers {
		c := cs[i%2]
		g.Go(func() error {
			for gctx.Err() == nil {
				if _, err := c.EnqueueDueTicks(gctx, pj); err != nil && gctx.Err() == nil {
					return err
				}
			}
			return nil
		})
	}
	for round := 2; round <= rounds; round++ {
		h.clock.Advance(10 * time.Second)
		h.eventually(fmt.Sprintf("tick %d", round), func() bool { return len(h.jobsOf("tock")) >= round })
		// The tick's job finishes: its unique key is free again.
		if _, err := h.c.CancelMany(h.ctx(), coordinator.CancelFilter{Kind: "tock"}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	stop()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	jobs := h.jobsOf("tock")
	checkTicks(t, jobs, pj.Name, rounds, 10*time.Second)
	if string(jobs[0].Payload) != `{"x":1}` || jobs[0].Kind != "tock" {
		t.Fatalf("tick job = %+v", jobs[0])
	}
}

// testPeriodicCatchUp: ticks due while no leader ran are enqueued late
// within the catch-up window, and skipped (and counted) beyond it.
func testPeriodicCatchUp(t *testing.T, h *harness) {
	pj := coordinator.PeriodicJob{Name: "catchup", Spec: "@every 10m", CatchUp: 35 * time.Minute, Job: coordinator.EnqueueParams{Kind: "late"}}
	st, err := h.c.EnqueueDueTicks(h.ctx(), pj)
	if err != nil || st.Enqueued != 0 || st.LastTick != nil {
		t.Fatalf("first call = %+v, %v", st, err)
	}
	// An hour without a leader: six ticks fell due, at 10..60 minutes;
	// those at 30..60 are within 35 minutes of now.
	h.clock.Advance(time.Hour + time.Second)
	st, err = h.c.EnqueueDueTicks(h.ctx(), pj)
	if err != nil {
		t.Fatal(err)
	}
	if st.Enqueued != 4 || st.Skipped != 2 {
		t.Fatalf("after an hour: enqueued %d skipped %d, want 4 and 2", st.Enqueued, st.Skipped)
	}
	checkTicks(t, h.jobsOf("late"), pj.Name, 4, 10*time.Minute)
	// Nothing more until the next tick.
	if st, err = h.c.EnqueueDueTicks(h.ctx(), pj); err != nil || st.Enqueued != 4 {
		t.Fatalf("again: %+v, %v", st, err)
	}
	h.clock.Advance(10 * time.Minute)
	if st, err = h.c.EnqueueDueTicks(h.ctx(), pj); err != nil || st.Enqueued != 5 {
		t.Fatalf("next tick: %+v, %v", st, err)
	}
}

func testPeriodicBadSpec(t *testing.T, h *harness) {
	for _, spec := range []string{"", "bad", "* * *", "61 * * * *", "@every 100ms", "@every soon", "@fortnightly", "CRON_TZ=Nowhere/Land 0 * * * *", "CRON_TZ=UTC", "0 0 30 2 *"} {
		if _, err := coordinator.ParseSchedule(spec); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("ParseSchedule(%q): %v, want ErrInvalid", spec, err)
		}
	}
	for _, spec := range []string{"0 3 * * *", "*/5 * * * * *", "@hourly", "@every 90s", "CRON_TZ=Europe/Paris 0 9 * * 1-5"} {
		if _, err := coordinator.ParseSchedule(spec); err != nil {
			t.Errorf("ParseSchedule(%q): %v", spec, err)
		}
	}
	bad := []coordinator.PeriodicJob{
		{Name: "x", Spec: "nope", Job: coordinator.EnqueueParams{Kind: "k"}},
		{Name: "bad name", Spec: "@hourly", Job: coordinator.EnqueueParams{Kind: "k"}},
		{Name: "x", Spec: "@hourly", Job: coordinator.EnqueueParams{Kind: "bad kind"}},
		{Name: "x", Spec: "@hourly", Job: coordinator.EnqueueParams{Kind: "k", Payload: json.RawMessage(`{`)}},
	}
	for _, pj := range bad {
		if _, err := h.c.EnqueueDueTicks(h.ctx(), pj); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("EnqueueDueTicks(%+v): %v, want ErrInvalid", pj, err)
		}
	}
	twice := []coordinator.PeriodicJob{{Name: "x", Spec: "@hourly", Job: coordinator.EnqueueParams{Kind: "k"}}, {Name: "x", Spec: "@daily", Job: coordinator.EnqueueParams{Kind: "k"}}}
	if err := h.c.ValidatePeriodic(twice); !errors.Is(err, coordinator.ErrInvalid) {
		t.Errorf("two schedules with one name: %v", err)
	}
	if st, err := h.c.ListPeriodic(h.ctx()); err != nil || len(st) != 0 {
		t.Errorf("bad schedules wrote state: %+v, %v", st, err)
	}
}

// testUniqueByArgsRace: racers on two daemons enqueue the same kind and
// payload (written differently) with unique-by-args: one job is inserted,
// every racer gets it back and knows whether it inserted.
func testUniqueByArgsRace(t *testing.T, h *harness) {
	payloads := []string{`{"user":42,"report":"daily"}`, `{"report":"daily", "user":42}`, "{\n\"user\": 42, \"report\": \"daily\"}"}
	const racers = 16
	ids := make([]string, racers)
	existed := make([]bool, racers)
	daemons := []*coordinator.Coordinator{h.coordinator(h.store, coordinator.Config{}), h.coordinator(h.store, coordinator.Config{})}
	g, ctx := errgroup.WithContext(h.ctx())
	start := make(chan struct{})
	for i := range racers {
		c := daemons[i%2]
		g.Go(func() error {
			<-start
			r, err := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "report", Payload: json.RawMessage(payloads[i%len(payloads)]),
				Unique: &coordinator.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}})
			if err != nil {
				return err
			}
			ids[i], existed[i] = r.Job.ID, r.Existed
			return nil
		})
	}
	close(start)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	inserted := 0
	for i := range ids {
		if ids[i] != ids[0] {
			t.Fatalf("unique enqueue returned two jobs: %s and %s", ids[0], ids[i])
		}
		if !existed[i] {
			inserted++
		}
	}
	if inserted != 1 || len(h.jobsOf("report")) != 1 {
		t.Fatalf("%d racers inserted, %d jobs stored; want 1 and 1", inserted, len(h.jobsOf("report")))
	}
	// Other arguments are another job.
	r, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "report", Payload: json.RawMessage(`{"user":43,"report":"daily"}`),
		Unique: &coordinator.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}})
	if err != nil || r.Existed {
		t.Fatalf("other args: %+v, %v", r, err)
	}
}

// A batch holding two jobs of one unique key inserts the first and answers
// the second with it, as an existing job, whatever transactions the batch
// is split into; a key held before the batch answers every job of it.
func testUniqueDuplicatesInOneBatch(t *testing.T, h *harness) {
	held, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "dup", UniqueKey: "held"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 150 // keys; the batch is twice as long, past one etcd transaction
	var ps []coordinator.EnqueueParams
	for round := range 2 {
		for i := range n {
			ps = append(ps, coordinator.EnqueueParams{Kind: "dup", UniqueKey: fmt.Sprintf("k%d", i),
				Payload: json.RawMessage(fmt.Sprintf(`{"round":%d}`, round))})
		}
	}
	ps = append(ps, coordinator.EnqueueParams{Kind: "dup", UniqueKey: "held"},
		coordinator.EnqueueParams{Kind: "dup", UniqueKey: "held"},
		coordinator.EnqueueParams{Kind: "dup", Unique: &coordinator.UniqueOpts{ByArgs: true}, Payload: json.RawMessage(`{"a":1,"b":2}`)},
		coordinator.EnqueueParams{Kind: "dup", Unique: &coordinator.UniqueOpts{ByArgs: true}, Payload: json.RawMessage(`{"b":2, "a":1}`)},
		coordinator.EnqueueParams{Kind: "dup"}, coordinator.EnqueueParams{Kind: "dup"})
	rs, err := h.c.EnqueueBatch(h.ctx(), ps)
	if err != nil {
		t.Fatalf("a batch with duplicate unique keys: %v", err)
	}
	if len(rs) != len(ps) {
		t.Fatalf("%d results for %d jobs", len(rs), len(ps))
	}
	for i := range n {
		first, second := rs[i], rs[n+i]
		if first.Existed || second.Job == nil || !second.Existed || second.Job.ID != first.Job.ID {
			t.Fatalf("key k%d: first existed=%v, second existed=%v %+v; want the second answered by the first (%s)", i, first.Existed, second.Existed, second.Job, first.Job.ID)
		}
		if string(second.Job.Payload) != `{"round":0}` {
			t.Fatalf("key k%d: the second was answered with payload %s, want the first's", i, second.Job.Payload)
		}
	}
	for _, r := range rs[2*n : 2*n+2] {
		if !r.Existed || r.Job.ID != held.Job.ID {
			t.Fatalf("a key held before the batch: existed=%v job %+v, want %s", r.Existed, r.Job, held.Job.ID)
		}
	}
	if a, b := rs[2*n+2], rs[2*n+3]; a.Existed || !b.Existed || b.Job.ID != a.Job.ID {
		t.Fatalf("equal payloads by args: existed %v/%v, ids %s/%s", a.Existed, b.Existed, a.Job.ID, b.Job.ID)
	}
	if a, b := rs[2*n+4], rs[2*n+5]; a.Existed || b.Existed || a.Job.ID == b.Job.ID {
		t.Fatal("two jobs without a unique key were not both inserted")
	}
	if got, want := len(h.jobsOf("dup")), 1+n+1+2; got != want {
		t.Fatalf("%d jobs stored, want %d", got, want)
	}
}

func testUniqueOptions(t *testing.T, h *harness) {
	enq := func(p coordinator.EnqueueParams) coordinator.EnqueueResult {
		t.Helper()
		r, err := h.c.Enqueue(h.ctx(), p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Without ByQueue the queue does not matter; with it, it does.
	a := enq(coordinator.EnqueueParams{Kind: "q", Queue: "one", Unique: &coordinator.UniqueOpts{}})
	if r := enq(coordinator.EnqueueParams{Kind: "q", Queue: "two", Unique: &coordinator.UniqueOpts{}}); !r.Existed || r.Job.ID != a.Job.ID {
		t.Fatalf("by kind only: %+v", r)
	}
	b := enq(coordinator.EnqueueParams{Kind: "qq", Queue: "one", Unique: &coordinator.UniqueOpts{ByQueue: true}})
	if r := enq(coordinator.EnqueueParams{Kind: "qq", Queue: "two", Unique: &coordinator.UniqueOpts{ByQueue: true}}); r.Existed || r.Job.ID == b.Job.ID {
		t.Fatalf("by queue: %+v", r)
	}
	// ByPeriod: the next period is another job.
	p := coordinator.EnqueueParams{Kind: "hourly", Unique: &coordinator.UniqueOpts{ByPeriod: time.Hour}}
	first := enq(p)
	if r := enq(p); !r.Existed {
		t.Fatal("same period: not a duplicate")
	}
	h.clock.Advance(time.Hour)
	if r := enq(p); r.Existed {
		t.Fatal("next period: a duplicate")
	}
	// A finished job frees its key, unless ByState counts its state.
	s := h.session(h.c)
	done := enq(coordinator.EnqueueParams{Kind: "once", Queue: "st", Unique: &coordinator.UniqueOpts{ByState: []coordinator.State{coordinator.StateCompleted}}})
	runs, _, err := h.c.Claim(h.ctx(), s, "st", 1, false)
	if err != nil || len(runs) != 1 {
		t.Fatalf("claim: %d, %v", len(runs), err)
	}
	if err := runs[0].Complete(h.ctx(), nil); err != nil {
		t.Fatal(err)
	}
	if r := enq(coordinator.EnqueueParams{Kind: "once", Queue: "st", Unique: &coordinator.UniqueOpts{ByState: []coordinator.State{coordinator.StateCompleted}}}); !r.Existed || r.Job.ID != done.Job.ID || r.Job.State != coordinator.StateCompleted {
		t.Fatalf("completed job counted by state: %+v", r)
	}
	// Retention deletes it, and the key with it.
	rc := h.coordinator(h.store, coordinator.Config{Retention: time.Minute})
	h.clock.Advance(2 * time.Minute)
	if _, err := rc.PurgeFinished(h.ctx()); err != nil {
		t.Fatal(err)
	}
	if r := enq(coordinator.EnqueueParams{Kind: "once", Queue: "st", Unique: &coordinator.UniqueOpts{ByState: []coordinator.State{coordinator.StateCompleted}}}); r.Existed {
		t.Fatal("key still held after retention deleted the job")
	}
	// Without ByState, a cancelled job frees its key at once.
	c1 := enq(coordinator.EnqueueParams{Kind: "free", Unique: &coordinator.UniqueOpts{}})
	if _, err := h.c.Cancel(h.ctx(), c1.Job.ID); err != nil {
		t.Fatal(err)
	}
	if r := enq(coordinator.EnqueueParams{Kind: "free", Unique: &coordinator.UniqueOpts{}}); r.Existed {
		t.Fatal("cancelled job still holds its key")
	}
	_ = first
	if _, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "x", Unique: &coordinator.UniqueOpts{ByState: []coordinator.State{"done"}}}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("unknown unique state: %v", err)
	}
}

// testPauseAcrossRestart: a paused queue's jobs stay available, for this
// daemon and for one started later; they run after resume.
func testPauseAcrossRestart(t *testing.T, h *harness) {
	if _, changed, err := h.c.PauseQueue(h.ctx(), "mail"); err != nil || !changed {
		t.Fatalf("PauseQueue: %v, %v", changed, err)
	}
	if _, changed, err := h.c.PauseQueue(h.ctx(), "mail"); err != nil || changed {
		t.Fatalf("second PauseQueue: changed %v, %v", changed, err)
	}
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: "mail"})
	other := h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: "other"})
	for q, want := range map[string]bool{"mail": true, "other": true, "nosuch": false} {
		if known, err := h.c.KnownQueue(h.ctx(), q); err != nil || known != want {
			t.Errorf("KnownQueue(%s) = %v, %v; want %v", q, known, err, want)
		}
	}
	s := h.session(h.c)
	runs, st, err := h.c.Claim(h.ctx(), s, "mail", 5, false)
	if err != nil || len(runs) != 0 || !st.Held {
		t.Fatalf("claim of a paused queue: %d runs, %+v, %v", len(runs), st, err)
	}
	if runs, _, _ := h.c.Claim(h.ctx(), s, "other", 5, false); len(runs) != 1 || runs[0].Job().ID != other.ID {
		t.Fatal("another queue is not claimable while one is paused")
	}
	// A daemon started after the pause, with its own watch of the queue
	// configurations, does not claim either.
	c2 := h.coordinator(h.store, coordinator.Config{})
	ctx, cancel := context.WithCancel(h.ctx())
	woke := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c2.WatchQueues(ctx, func() {
			select {
			case woke <- struct{}{}:
			default:
			}
		})
	}()
	defer func() { cancel(); <-done }()
	<-woke
	s2 := h.session(c2)
	if runs, _, err := c2.Claim(h.ctx(), s2, "mail", 5, false); err != nil || len(runs) != 0 {
		t.Fatalf("restarted daemon claimed from a paused queue: %d, %v", len(runs), err)
	}
	h.wantState(j.ID, coordinator.StateAvailable)
	qs, err := h.c.Queues(h.ctx())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, q := range qs {
		if q.Name == "mail" {
			found = q.Paused && q.PausedAt != nil && q.Available == 1
		}
	}
	if !found {
		t.Fatalf("Queues = %+v: want mail paused with 1 available job", qs)
	}
	h.seen(woke, "the resume", func() {
		if _, changed, err := h.c.ResumeQueue(h.ctx(), "mail"); err != nil || !changed {
			t.Fatalf("ResumeQueue: %v, %v", changed, err)
		}
	})
	runs, _, err = c2.Claim(h.ctx(), s2, "mail", 5, false)
	if err != nil || len(runs) != 1 || runs[0].Job().ID != j.ID {
		t.Fatalf("claim after resume: %d, %v", len(runs), err)
	}
}

// testPauseRefusesClaimInFlight: a claim that read the queue unpaused, and
// writes after the pause was acknowledged, is refused by the store.
func testPauseRefusesClaimInFlight(t *testing.T, h *harness) {
	h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	gate := kvtest.NewGate(h.store)
	c := h.coordinator(gate, coordinator.Config{})
	claimAcrossPause(t, h, c, gate, h.session(c))
	h.wantState(h.jobsOf("k")[0].ID, coordinator.StateAvailable)
}

// claimAcrossPause makes a claim of one job with c, over gate, that reads
// the default queue unpaused and writes after a pause of it, and checks
// that the store refuses it: no run, no error.
func claimAcrossPause(t *testing.T, h *harness, c *coordinator.Coordinator, gate *kvtest.Gate, s *coordinator.Session) {
	t.Helper()
	gate.Arm()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
		done <- result{len(runs), err}
	}()
	<-gate.Held()
	if _, _, err := h.c.PauseQueue(h.ctx(), coordinator.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	gate.Open()
	if r := <-done; r.err != nil || r.n != 0 {
		t.Fatalf("claim in flight across a pause: %d runs, %v", r.n, r.err)
	}
}

// testRefusedCandidatesStayClaimable: on a watched queue a claim moves the
// floor past its candidates before it commits. A candidate the store then
// refuses for another reason than another claim (here a pause that landed
// meanwhile) is still available, and the first claim after the resume
// takes it, not a read from the queue's start a minute later.
func testRefusedCandidatesStayClaimable(t *testing.T, h *harness) {
	job := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	gate := kvtest.NewGate(h.store)
	c := h.coordinator(gate, coordinator.Config{})
	h.watchWith(c)
	s := h.session(c)
	claimAcrossPause(t, h, c, gate, s)
	if _, _, err := h.c.ResumeQueue(h.ctx(), coordinator.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 || runs[0].Job().ID != job.ID {
		t.Fatalf("first claim after the resume: %d runs, %v; want job %s (the floor passed it)", len(runs), err, job.ID)
	}
}

// blindWatch is a store whose watches miss the puts of keys under prefix,
// as a bug could make a claim's floor miss a job.
type blindWatch struct {
	kv.Store
	prefix string
}

func (b blindWatch) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	return filterWatch(ctx, b.Store, prefix, fromRev, func(r kv.WatchResponse) (kv.WatchResponse, bool) {
		evs := r.Events[:0:0]
		for _, ev := range r.Events {
			if !(ev.Type == kv.EventPut && strings.HasPrefix(ev.KV.Key, b.prefix)) {
				evs = append(evs, ev)
			}
		}
		r.Events = evs
		return r, true
	})
}

// testFloorHidesNoJobInABusyQueue: a job the floor of a watched queue has
// passed (here its watch missed the job's put, as a bug could) is found by
// the read from the queue's start that claims make once a minute, also
// while the queue never runs dry.
func testFloorHidesNoJobInABusyQueue(t *testing.T, h *harness) {
	floorHidesNoJob(t, h, 0)
}

// testFloorHidesNoJobAfterClockStepBack: the once-a-minute read from the
// queue's start is timed on the coordinator's clock; after it steps back
// an hour, a job the floor passed is claimed a minute later, not only
// once the clock is back past the last such read (an hour and a minute).
func testFloorHidesNoJobAfterClockStepBack(t *testing.T, h *harness) {
	floorHidesNoJob(t, h, -time.Hour)
}

// floorHidesNoJob hides a job from a busy queue's floor (its watch misses
// the job's put) and fails unless a claim takes it a minute later; with a
// step, the clock steps by it after the floor's first move, and a claim
// reads again before the job is hidden.
func floorHidesNoJob(t *testing.T, h *harness, step time.Duration) {
	c := h.coordinator(blindWatch{h.store, h.keysRoot() + "q/" + coordinator.DefaultQueue + "/1/"}, coordinator.Config{})
	h.watchWith(c)
	s := h.session(c)
	busy := func() { h.enqueue(coordinator.EnqueueParams{Kind: "busy", Priority: 2}) }
	for range 3 {
		busy()
	}
	h.claimOneFrom(c, s) // the floor moves into priority 2
	after := ""
	if step != 0 {
		h.clock.Advance(step)
		h.claimOneFrom(c, s)
		after = fmt.Sprintf(" after the clock stepped by %s", step)
	}
	hidden := h.enqueue(coordinator.EnqueueParams{Kind: "hidden", Priority: 1})
	claimed := func() bool {
		t.Helper()
		busy() // the queue never runs dry
		return h.claimOneFrom(c, s).Job().ID == hidden.ID
	}
	if claimed() {
		t.Fatal("the claim found the job its floor should have passed: the test hides nothing")
	}
	h.clock.Advance(time.Minute + time.Second)
	for range 3 {
		if claimed() {
			return
		}
	}
	t.Fatalf("job %s (priority 1), passed by the floor, not claimed a minute later%s while the queue held jobs: no claim read the queue from its start", hidden.ID, after)
}

// failingClaimStore fails the first claim commit (a write transaction
// while armed), as a store that became unreachable would, then holds the
// first read transaction after it (the claim finding out whether it landed
// after all) until hold is closed.
type failingClaimStore struct {
	kv.Store
	armed, failed atomic.Bool
	hold, held    chan struct{}
}

func (f *failingClaimStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if kvtest.Writes(t) && f.armed.CompareAndSwap(true, false) {
		f.failed.Store(true)
		return kv.TxnResult{}, errors.New("store unreachable")
	}
	if !kvtest.Writes(t) && f.failed.CompareAndSwap(true, false) {
		close(f.held)
		<-f.hold
	}
	return f.Store.Txn(ctx, t)
}

// testFailedClaimLeavesJobsClaimable: a claim whose commit failed leaves
// its candidates available; a claim of the same coordinator that read
// while they were held (and skipped them) must not move the floor past
// them for good: the next claim takes them.
func testFailedClaimLeavesJobsClaimable(t *testing.T, h *harness) {
	job := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	f := &failingClaimStore{Store: h.store, hold: make(chan struct{}), held: make(chan struct{})}
	c := h.coordinator(f, coordinator.Config{})
	h.watchWith(c)
	s := h.session(c)
	f.armed.Store(true)
	type result struct {
		runs int
		err  error
	}
	failed := make(chan result, 1)
	go func() {
		runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
		failed <- result{len(runs), err}
	}()
	<-f.held // the claim failed and is finding out whether it landed
	// A claim beside it skips the job while the failed claim holds it:
	// taken now, it would look to the failed claim like its own claim
	// having landed after all (one session, one owner), and run twice.
	if runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false); err != nil || len(runs) != 0 {
		t.Fatalf("claim beside the failing one: %d runs, %v; want none (its job is held)", len(runs), err)
	}
	close(f.hold)
	if r := <-failed; r.err == nil || r.runs != 0 {
		t.Fatalf("the claim whose commit failed: %d runs, %v; want an error", r.runs, r.err)
	}
	runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 || runs[0].Job().ID != job.ID {
		t.Fatalf("claim after the failed one: %d runs, %v; want job %s (the floor passed it)", len(runs), err, job.ID)
	}
}

// testGlobalLimit: a queue's global limit is counted by slots held under
// the daemons' leases: a finished run frees its slot, and so does a dead
// daemon's lease.
func testGlobalLimit(t *testing.T, h *harness) {
	for range 6 {
		h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: "api"})
	}
	if _, _, err := h.c.SetQueueLimit(h.ctx(), "api", 2); err != nil {
		t.Fatal(err)
	}
	c1, c2 := h.coordinator(h.store, coordinator.Config{}), h.coordinator(h.store, coordinator.Config{})
	s1, s2 := h.session(c1), h.session(c2)
	runs1, _, err := c1.Claim(h.ctx(), s1, "api", 5, false)
	if err != nil || len(runs1) != 2 {
		t.Fatalf("first daemon claimed %d under a limit of 2 (%v)", len(runs1), err)
	}
	runs2, st, err := c2.Claim(h.ctx(), s2, "api", 5, true)
	if err != nil || len(runs2) != 0 || !st.Held {
		t.Fatalf("second daemon claimed %d past the limit (%+v, %v)", len(runs2), st, err)
	}
	if err := runs1[0].Complete(h.ctx(), nil); err != nil {
		t.Fatal(err)
	}
	if runs2, _, err = c2.Claim(h.ctx(), s2, "api", 5, true); err != nil || len(runs2) != 1 {
		t.Fatalf("after a run finished: claimed %d, want 1 (%v)", len(runs2), err)
	}
	// The first daemon dies holding a slot: its share is freed with its
	// lease, before any reaper ran.
	if err := h.store.Revoke(h.ctx(), s1.Lease()); err != nil {
		t.Fatal(err)
	}
	more, _, err := c2.Claim(h.ctx(), s2, "api", 5, true)
	if err != nil || len(more) != 1 {
		t.Fatalf("after the holder's lease ended: claimed %d, want 1 (%v)", len(more), err)
	}
	qs, err := h.c.Queues(h.ctx())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == "api" && (q.Limit != 2 || q.Held != 2) {
			t.Fatalf("queue api: %+v, want limit 2 with 2 held", q)
		}
	}
	// A snooze frees the slot too; lifting the limit frees the queue.
	if err := more[0].Snooze(h.ctx(), 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.c.SetQueueLimit(h.ctx(), "api", 0); err != nil {
		t.Fatal(err)
	}
	if rest, _, err := c2.Claim(h.ctx(), s2, "api", 10, false); err != nil || len(rest) != 3 {
		t.Fatalf("without a limit: claimed %d, want 3 (%v)", len(rest), err)
	}
	if _, _, err := h.c.SetQueueLimit(h.ctx(), "api", -1); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("negative limit: %v", err)
	}
}

// testGlobalLimitRace: daemons racing for a limited queue never run more
// than the limit at once.
func testGlobalLimitRace(t *testing.T, h *harness) {
	const limit, daemons = 3, 6
	ps := make([]coordinator.EnqueueParams, 40)
	for i := range ps {
		ps[i] = coordinator.EnqueueParams{Kind: "k", Queue: "narrow"}
	}
	if _, err := h.c.EnqueueBatch(h.ctx(), ps); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.c.SetQueueLimit(h.ctx(), "narrow", limit); err != nil {
		t.Fatal(err)
	}
	var running, peak, finished atomic.Int32
	g, ctx := errgroup.WithContext(h.ctx())
	for d := range daemons {
		c := h.coordinator(h.store, coordinator.Config{})
		s := h.session(c)
		g.Go(func() error {
			for finished.Load() < int32(len(ps)) {
				runs, _, err := c.Claim(ctx, s, "narrow", 2, d%2 == 0)
				if err != nil {
					return err
				}
				for _, r := range runs {
					n := running.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(time.Millisecond)
					running.Add(-1) // before the write that frees the slot
					if err := r.Complete(ctx, nil); err != nil {
						return err
					}
					finished.Add(1)
				}
				if len(runs) == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p > limit {
		t.Fatalf("%d jobs ran at once under a limit of %d", p, limit)
	}
	if n := h.counts()[coordinator.StateCompleted]; n != len(ps) {
		t.Fatalf("completed %d of %d", n, len(ps))
	}
}

func testRetryDelete(t *testing.T, h *harness) {
	s := h.session(h.c)
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k", MaxAttempts: 1, UniqueKey: "only-one"})
	r := h.claimOne(s)
	// Running: neither retried nor deleted.
	if _, err := h.c.Retry(h.ctx(), j.ID); !errors.Is(err, coordinator.ErrWrongState) || !strings.Contains(err.Error(), "running") {
		t.Fatalf("Retry running: %v", err)
	}
	if _, err := h.c.Delete(h.ctx(), j.ID); !errors.Is(err, coordinator.ErrWrongState) {
		t.Fatalf("Delete running: %v", err)
	}
	if err := r.Fail(h.ctx(), errors.New("boom"), coordinator.FailOpts{}); err != nil {
		t.Fatal(err)
	}
	h.wantState(j.ID, coordinator.StateDiscarded)
	// Discarded: retried now, with one more attempt and its history.
	got, err := h.c.Retry(h.ctx(), j.ID)
	if err != nil || got.State != coordinator.StateAvailable || got.MaxAttempts != 2 || len(got.Errors) != 1 {
		t.Fatalf("Retry discarded: %+v, %v", got, err)
	}
	if _, err := h.c.Retry(h.ctx(), j.ID); !errors.Is(err, coordinator.ErrWrongState) || !strings.Contains(err.Error(), "already available") {
		t.Fatalf("Retry available: %v", err)
	}
	// It holds its unique key again.
	if r, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", UniqueKey: "only-one"}); err != nil || !r.Existed || r.Job.ID != j.ID {
		t.Fatalf("unique key after retry: %+v, %v", r, err)
	}
	r = h.claimOne(s)
	if r.Job().Attempt != 2 {
		t.Fatalf("retried run is attempt %d, want 2", r.Job().Attempt)
	}
	if err := r.Complete(h.ctx(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Retry(h.ctx(), j.ID); !errors.Is(err, coordinator.ErrWrongState) || !strings.Contains(err.Error(), "completed") {
		t.Fatalf("Retry completed: %v", err)
	}
	// Completed: deleted.
	if _, err := h.c.Delete(h.ctx(), j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Get(h.ctx(), j.ID); !errors.Is(err, coordinator.ErrNotFound) {
		t.Fatalf("deleted job: %v", err)
	}
	if _, err := h.c.Delete(h.ctx(), j.ID); !errors.Is(err, coordinator.ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}
	// A cancelled job whose unique key another job took meanwhile is not
	// retried.
	c := h.enqueue(coordinator.EnqueueParams{Kind: "k", UniqueKey: "taken"})
	if _, err := h.c.Cancel(h.ctx(), c.ID); err != nil {
		t.Fatal(err)
	}
	other := h.enqueue(coordinator.EnqueueParams{Kind: "k", UniqueKey: "taken"})
	if _, err := h.c.Retry(h.ctx(), c.ID); !errors.Is(err, coordinator.ErrWrongState) || !strings.Contains(err.Error(), other.ID) {
		t.Fatalf("Retry with the key taken: %v", err)
	}
	h.wantState(c.ID, coordinator.StateCancelled)
	if n := h.counts(); n[coordinator.StateCompleted] != 0 || n[coordinator.StateAvailable] != 1 || n[coordinator.StateCancelled] != 1 {
		t.Fatalf("counts: %v", n)
	}
}

func testCancelMany(t *testing.T, h *harness) {
	var as []string
	for range 3 {
		as = append(as, h.enqueue(coordinator.EnqueueParams{Kind: "a"}).ID)
	}
	sched := h.enqueue(coordinator.EnqueueParams{Kind: "a", ScheduledAt: h.clock.Now().Add(time.Hour)})
	other := h.enqueue(coordinator.EnqueueParams{Kind: "b"})
	otherQ := h.enqueue(coordinator.EnqueueParams{Kind: "a", Queue: "elsewhere"})
	s := h.session(h.c)
	runs, _, err := h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 || runs[0].Job().Kind != "a" {
		t.Fatalf("claim: %v", err)
	}
	res, err := h.c.CancelMany(h.ctx(), coordinator.CancelFilter{Kind: "a", Queue: coordinator.DefaultQueue})
	if err != nil || res.Cancelled != 3 || res.CancelRequested != 1 {
		t.Fatalf("CancelMany = %+v, %v; want 3 cancelled, 1 requested", res, err)
	}
	for _, id := range append(as[1:], sched.ID) {
		if j := h.get(id); j.State != coordinator.StateCancelled && !(j.State == coordinator.StateRunning && j.CancelRequested) {
			t.Errorf("job %s is %s", id, j.State)
		}
	}
	if j := h.get(runs[0].Job().ID); !j.CancelRequested {
		t.Error("running job got no cancel request")
	}
	h.wantState(other.ID, coordinator.StateAvailable)
	h.wantState(otherQ.ID, coordinator.StateAvailable)
	if res, err := h.c.CancelMany(h.ctx(), coordinator.CancelFilter{State: coordinator.StateAvailable}); err != nil || res.Cancelled != 2 {
		t.Fatalf("CancelMany available = %+v, %v", res, err)
	}
	if _, err := h.c.CancelMany(h.ctx(), coordinator.CancelFilter{State: coordinator.StateCompleted}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("CancelMany completed: %v", err)
	}
}

// testCancelManyPastOnePage: a bulk cancel of more jobs than one read
// returns (on etcd the rest is read in one stream while the cancels are
// written) cancels each matching job once, and no other.
func testCancelManyPastOnePage(t *testing.T, h *harness) {
	const n = 2300
	ps := make([]coordinator.EnqueueParams, n)
	for i := range ps {
		ps[i] = coordinator.EnqueueParams{Kind: "bulk"}
		if i%10 == 0 {
			ps[i].Kind = "keep"
		}
	}
	for lo := 0; lo < n; lo += 500 {
		if _, err := h.c.EnqueueBatch(h.ctx(), ps[lo:min(lo+500, n)]); err != nil {
			t.Fatal(err)
		}
	}
	res, err := h.c.CancelMany(h.ctx(), coordinator.CancelFilter{Kind: "bulk"})
	if want := n - n/10; err != nil || res.Cancelled != want || res.CancelRequested != 0 {
		t.Fatalf("CancelMany of %d jobs of kind bulk = %+v, %v", want, res, err)
	}
	if c := h.counts(); c[coordinator.StateCancelled] != n-n/10 || c[coordinator.StateAvailable] != n/10 {
		t.Fatalf("counts after the bulk cancel: %v; want %d cancelled, %d available", c, n-n/10, n/10)
	}
}

type tenantKey struct{}

func testEnqueueHooks(t *testing.T, h *harness) {
	var calls atomic.Int32
	c := h.coordinator(h.store, coordinator.Config{EnqueueHooks: []coordinator.EnqueueHook{
		func(ctx context.Context, p *coordinator.EnqueueParams) error {
			calls.Add(1)
			tenant, _ := ctx.Value(tenantKey{}).(string)
			if tenant == "" {
				return fmt.Errorf("%w: no tenant in context", coordinator.ErrInvalid)
			}
			p.Metadata = json.RawMessage(fmt.Sprintf(`{"tenant":%q}`, tenant))
			p.Queue = "tenant-" + tenant
			return nil
		},
	}})
	ctx := context.WithValue(h.ctx(), tenantKey{}, "acme")
	r, err := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k"})
	if err != nil || r.Job.Queue != "tenant-acme" || string(r.Job.Metadata) != `{"tenant":"acme"}` {
		t.Fatalf("hooked enqueue: %+v, %v", r.Job, err)
	}
	if got := h.get(r.Job.ID); string(got.Metadata) != `{"tenant":"acme"}` {
		t.Fatalf("stored metadata %s", got.Metadata)
	}
	if _, err := c.EnqueueBatch(h.ctx(), []coordinator.EnqueueParams{{Kind: "k"}, {Kind: "k"}}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("hook refusal: %v", err)
	}
	if n := h.counts()[coordinator.StateAvailable]; n != 1 {
		t.Fatalf("a refused batch wrote %d jobs", n-1)
	}
	if _, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", Metadata: json.RawMessage(`{`)}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("bad metadata: %v", err)
	}
	if calls.Load() != 2 {
		t.Fatalf("hook ran %d times, want 2 (a batch stops at the first refusal)", calls.Load())
	}
	var _ kv.Store = h.store
}

func testFailMaxAttempts(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	r := h.claimOne(h.session(h.c))
	if err := r.Fail(h.ctx(), errors.New("x"), coordinator.FailOpts{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	if got := h.wantState(j.ID, coordinator.StateDiscarded); got.MaxAttempts != 1 {
		t.Fatalf("max attempts %d, want the override 1", got.MaxAttempts)
	}
}

// testOrphanFreesSlot: a claim its claimer never learned of, released by
// ReleaseOrphans, frees its queue slot too (not only when the session ends).
// failingSlotRead fails the next range read under slots while fail is set.
type failingSlotRead struct {
	kv.Store
	slots string
	fail  atomic.Bool
}

func (f *failingSlotRead) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if strings.HasPrefix(r.Start, f.slots) && f.fail.CompareAndSwap(true, false) {
		return kv.RangeResult{}, errors.New("store unreachable")
	}
	return f.Store.Range(ctx, r)
}

func testOrphanFreesSlot(t *testing.T, h *harness) {
	h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: "lim"})
	if _, _, err := h.c.SetQueueLimit(h.ctx(), "lim", 1); err != nil {
		t.Fatal(err)
	}
	s := h.session(h.c)
	if runs, _, err := h.c.Claim(h.ctx(), s, "lim", 1, false); err != nil || len(runs) != 1 {
		t.Fatalf("claim: %d, %v", len(runs), err)
	}
	// A release that cannot read which slot the job holds waits for the
	// next call: released without it, the slot stayed held.
	blind := &failingSlotRead{Store: h.store, slots: h.keysRoot() + "qm/s/lim/"}
	blind.fail.Store(true)
	c := h.coordinator(blind, coordinator.Config{})
	if n, _ := c.ReleaseOrphans(h.ctx(), s, func(string) bool { return false }); n != 0 || blind.fail.Load() {
		t.Fatalf("ReleaseOrphans with the slot read failing = %d (slot read failed: %v), want 0 and a failed read", n, !blind.fail.Load())
	}
	if n, err := c.ReleaseOrphans(h.ctx(), s, func(string) bool { return false }); err != nil || n != 1 {
		t.Fatalf("ReleaseOrphans = %d, %v", n, err)
	}
	s2 := h.session(h.coordinator(h.store, coordinator.Config{}))
	if runs, st, err := h.c.Claim(h.ctx(), s2, "lim", 1, false); err != nil || len(runs) != 1 {
		t.Fatalf("claim after the orphan was released: %d (%+v), %v; its slot is still held", len(runs), st, err)
	}
}
