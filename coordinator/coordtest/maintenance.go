package coordtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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

// maintenanceTests: unique keys, promotion and the maintenance loop, and
// elections side by side.
var maintenanceTests = []suiteTest{
	{"SnoozeBeyondTheLatestTimeClamped", testSnoozeClamped},
	{"UniqueKeyNotUTF8", testUniqueKeyNotUTF8},
	{"MaintenanceWaitsPastEntriesItLeaves", testMaintenanceWaitsPastLeftEntries},
	{"ElectionIgnoresOtherElectionsKeys", testElectionIgnoresOtherKeys},
	{"PromotionSkipsJobRescheduledMeanwhile", testPromotionSkipsRescheduled},
	{"PromotionPassesStartAtTheirFloor", testPromotionStartsAtFloor},
	{"PromotionRefusedMoveKeepsTheFloor", testPromotionRefusedKeepsFloor},
	{"PromotionFloorAfterClockStepsBack", testPromotionFloorClockStepBack},
	{"PromotionFullReadAfterClockStepsBack", testPromotionFullReadClockStepBack},
	{"UniqueByStateOnlyFinalStates", testUniqueByStateFinalOnly},
	{"TimeoutUnderOneMillisecondRefused", testTimeoutUnderOneMillisecond},
	{"ListRefusesMalformedCursor", testListMalformedCursor},
	{"LostFinalReplyUnreadableRecordNotLost", testLostFinalReplyUnreadable},
	{"LostReleaseReplyThenReclaimedNotRefused", testLostReleaseReplyReclaimed},
}

// testLostReleaseReplyReclaimed (promises 3 and 9): a release whose reply
// was lost but which was applied makes the job available; another run
// claims it. The retried release is refused, but it must not be reported as
// ErrLeaseLost ("records nothing"): the release was recorded. Whether it
// was is not knowable from the run, so the outcome is unknown.
func testLostReleaseReplyReclaimed(t *testing.T, h *harness) {
	h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	fs := &flakyStore{Store: h.store}
	c := h.coordinator(fs, coordinator.Config{})
	s := h.session(c)
	run := h.claimOneFrom(c, s)
	fs.fail.Store(1) // applied, reply lost
	if err := run.Release(h.ctx()); !errors.Is(err, errReplyLost) {
		t.Fatalf("first release: %v", err)
	}
	other := h.claimOne(h.session(h.c))
	err := run.Release(h.ctx())
	if errors.Is(err, fence.ErrLeaseLost) || !errors.Is(err, coordinator.ErrUnknownOutcome) {
		t.Fatalf("retried release after the job was claimed again: %v; want ErrUnknownOutcome, not ErrLeaseLost", err)
	}
	if err := other.Complete(h.ctx(), nil); err != nil {
		t.Fatalf("the new run's outcome: %v", err)
	}
}

// readFailStore fails the next read-only transaction, once armed.
type readFailStore struct {
	*flakyStore
	failRead atomic.Int32
}

var errReadFailed = errors.New("read failed")

func (f *readFailStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if !kvtest.Writes(t) && f.failRead.Add(-1) >= 0 {
		return kv.TxnResult{}, errReadFailed
	}
	return f.flakyStore.Txn(ctx, t)
}

// testLostFinalReplyUnreadable (promises 3 and 9): a final write whose
// reply was lost but which was applied, retried while the record cannot be
// read back, is not reported as refused (ErrLeaseLost: "records nothing"):
// the outcome is recorded. The read error is returned, and a later retry
// finds its own write applied.
func testLostFinalReplyUnreadable(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	fs := &readFailStore{flakyStore: &flakyStore{Store: h.store}}
	c := h.coordinator(fs, coordinator.Config{})
	s := h.session(c)
	run := h.claimOneFrom(c, s)
	fs.fail.Store(1) // applied, reply lost
	if err := run.Complete(h.ctx(), json.RawMessage(`1`)); !errors.Is(err, errReplyLost) {
		t.Fatalf("first complete: %v", err)
	}
	fs.failRead.Store(1) // the retry cannot read the record back
	if err := run.Complete(h.ctx(), json.RawMessage(`1`)); errors.Is(err, fence.ErrLeaseLost) || err != nil && !errors.Is(err, errReadFailed) {
		t.Fatalf("retried complete with the record unreadable: %v; want the read error (or nil), not ErrLeaseLost", err)
	}
	if err := run.Complete(h.ctx(), json.RawMessage(`1`)); err != nil && !errors.Is(err, coordinator.ErrWrongState) {
		t.Fatalf("second retry: %v; want its own write found applied", err)
	}
	if err := run.Lost(); err != nil {
		t.Fatalf("run lost: %v", err)
	}
	h.wantState(j.ID, coordinator.StateCompleted)
}

