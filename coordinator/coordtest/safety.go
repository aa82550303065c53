package coordtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
	"github.com/leasehold/leasehold/fence"
)

// Tests of the safety contract (DESIGN.md) that pin down one promise each,
// written so that breaking that promise fails them (a mutation audit found
// no other test that did). Run adds them to the suite.
var safetyTests = []suiteTest{
	{"ReapLeavesJobFinishedMeanwhile", testReapLeavesFinished},
	{"LostFinalReplyNotAppliedThenTakenOver", testLostFinalReplyTakenOver},
	{"LostFinalReplyAppliedThenDeletedIsNotLost", testLostFinalReplyAppliedThenDeleted},
	{"SecondOutcomeIsWrongState", testSecondOutcome},
	{"SessionDeadlineFromSendTimeMinusMargin", testSessionDeadline},
	{"SessionFirstDeadlineFromGrantSendTime", testSessionFirstDeadline},
	{"SessionRenewsEveryThirdOfTTL", testSessionCadence},
	{"SessionEndsAtOnceWhenRenewalFindsLeaseGone", testSessionLeaseGone},
	{"ReaperWatchReactsToLeaseLoss", testReaperWatch},
	{"ClaimLosesRaceForReadJob", testClaimRace},
	{"ReaperScanCatchesWhatWatchMissed", testReaperScan},
	{"GroupedOutcomesBatchedAreFencedEach", testGroupedOutcomesBatched},
	{"StaleFirstWriteOfEachKindRefused", testStaleFirstWriteOfEachKind},
	{"ReapTornReadLeavesReclaimedJob", testReapTornRead},
	{"WritesStopPastDeadline", testWritesStopPastDeadline},
}

// failBound bounds waits for things that must happen without any clock
// moving: it is how long a test waits before it fails, never a measure.
const failBound = 20 * time.Second

// openOnce returns gate.Open guarded to run once, and registers it as a
// cleanup so that a test failing while the gate holds a transaction does not
// leave its goroutine blocked.
func openOnce(t *testing.T, gate *kvtest.Gate) func() {
	open := sync.OnceFunc(gate.Open)
	t.Cleanup(open)
	return open
}

// testReapLeavesFinished (promise 7): the reaper's move re-checks the
// record it read, not only that the ownership key is missing. A reaper that
// read a job whose owner was gone, while another daemon reaped it, claimed
// it again and completed it (its ownership key is missing again), must
// leave the completed job alone.
func testReapLeavesFinished(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	s := h.session(h.c)
	h.claimOne(s)
	finish := h.heldReap(s) // the reaper has read the job and waits to write
	if n, err := h.c.Reap(h.ctx(), nil, nil); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v; want 1", n, err)
	}
	if err := h.claimOne(h.session(h.c)).Complete(h.ctx(), json.RawMessage(`"ok"`)); err != nil {
		t.Fatal(err)
	}
	if n, err := finish(); err != nil || n != 0 {
		t.Fatalf("held Reap = %d, %v; want nothing reaped: the job was finished meanwhile", n, err)
	}
	h.wantState(j.ID, coordinator.StateCompleted)
}

// testLostFinalReplyAppliedThenDeleted (promise 9): a final write whose
// reply was lost did land, and the finished job was deleted (by an
// operator, or retention) before the retry. The retry cannot tell that
// from a lease lost before the write landed, so it must say the outcome is
// unknown: ErrLeaseLost would tell the worker, its metrics and OnOutcome
// that the job's completion was refused.
func testLostFinalReplyAppliedThenDeleted(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	fs := &flakyStore{Store: h.store}
	c := h.coordinator(fs, coordinator.Config{})
	run := h.claimOneFrom(c, h.session(c))
	fs.fail.Store(1) // applied, reply lost
	if err := run.Complete(h.ctx(), json.RawMessage(`1`)); !errors.Is(err, errReplyLost) {
		t.Fatalf("first complete: %v", err)
	}
	h.wantState(j.ID, coordinator.StateCompleted)
	if _, err := h.c.Delete(h.ctx(), j.ID); err != nil {
		t.Fatalf("delete the completed job: %v", err)
	}
	err := run.Complete(h.ctx(), json.RawMessage(`1`))
	if errors.Is(err, fence.ErrLeaseLost) || !errors.Is(err, coordinator.ErrUnknownOutcome) {
		t.Fatalf("retried complete of a job completed and deleted since: %v; want ErrUnknownOutcome, not ErrLeaseLost", err)
	}
}