// testUniqueByStateFinalOnly: UniqueOpts.ByState takes the final states
// (completed, discarded, cancelled); unfinished jobs always count. An
// unfinished or unknown state is refused, saying what is allowed, as the
// HTTP API refuses it, rather than silently dropped.
func testUniqueByStateFinalOnly(t *testing.T, h *harness) {
	for _, st := range []coordinator.State{coordinator.StateScheduled, coordinator.StateAvailable, coordinator.StateRunning, coordinator.StateRetryable, "done"} {
		_, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "u", Unique: &coordinator.UniqueOpts{ByState: []coordinator.State{coordinator.StateCompleted, st}}})
		if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "completed, discarded or cancelled") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("unique state %s: Enqueue = %v; want ErrInvalid saying completed, discarded or cancelled", st, err)
		}
	}
	if n := h.counts(); n[coordinator.StateAvailable] != 0 {
		t.Fatalf("counts = %v: something was written", n)
	}
	j := h.enqueue(coordinator.EnqueueParams{Kind: "u", Unique: &coordinator.UniqueOpts{ByState: []coordinator.State{coordinator.StateCancelled, coordinator.StateCompleted, coordinator.StateDiscarded}}})
	if fmt.Sprint(j.UniqueStates) != "[completed discarded cancelled]" {
		t.Fatalf("unique states = %v", j.UniqueStates)
	}
}

// testTimeoutUnderOneMillisecond: timeouts are stored in whole
// milliseconds; a positive timeout under 1ms would be stored as 0, "the
// worker's default". It is refused, as the HTTP API refuses it.
func testTimeoutUnderOneMillisecond(t *testing.T, h *harness) {
	for _, d := range []time.Duration{time.Nanosecond, 999 * time.Microsecond} {
		r, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "t", Timeout: d})
		if err == nil {
			t.Fatalf("timeout %s accepted, stored as timeout_ms %d", d, r.Job.TimeoutMS)
		}
		if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "at least 1ms") {
			t.Fatalf("timeout %s: Enqueue = %v; want ErrInvalid saying at least 1ms", d, err)
		}
	}
	if n := h.counts(); n[coordinator.StateAvailable] != 0 {
		t.Fatalf("counts = %v: something was written", n)
	}
	if j := h.enqueue(coordinator.EnqueueParams{Kind: "t", Timeout: time.Millisecond}); j.Timeout() != time.Millisecond {
		t.Fatalf("timeout 1ms stored as %s", j.Timeout())
	}
	if j := h.enqueue(coordinator.EnqueueParams{Kind: "t"}); j.TimeoutMS != 0 {
		t.Fatalf("no timeout stored as %d ms", j.TimeoutMS)
	}
}

// testListMalformedCursor: a cursor List never returned is refused with
// ErrInvalid, not answered with an empty last page; every cursor List
// returns is taken, also once the job it names is deleted.
func testListMalformedCursor(t *testing.T, h *harness) {
	for range 2 {
		h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: "avail"})
		h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: "later", ScheduledAt: h.clock.Now().Add(time.Hour)})
		h.enqueue(coordinator.EnqueueParams{Kind: "k"}) // claimed below
		j := h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: "gone"})
		if _, err := h.c.Cancel(h.ctx(), j.ID); err != nil {
			t.Fatal(err)
		}
	}
	if runs, _, err := h.c.Claim(h.ctx(), h.session(h.c), coordinator.DefaultQueue, 2, false); err != nil || len(runs) != 2 {
		t.Fatalf("Claim = %d runs, %v", len(runs), err)
	}
	filters := []coordinator.ListParams{
		{},
		{State: coordinator.StateAvailable},
		{State: coordinator.StateAvailable, Queue: "avail"},
		{State: coordinator.StateScheduled},
		{State: coordinator.StateRunning},
		{State: coordinator.StateCancelled},
	}
	cursors := make([]string, len(filters))
	for i, f := range filters {
		f.Limit = 1
		first, err := h.c.List(h.ctx(), f)
		if err != nil || len(first.Jobs) != 1 || first.Next == "" {
			t.Fatalf("%+v: first page %d jobs, next %q, %v", f, len(first.Jobs), first.Next, err)
		}
		cursors[i] = first.Next
		f.After = first.Next
		second, err := h.c.List(h.ctx(), f)
		if err != nil || len(second.Jobs) != 1 || second.Jobs[0].ID == first.Jobs[0].ID {
			t.Fatalf("%+v: second page %+v, %v", f, second, err)
		}
	}
	// The cursor of a job deleted since is still a cursor.
	cancelled := coordinator.ListParams{State: coordinator.StateCancelled, Limit: 1}
	first, err := h.c.List(h.ctx(), cancelled)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Delete(h.ctx(), first.Jobs[0].ID); err != nil {
		t.Fatal(err)
	}
	id := first.Jobs[0].ID
	for _, f := range []coordinator.ListParams{cancelled, {Limit: 1, After: id}, {Limit: 1, After: id[:10] + strings.Repeat("0", 16)}} {
		if f.State != "" {
			f.After = first.Next
		}
		if page, err := h.c.List(h.ctx(), f); err != nil || len(page.Jobs) != 1 {
			t.Fatalf("%+v, after a deleted job: %d jobs, %v", f, len(page.Jobs), err)
		}
	}
	for i, f := range filters {
		bad := []string{"garbage", "0", strings.ToLower(cursors[i]), cursors[i] + "/x", "x/" + cursors[i], cursors[i] + "\x00"}
		for _, c := range cursors {
			if strings.Count(c, "/") != strings.Count(cursors[i], "/") {
				bad = append(bad, c) // another listing's cursor, of another shape
			}
		}
		for _, after := range bad {
			f.After = after
			page, err := h.c.List(h.ctx(), f)
			if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "cursor") {
				t.Fatalf("%+v: List = %d jobs, %v; want ErrInvalid for a malformed cursor", f, len(page.Jobs), err)
			}
		}
	}
}

// testUniqueKeyNotUTF8: a unique key that is not valid UTF-8 (a binary
// digest, say) cannot be stored in a job's JSON record as it is: it would
// never be freed when the job ends. It is refused.
func testUniqueKeyNotUTF8(t *testing.T, h *harness) {
	key := "digest-\xff\xfe"
	r, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "u", UniqueKey: key})
	if err == nil {
		// Before: accepted, and the key was never freed. Show it.
		if _, err := h.c.Cancel(h.ctx(), r.Job.ID); err != nil {
			t.Fatal(err)
		}
		r2, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "u", UniqueKey: key})
		t.Fatalf("unique key that is not UTF-8 accepted; after its job was cancelled, a second enqueue = existed %v, %v", r2.Existed, err)
	}
	if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("Enqueue = %v, want ErrInvalid saying the key is not UTF-8", err)
	}
	if n := h.counts(); n[coordinator.StateAvailable] != 0 {
		t.Fatalf("counts = %v: something was written", n)
	}
	// A valid key with every other awkward character works as before.
	key = "a/b\x00c é"
	a := h.enqueue(coordinator.EnqueueParams{Kind: "u", UniqueKey: key})
	if _, err := h.c.Cancel(h.ctx(), a.ID); err != nil {
		t.Fatal(err)
	}
	if r, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "u", UniqueKey: key}); err != nil || r.Existed {
		t.Fatalf("after the holder was cancelled: %+v, %v", r, err)
	}
}