// testLostFinalReplyTakenOver (promises 3 and 9): a final write whose reply
// was lost and which never reached the store, followed by the loss of the
// lease and a reap, is not reported as accepted by its retry: the retry
// finds the record is not the one it tried to write.
func testLostFinalReplyTakenOver(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	fs := &flakyStore{Store: h.store}
	c := h.coordinator(fs, coordinator.Config{})
	s := h.session(c)
	run := h.claimOneFrom(c, s)
	fs.drop.Store(1) // the write fails before it reaches the store
	if err := run.Complete(h.ctx(), json.RawMessage(`1`)); !errors.Is(err, errReplyLost) {
		t.Fatalf("first complete: %v", err)
	}
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	if n, err := h.c.Reap(h.ctx(), nil, nil); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v; want 1", n, err)
	}
	// The session has not noticed (long TTL): the retry reaches the store.
	err := run.Complete(h.ctx(), json.RawMessage(`1`))
	if !errors.Is(err, fence.ErrLeaseLost) && !errors.Is(err, coordinator.ErrUnknownOutcome) {
		t.Fatalf("retried complete after the job was reaped: %v; want ErrLeaseLost or ErrUnknownOutcome", err)
	}
	h.wantState(j.ID, coordinator.StateAvailable)
}

// testSecondOutcome (promise 9): a run has at most one accepted outcome;
// another one on the same run is refused as ErrWrongState.
func testSecondOutcome(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	r := h.claimOne(h.session(h.c))
	if err := r.Fail(h.ctx(), errors.New("boom"), coordinator.FailOpts{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Complete(h.ctx(), nil); !errors.Is(err, coordinator.ErrWrongState) {
		t.Fatalf("second outcome of one run: %v, want ErrWrongState", err)
	}
	h.wantState(j.ID, coordinator.StateRetryable)
}

// signalClock is a Clock that reports, on timers, the due time of every
// After it hands out: a test learns that a loop has come back to wait.
type signalClock struct {
	*Clock
	timers chan time.Time
}

func newSignalClock(c *Clock) *signalClock {
	return &signalClock{Clock: c, timers: make(chan time.Time, 1024)}
}

func (c *signalClock) After(d time.Duration) <-chan time.Time {
	due := c.Now().Add(d)
	ch := c.Clock.After(d)
	select {
	case c.timers <- due:
	default:
	}
	return ch
}

// next returns the due time of the next timer handed out.
func (c *signalClock) next(t *testing.T) time.Time {
	t.Helper()
	select {
	case due := <-c.timers:
		return due
	case <-time.After(failBound):
		t.Fatal("no timer set: the loop did not come back to wait")
		return time.Time{}
	}
}

// renewStore counts KeepAliveOnce calls; onRenew, if set, runs at the
// start of each.
type renewStore struct {
	kv.Store
	calls   atomic.Int64
	onRenew func()
}

func (s *renewStore) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	s.calls.Add(1)
	if s.onRenew != nil {
		s.onRenew()
	}
	return s.Store.KeepAliveOnce(ctx, id)
}

// clockSession opens a session of c whose heartbeat runs on clock.
func (h *harness) clockSession(c *coordinator.Coordinator, clock coordinator.Clock, ttl time.Duration) *coordinator.Session {
	h.t.Helper()
	id := fmt.Sprintf("w%d-%s", workerSeq.Add(1), coordinator.NewWorkerID())
	s, err := c.NewSession(h.ctx(), coordinator.SessionConfig{TTL: ttl, Clock: clock, Worker: coordinator.WorkerInfo{ID: id}})
	if err != nil {
		h.t.Fatalf("NewSession: %v", err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// testSessionDeadline (promise 6): the validity deadline is the send time
// of the last acknowledged renewal + TTL − margin (TTL/5 by default), not
// the time its reply arrived, and never without the margin. The renewal
// here takes 300 ms on the session's clock.
func testSessionDeadline(t *testing.T, h *harness) {
	const ttl = 10 * time.Second
	clock := newSignalClock(NewClock(time.Now()))
	var sent time.Time
	rs := &renewStore{Store: h.store, onRenew: func() {
		sent = clock.Now()
		clock.Advance(300 * time.Millisecond) // the reply takes a while
	}}
	c := h.coordinator(rs, coordinator.Config{})
	s := h.clockSession(c, clock, ttl)
	clock.next(t)              // the heartbeat waits for its first renewal
	clock.Advance(time.Second) // not due yet
	s.RenewNow()
	clock.next(t) // renewed; the heartbeat waits again
	if n := s.Renewals(); n != 1 {
		t.Fatalf("%d renewals acknowledged, want 1", n)
	}
	want := sent.Add(ttl - ttl/5)
	if got := s.ValidUntil(); !got.Equal(want) {
		t.Fatalf("after a renewal sent at %v: valid until %v, want send time + TTL − margin = %v (off by %v)",
			sent.Format(time.StampMilli), got.Format(time.StampMilli), want.Format(time.StampMilli), got.Sub(want))
	}
}

// grantStore runs onGrant once the store has granted a lease, before the
// grant's reply reaches the caller.
type grantStore struct {
	kv.Store
	onGrant func()
}

func (s *grantStore) Grant(ctx context.Context, ttl time.Duration) (kv.LeaseID, error) {
	id, err := s.Store.Grant(ctx, ttl)
	if err == nil && s.onGrant != nil {
		s.onGrant()
	}
	return id, err
}

// testSessionFirstDeadline (promise 6): before its first renewal, a
// session's validity deadline is the send time of its lease's grant + TTL
// − margin, not the time the grant's reply arrived: the store starts the
// TTL when it grants, and a reply that takes longer than the margin would
// otherwise leave the session valid after its lease can have expired (its
// renewals failing meanwhile). The grant's reply here takes 3 s of a 10 s
// TTL (margin 2 s) on the session's clock.
func testSessionFirstDeadline(t *testing.T, h *harness) {
	const ttl = 10 * time.Second
	clock := NewClock(time.Now())
	sent := clock.Now()
	gs := &grantStore{Store: h.store, onGrant: func() { clock.Advance(3 * time.Second) }}
	s := h.clockSession(h.coordinator(gs, coordinator.Config{}), clock, ttl)
	want := sent.Add(ttl - ttl/5)
	if got := s.ValidUntil(); !got.Equal(want) {
		t.Fatalf("session whose grant was sent at %v: valid until %v, want grant send time + TTL − margin = %v (off by %v)",
			sent.Format(time.StampMilli), got.Format(time.StampMilli), want.Format(time.StampMilli), got.Sub(want))
	}
}

// testSessionCadence (promise 5): a session renews every third of its
// TTL: three renewals over one TTL of its clock, not more.
func testSessionCadence(t *testing.T, h *harness) {
	const ttl = 30 * time.Second
	clock := newSignalClock(NewClock(time.Now()))
	rs := &renewStore{Store: h.store}
	s := h.clockSession(h.coordinator(rs, coordinator.Config{}), clock, ttl)
	start := clock.Now()
	due := clock.next(t)
	for clock.Now().Sub(start) < ttl {
		clock.Advance(ttl / 30)
		if !due.After(clock.Now()) {
			due = clock.next(t) // the renewal is done when it waits again
		}
	}
	if n := rs.calls.Load(); n != 3 {
		t.Fatalf("%d renewals over one TTL (%v), want 3: one every TTL/3", n, ttl)
	}
	if s.Ctx().Err() != nil {
		t.Fatalf("session ended: %v", context.Cause(s.Ctx()))
	}
}

// testSessionLeaseGone (promise 6): a renewal that finds the lease gone
// ends the session at once (cause ErrSessionExpired), without waiting for
// its deadline. The session's clock never moves, so only that renewal can
// end it.
func testSessionLeaseGone(t *testing.T, h *harness) {
	s := h.clockSession(h.c, NewClock(time.Now()), 30*time.Second)
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	s.RenewNow()
	select {
	case <-s.Ctx().Done():
	case <-time.After(failBound):
		t.Fatal("session still alive after a renewal found its lease gone")
	}
	if cause := context.Cause(s.Ctx()); !errors.Is(cause, coordinator.ErrSessionExpired) {
		t.Fatalf("session ended with %v, want ErrSessionExpired", cause)
	}
	if s.Valid() {
		t.Fatal("ended session still valid")
	}
}

// reaperOn starts RunReaper of a coordinator over store, on its own clock,
// until the test ends, and returns that clock once the reaper's first pass
// is done and it watches for daemon deaths (it has set its scan timer).
func (h *harness) reaperOn(store kv.Store, interval time.Duration) *signalClock {
	clock := newSignalClock(NewClock(h.clock.Now()))
	reaper, err := coordinator.New(store, coordinator.Config{Namespace: h.ns, Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = reaper.RunReaper(ctx, nil, interval, nil)
	}()
	h.t.Cleanup(func() { cancel(); <-done })
	clock.next(h.t)
	return clock
}

// awaitAvailable waits until job id is available, checking at each wake-up
// of a watch of its queue (set up before the job could become available).
func (h *harness) awaitAvailable(woke <-chan struct{}, id, why string) {
	h.t.Helper()
	bound := time.After(failBound)
	for h.get(id).State != coordinator.StateAvailable {
		select {
		case <-woke:
		case <-bound:
			h.t.Fatalf("job %s is %s: %s", id, h.get(id).State, why)
		}
	}
}

// testReaperWatch (promise 7): the reaper reacts to a daemon's lease loss
// through its watch, without waiting for its periodic scan (an hour away,
// on a clock that does not move).
func testReaperWatch(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	s := h.session(h.c)
	h.claimOne(s)
	woke := h.watchAvailable()
	h.reaperOn(h.store, time.Hour)
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	h.awaitAvailable(woke, j.ID, "the reaper did not react to its owner's lease loss (its periodic scan is an hour away)")
}

// blindWatchStore's watches of worker registrations stay open and deliver
// nothing, as a watch that missed events (compaction, reconnects) would.
type blindWatchStore struct {
	kv.Store
}

func (s blindWatchStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	if !strings.HasSuffix(prefix, "/w/") {
		return s.Store.Watch(ctx, prefix, fromRev)
	}
	ch := make(chan kv.WatchResponse)
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch
}

// testReaperScan (promise 7): the reaper's periodic scan catches a lease
// loss that its watch missed, once its interval has passed.
func testReaperScan(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	s := h.session(h.c)
	h.claimOne(s)
	woke := h.watchAvailable()
	const interval = time.Minute
	clock := h.reaperOn(blindWatchStore{h.store}, interval)
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(interval)
	h.awaitAvailable(woke, j.ID, "the reaper's periodic scan did not reap it after its interval passed")
}

// testClaimRace (promise 1): two claims that read the same available job
// cannot both win it. One claim is held after its read while another
// coordinator claims the job; released, the first gets nothing.
func testClaimRace(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	gate := kvtest.NewGate(h.store)
	open := openOnce(t, gate)
	slow := h.coordinator(gate, coordinator.Config{})
	s1 := h.session(slow)
	gate.Arm()
	got := make(chan int, 1)
	go func() {
		runs, _, err := slow.Claim(h.ctx(), s1, coordinator.DefaultQueue, 1, false)
		if err != nil {
			t.Errorf("held claim: %v", err)
		}
		got <- len(runs)
	}()
	<-gate.Held() // the slow claim has read the job and waits to write
	fast := h.coordinator(h.store, coordinator.Config{})
	runs, _, err := fast.Claim(h.ctx(), h.session(fast), coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 {
		t.Fatalf("second claim: %d runs, %v; want 1", len(runs), err)
	}
	open()
	if n := <-got; n != 0 {
		t.Fatalf("both claims won job %s (the held one got %d runs)", j.ID, n)
	}
	if got := h.get(j.ID); got.Token != runs[0].Token() {
		t.Fatalf("job token %d, want the winning claim's %d", got.Token, runs[0].Token())
	}
}

// groupWaiting counts goroutines inside the group commit of outcomes (the
// leader and those queued behind it). Nothing else tells a test that an
// outcome has queued, so it reads the goroutines' stacks.
func groupWaiting() int {
	for n := 1 << 20; ; n *= 2 {
		buf := make([]byte, n)
		if m := runtime.Stack(buf, true); m < n {
			return strings.Count(string(buf[:m]), "coordinator.(*groupCommit).apply(")
		}
	}
}

// testGroupedOutcomesBatched (promise 3): outcomes applied together in one
// store transaction are each decided on their own fence. The first outcome's
// commit is held while the others queue behind it, so that they are applied
// in batches on every store (on Pebble they otherwise rarely are). Half the
// stale runs queue before the current run of their job and half after it, so
// that stale outcomes land both in the batch and in the one that follows
// (writes for one job go into consecutive transactions): all are refused,
// the current ones accepted.
func testGroupedOutcomesBatched(t *testing.T, h *harness) {
	for range 20 {
		h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	}
	gate := kvtest.NewGate(h.store)
	open := openOnce(t, gate)
	c := h.coordinator(gate, coordinator.Config{})
	s1, s2 := h.session(c), h.session(c)
	stale, _, err := c.Claim(h.ctx(), s1, coordinator.DefaultQueue, 10, false)
	if err != nil || len(stale) != 10 {
		t.Fatalf("claim 10: %d, %v", len(stale), err)
	}
	if err := h.store.Revoke(h.ctx(), s1.Lease()); err != nil {
		t.Fatal(err)
	}
	if n, err := h.c.Reap(h.ctx(), nil, nil); err != nil || n != 10 {
		t.Fatalf("Reap = %d, %v", n, err)
	}
	cur, _, err := c.Claim(h.ctx(), s2, coordinator.DefaultQueue, 20, false)
	if err != nil || len(cur) != 20 {
		t.Fatalf("claim 20: %d, %v", len(cur), err)
	}
	hasStale := map[string]bool{}
	for _, r := range stale {
		hasStale[r.Job().ID] = true
	}
	var lead *coordinator.Run // a current run of a job with no stale run
	var current []*coordinator.Run
	for _, r := range cur {
		if lead == nil && !hasStale[r.Job().ID] {
			lead = r
			continue
		}
		current = append(current, r)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[*coordinator.Run]error{}
	queued := 0
	complete := func(runs ...*coordinator.Run) {
		for _, r := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := r.Complete(h.ctx(), nil)
				mu.Lock()
				errs[r] = err
				mu.Unlock()
			}()
		}
		// Wait until they have all queued in the group commit.
		queued += len(runs)
		bound := time.After(failBound)
		for groupWaiting() < queued {
			select {
			case <-bound:
				open()
				t.Fatalf("only %d of %d outcomes reached the group commit", groupWaiting(), queued)
			case <-time.After(time.Millisecond):
			}
		}
	}
	gate.Arm()
	complete(lead) // its commit is held
	<-gate.Held()
	complete(stale[:5]...)
	complete(current...)
	complete(stale[5:]...)
	open()
	wg.Wait()
	for i, r := range stale {
		if err := errs[r]; !errors.Is(err, fence.ErrLeaseLost) {
			t.Errorf("stale run %d (queued %s its job's current run): %v, want ErrLeaseLost", i, map[bool]string{true: "before", false: "after"}[i < 5], err)
		}
	}
	for _, r := range cur {
		if err := errs[r]; err != nil {
			t.Errorf("current run of job %s: %v", r.Job().ID, err)
		}
	}
	if n := h.counts(); n[coordinator.StateCompleted] != 20 {
		t.Fatalf("completed = %d, want 20", n[coordinator.StateCompleted])
	}
}