// testMaintenanceWaitsPastLeftEntries: a due timer entry that promotion
// leaves (its record unreadable, or too large to move) is no reason to
// run the next pass at once: RunMaintenance sleeps until the next job
// that is due after the pass, not 1 ms again and again (each pass
// re-reading and re-logging what it left).
func testMaintenanceWaitsPastLeftEntries(t *testing.T, h *harness) {
	clk, c := h.clockedAt(h.clock.Now()) // its own clock: no other timers
	root := h.keysRoot()
	id := "01ZZZZZZZZZZZZZZZZZZZZZZZZ"
	due := clk.Now().Add(-time.Hour).UnixNano()
	if _, err := h.store.Txn(h.ctx(), kv.Txn{Then: []kv.Op{
		kv.Put(fmt.Sprintf("%st/%020d/%s", root, due, id), []byte("scheduled"), 0),
		kv.Put(root+"j/"+id, []byte("not a job"), 0),
	}}); err != nil {
		t.Fatal(err)
	}
	r, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", ScheduledAt: clk.Now().Add(10 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx())
	done := make(chan error, 1)
	go func() { done <- c.RunMaintenance(ctx, coordinator.MaintainConfig{MaxWait: time.Minute}) }()
	defer func() {
		cancel()
		<-done
	}()
	sleep := func() time.Duration { // the pause after a pass
		t.Helper()
		for {
			if d, ok := clk.NextTimer(); ok {
				return d
			}
			select {
			case err := <-done:
				done <- err // for the deferred receive, which would wait for ever
				t.Fatalf("RunMaintenance returned %v", err)
			case <-time.After(time.Millisecond):
			}
		}
	}
	if d := sleep(); d != 10*time.Second {
		t.Fatalf("after a pass that left an unreadable entry, maintenance sleeps %s; want 10s, until the scheduled job is due", d)
	}
	clk.Advance(10 * time.Second)
	if d := sleep(); d != time.Minute {
		t.Fatalf("after promoting the job, maintenance sleeps %s; want MaxWait (1m)", d)
	}
	h.wantState(r.Job.ID, coordinator.StateAvailable)
}

// testPromotionSkipsRescheduled: promotion reads the due timer entries,
// then the jobs' records. A job that ran and failed again between the two
// reads (its old entry gone, a new one due later) is not promoted by the
// stale entry: it would run before its retry time, and its new timer
// entry would be left behind (counted as retryable for ever).
func testPromotionSkipsRescheduled(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k", ScheduledAt: h.clock.Now().Add(time.Minute)})
	h.clock.Advance(2 * time.Minute)
	gate := kvtest.NewGate(h.store)
	gate.Match = func(t kv.Txn) bool {
		return !kvtest.Writes(t) && len(t.Then) > 0 && strings.HasSuffix(t.Then[0].Key, "/j/"+j.ID)
	}
	maintainer := h.coordinator(gate, coordinator.Config{})
	gate.Arm()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := maintainer.PromoteDue(h.ctx())
		done <- result{n, err}
	}()
	<-gate.Held() // the pass read the due entry; it reads the record next
	// Meanwhile the job runs (an operator's retry, another maintainer)
	// and fails, to be retried in an hour.
	if _, err := h.c.Retry(h.ctx(), j.ID); err != nil {
		t.Fatal(err)
	}
	retryAt := h.clock.Now().Add(time.Hour)
	if err := h.claimOne(h.session(h.c)).Fail(h.ctx(), errors.New("boom"), coordinator.FailOpts{RetryAt: retryAt}); err != nil {
		t.Fatal(err)
	}
	gate.Open()
	if r := <-done; r.err != nil || r.n != 0 {
		t.Fatalf("PromoteDue = %d, %v; want nothing promoted", r.n, r.err)
	}
	if got := h.get(j.ID); got.State != coordinator.StateRetryable || !got.ScheduledAt.Equal(retryAt) {
		t.Fatalf("job is %s, scheduled at %s; want retryable at %s", got.State, got.ScheduledAt, retryAt)
	}
	if n := h.counts(); n[coordinator.StateRetryable] != 1 || n[coordinator.StateAvailable] != 0 {
		t.Fatalf("counts = %v; want the job once, retryable", n)
	}
	// In an hour it is promoted, once.
	h.clock.Advance(time.Hour)
	if n, err := h.c.PromoteDue(h.ctx()); err != nil || n != 1 {
		t.Fatalf("PromoteDue an hour later = %d, %v; want 1", n, err)
	}
	if n := h.counts(); n[coordinator.StateRetryable] != 0 || n[coordinator.StateAvailable] != 1 {
		t.Fatalf("counts = %v; want the job once, available", n)
	}
}

// relayStore hands the watches of one prefix to the test, which passes
// their responses on one at a time: once it has handed over a response,
// the watcher is done with the one before.
type relayStore struct {
	kv.Store
	prefix  string
	watches chan relayWatch
}

type relayWatch struct {
	ctx context.Context
	in  <-chan kv.WatchResponse
	out chan kv.WatchResponse
}

func (s *relayStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	if prefix != s.prefix {
		return s.Store.Watch(ctx, prefix, fromRev)
	}
	w := relayWatch{ctx: ctx, in: s.Store.Watch(ctx, prefix, fromRev), out: make(chan kv.WatchResponse)}
	s.watches <- w
	return w.out
}

// passRest passes w's remaining responses on until its watch ends.
func (w relayWatch) passRest() {
	defer close(w.out)
	for r := range w.in {
		select {
		case w.out <- r:
		case <-w.ctx.Done():
		}
	}
}

// testElectionIgnoresOtherElectionsKeys: the leader of election "maint"
// keeps its leadership when the leader key of another election whose name
// it prefixes ("maint-eu") is deleted: the store's watches are by prefix.
func testElectionIgnoresOtherKeys(t *testing.T, h *harness) {
	root := h.keysRoot()
	relay := &relayStore{Store: h.store, prefix: root + "e/maint", watches: make(chan relayWatch, 16)}
	c := h.coordinator(relay, coordinator.Config{})
	s := h.session(c)
	started, ended := make(chan struct{}, 4), make(chan struct{}, 4)
	ctx, cancel := context.WithCancel(h.ctx())
	done := make(chan error, 1)
	go func() {
		done <- c.RunElected(ctx, "maint", func() *coordinator.Session { return s }, func(ctx context.Context) error {
			started <- struct{}{}
			<-ctx.Done()
			ended <- struct{}{}
			return nil
		})
	}()
	<-started
	w := <-relay.watches // the leader's watch on its key
	defer func() {
		go w.passRest()
		cancel()
		<-done
	}()
	// Another election's leader key comes and goes, then comes again.
	for _, op := range []kv.Op{kv.Put(root+"e/maint-eu", []byte("x"), 0), kv.Delete(root + "e/maint-eu"), kv.Put(root+"e/maint-eu", []byte("y"), 0)} {
		if _, err := h.store.Txn(h.ctx(), kv.Txn{Then: []kv.Op{op}}); err != nil {
			t.Fatal(err)
		}
	}
	puts := 0
	for puts < 2 {
		r, ok := <-w.in
		if !ok || r.Err != nil {
			t.Fatalf("the leader's watch ended: %+v", r)
		}
		for _, ev := range r.Events {
			if ev.Type == kv.EventPut {
				puts++
			}
		}
		w.out <- r
	}
	// The leader took the last response: it is done with the delete.
	if w.ctx.Err() != nil {
		t.Fatal("the leader of maint stopped watching its key when the key of election maint-eu was deleted")
	}
	select {
	case <-ended:
		t.Fatal("the leader of maint lost its leadership when the key of election maint-eu was deleted")
	default:
	}
	if leader, err := c.Leader(h.ctx(), "maint"); err != nil || leader != s.WorkerID() {
		t.Fatalf("Leader(maint) = %q, %v; want %s", leader, err, s.WorkerID())
	}
}

// testSnoozeClamped: a snooze past MaxScheduledAt (the latest time the
// store keys) is until that time, as a RetryAt past it is; refused, the
// worker could not record it and the job would end discarded.
func testSnoozeClamped(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	r := h.claimOne(h.session(h.c))
	if err := r.Snooze(h.ctx(), time.Duration(1<<63-1)); err != nil {
		t.Fatalf("snooze for the longest duration: %v", err)
	}
	got := h.wantState(j.ID, coordinator.StateScheduled)
	if !got.ScheduledAt.Equal(coordinator.MaxScheduledAt) || got.Attempt != 0 {
		t.Fatalf("snoozed job: scheduled at %s, attempt %d; want %s, 0", got.ScheduledAt, got.Attempt, coordinator.MaxScheduledAt)
	}
}

// floorStore records where promotion passes start reading the timer
// index, and signals the end of each pass of RunMaintenance (its read of
// the next due time, which follows the pass).
type floorStore struct {
	kv.Store
	timers string
	passes chan []string // the starts of one pass's promotion reads

	mu     sync.Mutex
	starts []string
}

func (s *floorStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	res, err := s.Store.Range(ctx, r)
	if strings.HasPrefix(r.Start, s.timers) && r.End != "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		if r.End == kv.PrefixEnd(s.timers) {
			s.passes <- s.starts
			s.starts = nil
		} else {
			s.starts = append(s.starts, r.Start)
		}
	}
	return res, err
}

// floorCoordinator returns a coordinator of h's namespace on store, with
// clk and log, whose reads go through a floorStore.
func (h *harness) floorCoordinator(store kv.Store, clk coordinator.Clock, log slog.Handler) (*coordinator.Coordinator, *floorStore) {
	h.t.Helper()
	fs := &floorStore{Store: store, timers: h.keysRoot() + "t/", passes: make(chan []string, 16)}
	c, err := coordinator.New(fs, coordinator.Config{Namespace: h.ns, Clock: clk, Logger: slog.New(log)})
	if err != nil {
		h.t.Fatal(err)
	}
	return c, fs
}

// maintain runs c's RunMaintenance (MaxWait an hour) until the test ends.
// The function it returns waits for the end of the next pass and returns
// the starts of that pass's promotion reads; it fails the test (what
// names the pass) if RunMaintenance returns or no pass comes.
func (s *floorStore) maintain(h *harness, c *coordinator.Coordinator) func(what string) []string {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.ctx())
	done := make(chan error, 1)
	go func() { done <- c.RunMaintenance(ctx, coordinator.MaintainConfig{MaxWait: time.Hour}) }()
	h.t.Cleanup(func() {
		cancel()
		<-done
	})
	return func(what string) []string {
		h.t.Helper()
		select {
		case starts := <-s.passes:
			return starts
		case err := <-done:
			done <- err // for the receive at the test's end
			h.t.Fatalf("%s: RunMaintenance returned %v", what, err)
		case <-h.ctx().Done():
			h.t.Fatalf("%s: no pass", what)
		}
		return nil
	}
}

// timedClock is a Clock that signals each timer set on it, so that a test
// moves it only once the loop it drives waits on a timer: the end of a
// pass is signalled before the loop sets the timer of its sleep, and a
// clock moved before that is moved past the time the timer is set from.
type timedClock struct {
	*Clock
	set chan struct{}
}

func newTimedClock(now time.Time) timedClock {
	return timedClock{Clock: NewClock(now), set: make(chan struct{}, 64)}
}

func (c timedClock) After(d time.Duration) <-chan time.Time {
	ch := c.Clock.After(d)
	select {
	case c.set <- struct{}{}:
	default:
	}
	return ch
}

// testPromotionStartsAtFloor: a promotion pass of RunMaintenance reads the
// timer index from where the last one ended, not from its start (where it
// walked every entry promoted since the store last compacted, at every
// wake-up); a timer written below that floor (by a daemon whose clock is
// behind) lowers it through the watch and is promoted by the pass it
// wakes; and once a minute a pass reads from the start.
func testPromotionStartsAtFloor(t *testing.T, h *harness) {
	t0 := h.clock.Now()
	timers := h.keysRoot() + "t/"
	clk := newTimedClock(t0)
	c, fs := h.floorCoordinator(h.store, clk, slog.DiscardHandler)
	var due []string
	for i := range 20 {
		r, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", ScheduledAt: t0.Add(time.Duration(i+1) * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		due = append(due, r.Job.ID)
	}
	next := fs.maintain(h, c)
	pass := func(what string) []string {
		t.Helper()
		starts := next(what)
		if len(starts) == 0 {
			t.Fatalf("%s: the pass read no timers", what)
		}
		return starts
	}
	if s := pass("first pass"); s[0] != timers {
		t.Fatalf("the first pass read from %q; want the index's start", s[0])
	}
	<-clk.set // the sleep's timer, until the first job is due
	clk.Advance(time.Second)
	if s := pass("pass at the first due time"); s[0] == timers {
		t.Fatalf("the second pass read from the index's start again")
	}
	for _, id := range due {
		h.wantState(id, coordinator.StateAvailable)
	}
	// A timer written later wakes a pass, which starts past the entries
	// already promoted.
	if _, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", ScheduledAt: clk.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	lastPromoted := fmt.Sprintf("%s%020d", timers, t0.Add(20*time.Millisecond).UnixNano())
	if s := pass("pass woken by a new timer"); s[0] <= lastPromoted {
		t.Fatalf("a pass after the promotions read from %q; want past %q", s[0], lastPromoted)
	}
	// A daemon whose clock is 900 ms behind schedules a job 500 ms ahead
	// of its clock: due already by the maintainer's, below its floor.
	slow, err := coordinator.New(h.store, coordinator.Config{Namespace: h.ns, Clock: NewClock(clk.Now().Add(-900 * time.Millisecond)), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := slow.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", ScheduledAt: clk.Now().Add(-400 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	pass("pass woken by a timer below the floor")
	h.wantState(r.Job.ID, coordinator.StateAvailable)
	// Once a minute a pass reads from the start.
	clk.Advance(time.Minute)
	if _, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", ScheduledAt: clk.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if s := pass("pass a minute later"); s[0] != timers {
		t.Fatalf("a pass a minute later read from %q; want the index's start", s[0])
	}
}

// testPromotionRefusedKeepsFloor: a promotion whose move is refused (the
// job's record changed between the pass's read and its write, its timer
// entry unchanged) is tried again by the next pass: the pass's floor stays
// at the entry, not past it, where only the once-a-minute read from the
// start would find it.
func testPromotionRefusedKeepsFloor(t *testing.T, h *harness) {
	t0 := h.clock.Now()
	clk := newTimedClock(t0)
	gate := kvtest.NewGate(h.store)
	c, fs := h.floorCoordinator(gate, clk, slog.DiscardHandler)
	r, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", ScheduledAt: t0.Add(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	rec := h.keysRoot() + "j/" + r.Job.ID
	gate.Match = func(t kv.Txn) bool { // the move, after the record was read
		return len(t.Then) == 1 && t.Then[0].Txn != nil && len(t.Then[0].Txn.If) > 0 && t.Then[0].Txn.If[0].Key == rec
	}
	pass := fs.maintain(h, c)
	pass("nothing due yet")
	<-clk.set // the sleep's timer, until the job is due
	gate.Arm()
	clk.Advance(time.Second)
	<-gate.Held() // the pass read the due entry and the record, and moves it next
	// The record is written again meanwhile, its timer entry unchanged.
	got, err := h.store.Range(h.ctx(), kv.RangeRequest{Start: rec})
	if err != nil || len(got.KVs) != 1 {
		t.Fatalf("read %s: %v, %v", rec, got.KVs, err)
	}
	if _, err := h.store.Txn(h.ctx(), kv.Txn{Then: []kv.Op{kv.Put(rec, got.KVs[0].Value, 0)}}); err != nil {
		t.Fatal(err)
	}
	gate.Open()
	pass("the pass whose move was refused")
	h.wantState(r.Job.ID, coordinator.StateScheduled)
	// Any timer written wakes the next pass, which tries it again.
	if _, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", ScheduledAt: clk.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	pass("woken by a timer written")
	h.wantState(r.Job.ID, coordinator.StateAvailable)
}

// warnRecorder keeps the messages logged at warning level or above.
type warnRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnRecorder) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	w.msgs = append(w.msgs, msg)
	return nil
}
func (w *warnRecorder) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnRecorder) WithGroup(string) slog.Handler      { return w }
func (w *warnRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// testPromotionFloorClockStepBack: after the maintainer's clock steps back
// an hour, its floor is an hour ahead of the time it reads up to: passes
// read nothing (without failing), a job delayed after the step is keyed
// below the floor and is promoted at its time, and a job due by the old
// clock waits for its time by the new one. Each pass the test waits for
// is woken by a timer written (the clock's timers may fire too).
func testPromotionFloorClockStepBack(t *testing.T, h *harness) {
	t0 := h.clock.Now()
	clk := NewClock(t0)
	warns := &warnRecorder{}
	c, fs := h.floorCoordinator(h.store, clk, warns)
	enqueue := func(at time.Time) string {
		t.Helper()
		r, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", ScheduledAt: at})
		if err != nil {
			t.Fatal(err)
		}
		return r.Job.ID
	}
	early := enqueue(t0.Add(30 * time.Second))
	pass := fs.maintain(h, c)
	// until wakes passes, each with a timer far ahead, until ok holds
	// after one.
	until := func(what string, ok func() bool) {
		t.Helper()
		for range 4 {
			enqueue(clk.Now().Add(24 * time.Hour))
			pass(what)
			if ok() {
				return
			}
		}
		t.Fatalf("%s: not after 4 passes", what)
	}
	state := func(id string, want coordinator.State) func() bool {
		return func() bool { return h.get(id).State == want }
	}
	always := func() bool { return true }
	until("first pass", always)
	clk.Advance(time.Second)
	until("a second later", always)
	clk.Advance(-time.Hour)
	until("after the step back", always)
	if w := warns.take(); len(w) > 0 {
		t.Fatalf("a pass after the step back logged %q", w)
	}
	late := enqueue(clk.Now().Add(10 * time.Second))
	until("woken by the job delayed after the step", always)
	h.wantState(late, coordinator.StateScheduled)
	clk.Advance(10 * time.Second)
	until("at the delayed job's time", state(late, coordinator.StateAvailable))
	h.wantState(early, coordinator.StateScheduled)
	clk.Advance(time.Hour + 20*time.Second)
	until("at the early job's time", state(early, coordinator.StateAvailable))
	if w := warns.take(); len(w) > 0 {
		t.Fatalf("passes logged %q", w)
	}
}

// blindTimers is a store whose watches miss the puts of timer entries
// below below, as a bug could make the promotion floor miss a timer.
type blindTimers struct {
	kv.Store
	timers, below string
}

func (b blindTimers) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	return filterWatch(ctx, b.Store, prefix, fromRev, func(r kv.WatchResponse) (kv.WatchResponse, bool) {
		evs := r.Events[:0:0]
		for _, ev := range r.Events {
			if !(ev.Type == kv.EventPut && strings.HasPrefix(ev.KV.Key, b.timers) && ev.KV.Key < b.below) {
				evs = append(evs, ev)
			}
		}
		r.Events = evs
		return r, true
	})
}

// testPromotionFullReadClockStepBack: the once-a-minute pass from the
// timer index's start, the net under a floor that passed a due job (here
// the watch missed its timer, as a bug could), is timed on the
// coordinator's clock. After that clock steps back an hour, such a job is
// promoted by a pass a minute later, not only once the clock is back past
// the last read from the start (an hour and a minute).
func testPromotionFullReadClockStepBack(t *testing.T, h *harness) {
	t0 := h.clock.Now()
	clk := NewClock(t0)
	timers := h.keysRoot() + "t/"
	blind := blindTimers{Store: h.store, timers: timers, below: fmt.Sprintf("%s%020d", timers, t0.Add(-30*time.Minute).UnixNano())}
	c, fs := h.floorCoordinator(blind, clk, slog.DiscardHandler)
	pass := fs.maintain(h, c)
	// wake wakes a pass with a timer far ahead (its put is watched) and
	// waits for its end.
	wake := func(what string) {
		t.Helper()
		if _, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", ScheduledAt: clk.Now().Add(24 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		pass(what)
	}
	pass("first pass") // from the index's start
	clk.Advance(time.Second)
	wake("a second later") // from the floor
	clk.Advance(-time.Hour)
	wake("after the step back")
	// A daemon whose clock is behind schedules a job due by the
	// maintainer's clock: keyed below the floor, and its put is not
	// watched.
	slow, err := coordinator.New(h.store, coordinator.Config{Namespace: h.ns, Clock: NewClock(clk.Now().Add(-10 * time.Second)), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := slow.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "hidden", ScheduledAt: clk.Now().Add(-5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	wake("after the hidden job")
	if h.get(r.Job.ID).State != coordinator.StateScheduled {
		t.Fatal("a pass from the floor promoted the job the watch missed: the test hides nothing")
	}
	clk.Advance(time.Minute)
	wake("a minute later")
	if got := h.get(r.Job.ID).State; got != coordinator.StateAvailable {
		t.Fatalf("job %s, due and below the floor, is %s a minute after the clock stepped back: no pass read from the index's start", r.Job.ID, got)
	}
}
