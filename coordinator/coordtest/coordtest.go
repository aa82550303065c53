package coordtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
	"github.com/leasehold/leasehold/fence"
	"golang.org/x/sync/errgroup"
)

// suiteTest is one test of the suite, run over each store.
type suiteTest struct {
	name string
	fn   func(t *testing.T, h *harness)
}

// Run runs the suite. open returns a store for one test; it may return the
// same store every time.
func Run(t *testing.T, open func(t *testing.T) kv.Store) {
	tests := []suiteTest{
		{"EnqueueGetList", testEnqueueGetList},
		{"BadInputWritesNothing", testBadInputWritesNothing},
		{"ConcurrentClaimsNeverBothWin", testConcurrentClaims},
		{"TokenGrowsAcrossClaims", testTokenGrows},
		{"StaleTokenWritesRefused", testStaleTokenRefused},
		{"CancelRequestSurvivesCheckpoints", testCancelSurvivesCheckpoints},
		{"CancelByState", testCancelByState},
		{"RetryBackoffThenDiscard", testRetryThenDiscard},
		{"SnoozeKeepsAttempt", testSnooze},
		{"ScheduledPromotedWhenDue", testScheduledPromoted},
		{"RetentionPurgesFinished", testRetention},
		{"ReapRequeuesOrphans", testReap},
		{"ReapRespectsCancelAndRescueLimit", testReapCancelAndLimit},
		{"ReapNeverTakesFinishedOrReclaimed", testReapRaces},
		{"UniqueEnqueueRace", testUniqueRace},
		{"WaitReturnsFinal", testWait},
		{"SessionEndsWhenLeaseRevoked", testSessionRevoked},
		{"LostClaimReplyResolved", testLostClaimReply},
		{"LostFinalReplyResolved", testLostFinalReply},
		{"PriorityAndQueues", testPriorityAndQueues},
		{"ListPaging", testListPaging},
		{"ElectionOneLeaderAtATime", testElection},
		{"ClaimFloorNeverHidesAJob", testClaimFloor},
		{"StaleReadHidesNoJob", testStaleReadHidesNoJob},
		{"ClaimReadsPastTimeWindows", testClaimWindows},
		{"ClaimsCountFewKeys", testClaimsCountFewKeys},
		{"ClaimsInFlightTakeDifferentJobs", testClaimsInFlight},
		{"UnwatchedClaimsInFlightSkipEachOther", testUnwatchedClaimsInFlight},
		{"ConcurrentClaimsMissNoJob", testConcurrentClaimsMissNoJob},
		{"GroupedOutcomesAreFencedEach", testGroupedOutcomes},
		{"OrphanedClaimsReleased", testOrphanedClaims},
	}
	tests = append(tests, featureTests...)
	tests = append(tests, outcomeTests...)
	tests = append(tests, safetyTests...)
	tests = append(tests, periodicReviewTests...)
	tests = append(tests, maintenanceTests...)
	tests = append(tests, reapReviewTests...)
	tests = append(tests, claimReviewTests...)
	tests = append(tests, claimBytesTests...)
	tests = append(tests, opsReviewTests...)
	tests = append(tests, jobOpsReviewTests...)
	tests = append(tests, maintReviewTests...)
	tests = append(tests, purgeElectReviewTests...)
	tests = append(tests, purgePaceReviewTests...)
	tests = append(tests, runReviewTests...)
	tests = append(tests, watchLoopReviewTests...)
	tests = append(tests, watchResumeReviewTests...)
	tests = append(tests, reapLogReviewTests...)
	tests = append(tests, reapReplacedReviewTests...)
	tests = append(tests, reapersReviewTests...)
	tests = append(tests, chaosTests...)
	tests = append(tests, spaceTests...)
	tests = append(tests, clockStepTests...)
	tests = append(tests, sessionReviewTests...)
	tests = append(tests, limitReviewTests...)
	tests = append(tests, jsonTextReviewTests...)
	tests = append(tests, lostReplyReviewTests...)
	tests = append(tests, runOpsReviewTests...)
	tests = append(tests, callbackReviewTests...)
	tests = append(tests, namespaceReviewTests...)
	tests = append(tests, enqueueReviewTests...)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := open(t)
			h := newHarness(t, store, fmt.Sprintf("t%d-%d", i, time.Now().UnixNano()))
			tc.fn(t, h)
		})
	}
}

// harness is one namespace on one store, with a controllable clock.
type harness struct {
	t     *testing.T
	store kv.Store
	ns    string
	clock *Clock
	c     *coordinator.Coordinator
}

func newHarness(t *testing.T, store kv.Store, ns string) *harness {
	h := &harness{t: t, store: store, ns: ns, clock: NewClock(time.Now())}
	h.c = h.coordinator(store, coordinator.Config{})
	return h
}

// coordinator returns another coordinator on the same namespace and clock,
// possibly over a wrapped store.
func (h *harness) coordinator(store kv.Store, cfg coordinator.Config) *coordinator.Coordinator {
	cfg.Namespace = h.ns
	cfg.Clock = h.clock
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := coordinator.New(unwatchedRegistrations(store, h.keysRoot()+"w/"), cfg)
	if err != nil {
		h.t.Fatalf("coordinator.New: %v", err)
	}
	return c
}

// unwatchedRegistrations returns store with the watch of one worker's
// registration made silent: a session watches its own, and renews at once
// when it is deleted, so that a lease revoked elsewhere fences it within
// moments. The suite checks what the store refuses, with sessions that
// play daemons which have not noticed the end of their lease (paused past
// its TTL, or their watch not delivered yet), as their long TTL keeps
// their renewals from noticing it; the watch itself is tested on its own
// (TestSessionEndsAtOnceWhenItsLeaseIsRevokedElsewhere). Other watches,
// the reapers' of every registration among them, go through.
func unwatchedRegistrations(store kv.Store, workers string) kv.Store {
	q := quietRegistration{store, workers}
	if sc, ok := store.(kv.Scanner); ok {
		return struct {
			quietRegistration
			kv.Scanner
		}{q, sc}
	}
	return q
}

// quietRegistration silences watches of one key under workers, the
// registrations' prefix (not of the prefix itself: the reapers').
type quietRegistration struct {
	kv.Store
	workers string
}

func (s quietRegistration) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	if len(prefix) > len(s.workers) && strings.HasPrefix(prefix, s.workers) {
		ch := make(chan kv.WatchResponse)
		context.AfterFunc(ctx, func() { close(ch) })
		return ch
	}
	return s.Store.Watch(ctx, prefix, fromRev)
}

// keysRoot is the prefix of h's namespace's keys.
func (h *harness) keysRoot() string { return "/leasehold/" + h.ns + "/" }

func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	h.t.Cleanup(cancel)
	return ctx
}

var workerSeq atomic.Int64

// session opens a session with a long TTL: these tests end leases by
// revoking them, never by waiting.
func (h *harness) session(c *coordinator.Coordinator) *coordinator.Session {
	h.t.Helper()
	id := fmt.Sprintf("w%d-%s", workerSeq.Add(1), coordinator.NewWorkerID())
	s, err := c.NewSession(h.ctx(), coordinator.SessionConfig{TTL: 60 * time.Second, Worker: coordinator.WorkerInfo{ID: id}})
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

func (h *harness) enqueue(p coordinator.EnqueueParams) *coordinator.Job {
	h.t.Helper()
	r, err := h.c.Enqueue(h.ctx(), p)
	if err != nil {
		h.t.Fatalf("Enqueue: %v", err)
	}
	return r.Job
}

// watchAvailable runs WatchAvailable on the default queue through h.c (see
// watchWith).
func (h *harness) watchAvailable() <-chan struct{} { return h.watchWith(h.c) }

func (h *harness) claimOne(s *coordinator.Session) *coordinator.Run {
	h.t.Helper()
	return h.claimOneFrom(h.c, s)
}

// claimOneFrom is claimOne through coordinator c.
func (h *harness) claimOneFrom(c *coordinator.Coordinator, s *coordinator.Session) *coordinator.Run {
	h.t.Helper()
	runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
	if err != nil {
		h.t.Fatalf("Claim: %v", err)
	}
	if len(runs) != 1 {
		h.t.Fatalf("Claim got %d runs, want 1", len(runs))
	}
	return runs[0]
}

func (h *harness) get(id string) *coordinator.Job {
	h.t.Helper()
	j, err := h.c.Get(h.ctx(), id)
	if err != nil {
		h.t.Fatalf("Get %s: %v", id, err)
	}
	return j
}

func (h *harness) counts() map[coordinator.State]int {
	h.t.Helper()
	n, err := h.c.Counts(h.ctx())
	if err != nil {
		h.t.Fatalf("Counts: %v", err)
	}
	return n
}

func (h *harness) wantState(id string, want coordinator.State) *coordinator.Job {
	h.t.Helper()
	j := h.get(id)
	if j.State != want {
		h.t.Fatalf("job %s is %s, want %s (errors %+v)", id, j.State, want, j.Errors)
	}
	return j
}

func testEnqueueGetList(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "email", Payload: json.RawMessage(`{"to":"a@b"}`)})
	got := h.get(j.ID)
	if got.Kind != "email" || got.State != coordinator.StateAvailable || got.Queue != "default" || got.Priority != 1 ||
		got.MaxAttempts != coordinator.DefaultMaxAttempts || string(got.Payload) != `{"to":"a@b"}` || got.Attempt != 0 {
		t.Fatalf("stored job = %+v", got)
	}
	page, err := h.c.List(h.ctx(), coordinator.ListParams{})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != j.ID {
		t.Fatalf("List = %+v, %v", page, err)
	}
	page, err = h.c.List(h.ctx(), coordinator.ListParams{State: coordinator.StateRunning})
	if err != nil || len(page.Jobs) != 0 {
		t.Fatalf("List running = %+v, %v", page, err)
	}
	if _, err := h.c.Get(h.ctx(), "01ARZ3NDEKTSV4RRFFQ69G5FAV"); !errors.Is(err, coordinator.ErrNotFound) {
		t.Fatalf("Get missing: %v, want ErrNotFound", err)
	}
	// A job's errors are a JSON array before and after its runs, [] when
	// none (tools read the field as an array).
	r := h.claimOne(h.session(h.c))
	if err := r.Complete(h.ctx(), nil); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(h.get(j.ID))
	if err != nil || !strings.Contains(string(b), `"errors":[]`) {
		t.Fatalf("completed job's JSON %s (%v): want \"errors\":[]", b, err)
	}
}

func testBadInputWritesNothing(t *testing.T, h *harness) {
	big := make([]byte, coordinator.DefaultMaxPayloadBytes+1)
	for i := range big {
		big[i] = ' '
	}
	big[0] = '1'
	bad := []coordinator.EnqueueParams{
		{Kind: "k", Payload: json.RawMessage(`{"a":`)},
		{Kind: ""},
		{Kind: "bad kind"},
		{Kind: "k", Priority: 9},
		{Kind: "k", MaxAttempts: -1},
		{Kind: "k", Queue: "no/slash"},
		{Kind: "k", Payload: big},
		{Kind: "k", Timeout: -time.Second},
		// Past the store's time keys (Unix nanoseconds end in 2262): it
		// would be written, run at once, or not decode again.
		{Kind: "k", ScheduledAt: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Kind: "k", ScheduledAt: time.Date(9999, 12, 31, 23, 59, 59, 0, time.FixedZone("", -23*3600))},
	}
	for i, p := range bad {
		if _, err := h.c.Enqueue(h.ctx(), p); !errors.Is(err, coordinator.ErrInvalid) {
			// Not the params themselves: one holds a payload of megabytes.
			t.Errorf("Enqueue(bad case %d: kind %q, queue %q, %d-byte payload): err = %v, want ErrInvalid", i, p.Kind, p.Queue, len(p.Payload), err)
		}
	}
	// One bad job in a batch rejects the whole batch.
	if _, err := h.c.EnqueueBatch(h.ctx(), []coordinator.EnqueueParams{{Kind: "ok"}, {Kind: "k", Payload: json.RawMessage(`nope`)}}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Errorf("EnqueueBatch with a bad job: err = %v, want ErrInvalid", err)
	}
	for _, id := range []string{"", "x", "01ARZ3NDEKTSV4RRFFQ69G5FA!", "../../etc/passwd", "01arz3ndektsv4rrffq69g5fav"} {
		if _, err := h.c.Get(h.ctx(), id); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("Get(%q): err = %v, want ErrInvalid", id, err)
		}
	}
	if _, err := h.c.List(h.ctx(), coordinator.ListParams{State: "done"}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Errorf("List(state=done): err = %v, want ErrInvalid", err)
	}
	for st, n := range h.counts() {
		if n != 0 {
			t.Errorf("bad input wrote %d %s jobs", n, st)
		}
	}
}

func testConcurrentClaims(t *testing.T, h *harness) {
	const jobs, daemons = 60, 6
	ps := make([]coordinator.EnqueueParams, jobs)
	for i := range ps {
		ps[i] = coordinator.EnqueueParams{Kind: "k"}
	}
	if _, err := h.c.EnqueueBatch(h.ctx(), ps); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	won := map[string][]string{}
	g, ctx := errgroup.WithContext(h.ctx())
	for d := range daemons {
		c := h.coordinator(h.store, coordinator.Config{})
		s := h.session(c)
		g.Go(func() error {
			for {
				// Everyone races for the head of the queue.
				runs, _, err := c.Claim(ctx, s, coordinator.DefaultQueue, 3, d%2 == 0)
				if err != nil {
					return err
				}
				if len(runs) == 0 {
					n, err := c.Counts(ctx)
					if err != nil {
						return err
					}
					if n[coordinator.StateAvailable] == 0 {
						return nil
					}
					continue
				}
				mu.Lock()
				for _, r := range runs {
					won[r.Job().ID] = append(won[r.Job().ID], s.WorkerID())
				}
				mu.Unlock()
			}
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(won) != jobs {
		t.Errorf("%d jobs claimed, want %d", len(won), jobs)
	}
	for id, ws := range won {
		if len(ws) != 1 {
			t.Errorf("job %s claimed by %d daemons: %v", id, len(ws), ws)
		}
	}
	if n := h.counts(); n[coordinator.StateRunning] != jobs {
		t.Errorf("running = %d, want %d", n[coordinator.StateRunning], jobs)
	}
}

func testTokenGrows(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	s := h.session(h.c)
	var last fence.Token
	for i := range 5 {
		r := h.claimOne(s)
		if r.Token() <= last {
			t.Fatalf("claim %d token %d, not above %d", i, r.Token(), last)
		}
		if got := h.get(j.ID); got.Token != r.Token() || got.Owner != s.WorkerID() {
			t.Fatalf("running record token %d owner %q, want %d %q", got.Token, got.Owner, r.Token(), s.WorkerID())
		}
		last = r.Token()
		if err := r.Release(h.ctx()); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.get(j.ID); got.Attempt != 0 {
		t.Errorf("released runs used %d attempts", got.Attempt)
	}
}

// takeOver makes a second daemon own j after the first lost its lease.
func (h *harness) takeOver(old *coordinator.Session) (*coordinator.Session, *coordinator.Run) {
	h.t.Helper()
	if err := h.store.Revoke(h.ctx(), old.Lease()); err != nil {
		h.t.Fatalf("Revoke: %v", err)
	}
	if n, err := h.c.Reap(h.ctx(), nil, nil); err != nil || n != 1 {
		h.t.Fatalf("Reap = %d, %v; want 1", n, err)
	}
	s2 := h.session(h.coordinator(h.store, coordinator.Config{}))
	return s2, h.claimOne(s2)
}

func testStaleTokenRefused(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	s1 := h.session(h.c)
	r1 := h.claimOne(s1)
	if err := r1.Checkpoint(h.ctx(), json.RawMessage(`{"step":1}`)); err != nil {
		t.Fatalf("owner's checkpoint: %v", err)
	}
	_, r2 := h.takeOver(s1)
	if r2.Token() <= r1.Token() {
		t.Fatalf("new token %d not above old %d", r2.Token(), r1.Token())
	}
	if r2.Job().Attempt != 1 || string(r2.Job().Checkpoint) != `{"step":1}` {
		t.Errorf("new run sees attempt %d checkpoint %s; want 1 and the old checkpoint", r2.Job().Attempt, r2.Job().Checkpoint)
	}
	// The old run's writes are all refused, whichever comes first.
	err := r1.Checkpoint(h.ctx(), json.RawMessage(`{"step":2}`))
	var lost *fence.LostError
	if !errors.Is(err, fence.ErrLeaseLost) || !errors.As(err, &lost) || lost.Current != int64(r2.Token()) {
		t.Fatalf("stale checkpoint: err = %v, want ErrLeaseLost naming token %d", err, r2.Token())
	}
	if err := r1.Complete(h.ctx(), nil); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("stale complete: err = %v, want ErrLeaseLost", err)
	}
	if err := r1.Fail(h.ctx(), errors.New("x"), coordinator.FailOpts{}); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("stale fail: err = %v, want ErrLeaseLost", err)
	}
	got := h.wantState(j.ID, coordinator.StateRunning)
	if got.Token != r2.Token() || string(got.Checkpoint) != `{"step":1}` {
		t.Fatalf("record after stale writes: token %d checkpoint %s", got.Token, got.Checkpoint)
	}
	if err := r2.Complete(h.ctx(), json.RawMessage(`"ok"`)); err != nil {
		t.Fatalf("new owner's complete: %v", err)
	}
	got = h.wantState(j.ID, coordinator.StateCompleted)
	if got.Token != r2.Token() || got.Owner != r2.Session().WorkerID() || string(got.Result) != `"ok"` {
		t.Fatalf("final record names token %d owner %s, want the finishing run's %d %s", got.Token, got.Owner, r2.Token(), r2.Session().WorkerID())
	}
	// A stale write after the job finished is refused too.
	if err := r1.Complete(h.ctx(), nil); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("stale complete after finish: %v", err)
	}
}

func testCancelSurvivesCheckpoints(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	s := h.session(h.c)
	r := h.claimOne(s)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := r.Checkpoint(context.Background(), json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))); err != nil {
				t.Errorf("checkpoint: %v", err)
				return
			}
		}
	}()
	type request struct {
		id  string
		rev int64
	}
	seen := make(chan request, 1)
	wctx, wcancel := context.WithCancel(h.ctx())
	go func() {
		_ = h.c.WatchCancelRequests(wctx, func(id string, rev int64) {
			select {
			case seen <- request{id, rev}:
			default:
			}
		})
		close(seen)
	}()
	if _, err := h.c.Cancel(h.ctx(), j.ID); err != nil {
		t.Fatalf("Cancel running: %v", err)
	}
	select {
	case req := <-seen:
		if req.id != j.ID {
			t.Fatalf("cancel request seen for %s", req.id)
		}
		// The request's revision tells it apart from an earlier run's.
		if req.rev <= int64(r.Token()) {
			t.Fatalf("cancel request at revision %d, not after the run's token %d", req.rev, r.Token())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel request not delivered to the watcher")
	}
	// More checkpoints after the request: it must still be there.
	for i := range 20 {
		if err := r.Checkpoint(h.ctx(), json.RawMessage(fmt.Sprintf(`{"after":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	wcancel()
	for range seen {
	}
	if got := h.get(j.ID); !got.CancelRequested || got.State != coordinator.StateRunning {
		t.Fatalf("after checkpoints: cancel_requested=%v state=%s; the request was lost", got.CancelRequested, got.State)
	}
	if err := r.Cancel(h.ctx(), errors.New("cancel requested")); err != nil {
		t.Fatal(err)
	}
	if got := h.wantState(j.ID, coordinator.StateCancelled); got.CancelRequested {
		t.Error("finished job still shows a cancel request")
	}
}

func testCancelByState(t *testing.T, h *harness) {
	avail := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	sched := h.enqueue(coordinator.EnqueueParams{Kind: "k", ScheduledAt: h.clock.Now().Add(time.Hour)})
	for _, j := range []*coordinator.Job{avail, sched} {
		got, err := h.c.Cancel(h.ctx(), j.ID)
		if err != nil || got.State != coordinator.StateCancelled {
			t.Fatalf("Cancel %s job: %+v, %v", j.State, got, err)
		}
		h.wantState(j.ID, coordinator.StateCancelled)
		if _, err := h.c.Cancel(h.ctx(), j.ID); !errors.Is(err, coordinator.ErrWrongState) {
			t.Fatalf("second Cancel: %v, want ErrWrongState", err)
		}
	}
	if n := h.counts(); n[coordinator.StateAvailable]+n[coordinator.StateScheduled] != 0 || n[coordinator.StateCancelled] != 2 {
		t.Fatalf("counts after cancel: %v", n)
	}
	// Nothing left to claim.
	s := h.session(h.c)
	if runs, _, err := h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, 5, false); err != nil || len(runs) != 0 {
		t.Fatalf("claimed %d cancelled jobs (%v)", len(runs), err)
	}
}

func testRetryThenDiscard(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k", MaxAttempts: 2})
	s := h.session(h.c)
	r := h.claimOne(s)
	if err := r.Fail(h.ctx(), errors.New("boom"), coordinator.FailOpts{Trace: "stack"}); err != nil {
		t.Fatal(err)
	}
	got := h.wantState(j.ID, coordinator.StateRetryable)
	if len(got.Errors) != 1 || got.Errors[0].Error != "boom" || got.Errors[0].Trace != "stack" || got.Errors[0].Attempt != 1 {
		t.Fatalf("errors = %+v", got.Errors)
	}
	if !got.ScheduledAt.After(h.clock.Now()) {
		t.Fatalf("retry at %v, not after now %v", got.ScheduledAt, h.clock.Now())
	}
	if n, _ := h.c.PromoteDue(h.ctx()); n != 0 {
		t.Fatalf("promoted a retry before its time")
	}
	h.clock.Advance(time.Minute)
	if n, err := h.c.PromoteDue(h.ctx()); err != nil || n != 1 {
		t.Fatalf("PromoteDue = %d, %v", n, err)
	}
	r = h.claimOne(s)
	if r.Job().Attempt != 2 {
		t.Fatalf("second attempt numbered %d", r.Job().Attempt)
	}
	if err := r.Fail(h.ctx(), errors.New("boom again"), coordinator.FailOpts{}); err != nil {
		t.Fatal(err)
	}
	got = h.wantState(j.ID, coordinator.StateDiscarded)
	if got.FinalizedAt == nil || len(got.Errors) != 2 {
		t.Fatalf("discarded record = %+v", got)
	}
}

func testSnooze(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k", MaxAttempts: 1})
	s := h.session(h.c)
	for range 3 {
		r := h.claimOne(s)
		if r.Job().Attempt != 1 {
			t.Fatalf("attempt = %d after snoozes, want 1", r.Job().Attempt)
		}
		if err := r.Snooze(h.ctx(), time.Minute); err != nil {
			t.Fatal(err)
		}
		h.wantState(j.ID, coordinator.StateScheduled)
		h.clock.Advance(2 * time.Minute)
		if _, err := h.c.PromoteDue(h.ctx()); err != nil {
			t.Fatal(err)
		}
	}
	r := h.claimOne(s)
	if err := r.Complete(h.ctx(), nil); err != nil {
		t.Fatal(err)
	}
	h.wantState(j.ID, coordinator.StateCompleted)
}

func testScheduledPromoted(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k", ScheduledAt: h.clock.Now().Add(10 * time.Second)})
	h.wantState(j.ID, coordinator.StateScheduled)
	if next, err := h.c.NextDue(h.ctx()); err != nil || !next.Equal(j.ScheduledAt) {
		t.Fatalf("NextDue = %v, %v; want %v", next, err, j.ScheduledAt)
	}
	s := h.session(h.c)
	if runs, _, _ := h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false); len(runs) != 0 {
		t.Fatal("claimed a scheduled job before its time")
	}
	h.clock.Advance(9 * time.Second)
	if n, _ := h.c.PromoteDue(h.ctx()); n != 0 {
		t.Fatal("promoted early")
	}
	h.clock.Advance(time.Second)
	if n, err := h.c.PromoteDue(h.ctx()); err != nil || n != 1 {
		t.Fatalf("PromoteDue = %d, %v", n, err)
	}
	h.claimOne(s)
}

func testRetention(t *testing.T, h *harness) {
	c := h.coordinator(h.store, coordinator.Config{Retention: time.Hour})
	old := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	if _, err := c.Cancel(h.ctx(), old.ID); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(30 * time.Minute)
	young := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	if _, err := c.Cancel(h.ctx(), young.ID); err != nil {
		t.Fatal(err)
	}
	live := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	h.clock.Advance(31 * time.Minute)
	if n, err := c.PurgeFinished(h.ctx()); err != nil || n != 1 {
		t.Fatalf("PurgeFinished = %d, %v; want 1", n, err)
	}
	if _, err := c.Get(h.ctx(), old.ID); !errors.Is(err, coordinator.ErrNotFound) {
		t.Fatalf("old finished job still there: %v", err)
	}
	h.wantState(young.ID, coordinator.StateCancelled)
	h.wantState(live.ID, coordinator.StateAvailable)
}

func testReap(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k", MaxAttempts: 1})
	s := h.session(h.c)
	r := h.claimOne(s)
	if n, err := h.c.Reap(h.ctx(), nil, nil); err != nil || n != 0 {
		t.Fatalf("reaped a job with a live owner: %d, %v", n, err)
	}
	// A job its own daemon runs is never reaped by that daemon, even if
	// its ownership key is gone.
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	mine := func(id string) bool { return id == j.ID }
	if n, err := h.c.Reap(h.ctx(), nil, mine); err != nil || n != 0 {
		t.Fatalf("reaped its own running job: %d, %v", n, err)
	}
	if n, err := h.c.Reap(h.ctx(), nil, nil); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v; want 1", n, err)
	}
	got := h.wantState(j.ID, coordinator.StateAvailable)
	if got.Attempt != 0 || got.Rescues != 1 || got.Owner != "" || len(got.Errors) != 1 {
		t.Fatalf("reaped record: attempt %d rescues %d owner %q errors %d", got.Attempt, got.Rescues, got.Owner, len(got.Errors))
	}
	if err := r.Complete(h.ctx(), nil); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("old owner's complete after reap: %v", err)
	}
	// MaxAttempts 1 and one lost run: the retry budget is intact.
	s2 := h.session(h.c)
	r2 := h.claimOne(s2)
	if err := r2.Complete(h.ctx(), nil); err != nil {
		t.Fatal(err)
	}
	h.wantState(j.ID, coordinator.StateCompleted)
}

func testReapCancelAndLimit(t *testing.T, h *harness) {
	c := h.coordinator(h.store, coordinator.Config{MaxRescues: 2})
	cancelled := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	s := h.session(c)
	h.claimOne(s)
	if _, err := c.Cancel(h.ctx(), cancelled.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Reap(h.ctx(), nil, nil); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v", n, err)
	}
	h.wantState(cancelled.ID, coordinator.StateCancelled)

	killer := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	for i := 1; i <= 3; i++ {
		s := h.session(c)
		h.claimOne(s)
		if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Reap(h.ctx(), nil, nil); err != nil || n != 1 {
			t.Fatalf("Reap %d = %d, %v", i, n, err)
		}
	}
	got := h.wantState(killer.ID, coordinator.StateDiscarded)
	if got.Rescues != 3 {
		t.Fatalf("rescues = %d", got.Rescues)
	}
}

// heldReap ends session s (its lease revoked) and starts a reap by another
// coordinator whose write is held: it returns once that reaper has read
// the job, with the function that lets it write and returns what its Reap
// returned.
func (h *harness) heldReap(s *coordinator.Session) (finish func() (int, error)) {
	gate := kvtest.NewGate(h.store)
	open := openOnce(h.t, gate)
	reaper := h.coordinator(gate, coordinator.Config{})
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		h.t.Fatal(err)
	}
	gate.Arm()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := reaper.Reap(h.ctx(), nil, nil)
		done <- result{n, err}
	}()
	select {
	case <-gate.Held():
	case <-time.After(failBound):
		h.t.Fatal("the reaper never reached the held transaction")
	}
	return func() (int, error) {
		open()
		r := <-done
		return r.n, r.err
	}
}

// testReapRaces checks the reaper's transaction re-checks what it read: a
// job claimed again between its read and its write is left alone (River
// #1302; one finished meanwhile: ReapLeavesJobFinishedMeanwhile).
func testReapRaces(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	s := h.session(h.c)
	h.claimOne(s)
	// The reaper reads the job while its owner is gone...
	finish := h.heldReap(s)
	// ...and before it writes, another daemon reaps and claims the job.
	if n, err := h.c.Reap(h.ctx(), nil, nil); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v", n, err)
	}
	r2 := h.claimOne(h.session(h.c))
	if n, err := finish(); err != nil || n != 0 {
		t.Fatalf("held Reap = %d, %v; want nothing reaped: the job was taken meanwhile", n, err)
	}
	got := h.wantState(j.ID, coordinator.StateRunning)
	if got.Token != r2.Token() {
		t.Fatalf("token %d, want the new claim's %d", got.Token, r2.Token())
	}
}

func testUniqueRace(t *testing.T, h *harness) {
	const racers = 16
	ids := make([]string, racers)
	existed := make([]bool, racers)
	g, ctx := errgroup.WithContext(h.ctx())
	for i := range racers {
		c := h.coordinator(h.store, coordinator.Config{})
		g.Go(func() error {
			r, err := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k", UniqueKey: "report-2026-12-02"})
			if err != nil {
				return err
			}
			ids[i], existed[i] = r.Job.ID, r.Existed
			return nil
		})
	}
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
	if inserted != 1 {
		t.Fatalf("%d racers say they inserted", inserted)
	}
	if n := h.counts(); n[coordinator.StateAvailable] != 1 {
		t.Fatalf("available = %d", n[coordinator.StateAvailable])
	}
	// Once the job is final, the key is free again.
	if _, err := h.c.Cancel(h.ctx(), ids[0]); err != nil {
		t.Fatal(err)
	}
	r, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", UniqueKey: "report-2026-12-02"})
	if err != nil || r.Existed || r.Job.ID == ids[0] {
		t.Fatalf("enqueue after the unique job finished: %+v, %v", r, err)
	}
}

func testWait(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	s := h.session(h.c)
	r := h.claimOne(s)
	got := make(chan *coordinator.Job, 1)
	go func() {
		j, err := h.c.Wait(h.ctx(), j.ID)
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		got <- j
	}()
	if err := r.Checkpoint(h.ctx(), json.RawMessage(`1`)); err != nil {
		t.Fatal(err)
	}
	if err := r.Complete(h.ctx(), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case fj := <-got:
		if fj == nil || fj.State != coordinator.StateCompleted {
			t.Fatalf("Wait returned %+v", fj)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the job completed")
	}
}

func testSessionRevoked(t *testing.T, h *harness) {
	s := h.session(h.c)
	if !s.Valid() {
		t.Fatal("new session not valid")
	}
	ws, err := h.c.Workers(h.ctx())
	if err != nil || len(ws) != 1 || ws[0].ID != s.WorkerID() {
		t.Fatalf("Workers = %+v, %v", ws, err)
	}
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	// The next renewal finds the lease gone; with a 60s TTL that is 20s
	// away, so renew now by closing and checking the registration instead.
	ws, err = h.c.Workers(h.ctx())
	if err != nil || len(ws) != 0 {
		t.Fatalf("Workers after revoke = %+v, %v", ws, err)
	}
	if _, err := h.store.KeepAliveOnce(h.ctx(), s.Lease()); !errors.Is(err, kv.ErrLeaseNotFound) {
		t.Fatalf("KeepAliveOnce on revoked lease: %v", err)
	}
}

// flakyStore applies a write transaction and then reports an error, as a
// connection lost before the reply would.
type flakyStore struct {
	kv.Store
	fail atomic.Int32 // number of upcoming writes to "lose"
	drop atomic.Int32 // number of upcoming writes to fail without applying them
	// loseEvery, if positive, loses the reply of every loseEvery-th
	// write too; lost counts the replies lost.
	loseEvery int64
	writes    atomic.Int64
	lost      atomic.Int64
}

var errReplyLost = errors.New("reply lost")

func (f *flakyStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if kvtest.Writes(t) && f.drop.Add(-1) >= 0 {
		return kv.TxnResult{}, errReplyLost
	}
	res, err := f.Store.Txn(ctx, t)
	if err == nil && kvtest.Writes(t) && (f.fail.Add(-1) >= 0 || f.loseEvery > 0 && f.writes.Add(1)%f.loseEvery == 0) {
		f.lost.Add(1)
		return kv.TxnResult{}, errReplyLost
	}
	return res, err
}

func testLostClaimReply(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	fs := &flakyStore{Store: h.store}
	c := h.coordinator(fs, coordinator.Config{})
	s := h.session(c)
	fs.fail.Store(1)
	runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 {
		t.Fatalf("claim with lost reply: %d runs, %v; want it resolved to 1", len(runs), err)
	}
	got := h.wantState(j.ID, coordinator.StateRunning)
	if got.Token != runs[0].Token() || got.Attempt != 1 {
		t.Fatalf("record token %d attempt %d, run token %d", got.Token, got.Attempt, runs[0].Token())
	}
	if err := runs[0].Complete(h.ctx(), nil); err != nil {
		t.Fatalf("complete after resolved claim: %v", err)
	}
}

func testLostFinalReply(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	fs := &flakyStore{Store: h.store}
	c := h.coordinator(fs, coordinator.Config{})
	s := h.session(c)
	runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 {
		t.Fatal(err)
	}
	fs.fail.Store(1)
	if err := runs[0].Complete(h.ctx(), json.RawMessage(`1`)); !errors.Is(err, errReplyLost) {
		t.Fatalf("first complete: %v", err)
	}
	// A second attempt fails before reaching the store: the first one's
	// record must still be recognised by the third.
	fs.drop.Store(1)
	if err := runs[0].Complete(h.ctx(), json.RawMessage(`1`)); !errors.Is(err, errReplyLost) {
		t.Fatalf("second complete: %v", err)
	}
	// The retry finds its own write applied, not a lost lease.
	if err := runs[0].Complete(h.ctx(), json.RawMessage(`1`)); err != nil {
		t.Fatalf("retried complete: %v", err)
	}
	h.wantState(j.ID, coordinator.StateCompleted)
}

func testPriorityAndQueues(t *testing.T, h *harness) {
	low := h.enqueue(coordinator.EnqueueParams{Kind: "k", Priority: 4})
	high := h.enqueue(coordinator.EnqueueParams{Kind: "k", Priority: 1})
	other := h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: "emails"})
	s := h.session(h.c)
	if r := h.claimOne(s); r.Job().ID != high.ID {
		t.Fatalf("claimed %s first, want the priority-1 job", r.Job().ID)
	}
	if r := h.claimOne(s); r.Job().ID != low.ID {
		t.Fatalf("claimed %s second, want the priority-4 job", r.Job().ID)
	}
	if runs, _, _ := h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false); len(runs) != 0 {
		t.Fatal("claimed a job of another queue")
	}
	runs, _, err := h.c.Claim(h.ctx(), s, "emails", 5, false)
	if err != nil || len(runs) != 1 || runs[0].Job().ID != other.ID {
		t.Fatalf("claim from emails: %d, %v", len(runs), err)
	}
}

func testListPaging(t *testing.T, h *harness) {
	ps := make([]coordinator.EnqueueParams, 25)
	for i := range ps {
		ps[i] = coordinator.EnqueueParams{Kind: "k"}
		if i%5 == 0 {
			ps[i].Kind = "other"
		}
	}
	res, err := h.c.EnqueueBatch(h.ctx(), ps)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range res {
		if r.Job.Kind == "k" {
			want = append(want, r.Job.ID)
		}
	}
	for _, st := range []coordinator.State{"", coordinator.StateAvailable} {
		var got []string
		after := ""
		for range 10 {
			page, err := h.c.List(h.ctx(), coordinator.ListParams{State: st, Kind: "k", Limit: 7, After: after})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page.Jobs {
				got = append(got, j.ID)
			}
			if page.Next == "" {
				break
			}
			after = page.Next
		}
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("state %q: paged %d jobs, want %d", st, len(got), len(want))
		}
	}
}

func testElection(t *testing.T, h *harness) {
	s1, s2 := h.session(h.c), h.session(h.c)
	var inside atomic.Int32
	var revoked atomic.Bool // a paused old leader may briefly overlap after this
	leaders := make(chan string, 8)
	ctx, cancel := context.WithCancel(h.ctx())
	var wg sync.WaitGroup
	for _, s := range []*coordinator.Session{s1, s2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = h.c.RunElected(ctx, "maintenance", func() *coordinator.Session { return s }, func(ctx context.Context) error {
				if inside.Add(1) != 1 && !revoked.Load() {
					t.Errorf("two leaders at once")
				}
				leaders <- s.WorkerID()
				<-ctx.Done()
				inside.Add(-1)
				return nil
			})
		}()
	}
	first := <-leaders
	if got, err := h.c.Leader(h.ctx(), "maintenance"); err != nil || got != first {
		t.Fatalf("Leader = %q, %v; want %q", got, err, first)
	}
	// The leader's lease goes: the other takes over.
	lost := s1
	if first == s2.WorkerID() {
		lost = s2
	}
	revoked.Store(true)
	if err := h.store.Revoke(h.ctx(), lost.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case second := <-leaders:
		if second == first {
			t.Fatalf("leadership stayed with %s after its lease was revoked", first)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no new leader after the first lost its lease")
	}
	cancel()
	// The first leader's fn only ends when its session notices; close it.
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	_ = lost.Close(cctx)
	wg.Wait()
}

// testClaimFloor: while a queue is watched, claims skip the index entries
// of jobs already claimed; a job that becomes available before that point
// (a higher priority) must still be claimed first.
func testClaimFloor(t *testing.T, h *harness) {
	for range 5 {
		h.enqueue(coordinator.EnqueueParams{Kind: "k", Priority: 2})
	}
	woke := h.watchAvailable()
	s := h.session(h.c)
	runs, _, err := h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, 3, false)
	if err != nil || len(runs) != 3 {
		t.Fatalf("claim 3: %d, %v", len(runs), err)
	}
	var urgent *coordinator.Job
	h.seen(woke, "the new job", func() { urgent = h.enqueue(coordinator.EnqueueParams{Kind: "k", Priority: 1}) })
	r := h.claimOne(s)
	if r.Job().ID != urgent.ID {
		t.Fatalf("claimed %s (priority %d), want the priority-1 job that landed before the floor", r.Job().ID, r.Job().Priority)
	}
	// The rest are still found.
	runs, _, err = h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, 5, false)
	if err != nil || len(runs) != 2 {
		t.Fatalf("claim the rest: %d, %v", len(runs), err)
	}
	// The queue is empty: a claim finds nothing and moves the floor to the
	// queue's end. A job that lands afterwards lowers it and is found at
	// once, not at the next read from the queue's start.
	if runs, _, err = h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, 5, false); err != nil || len(runs) != 0 {
		t.Fatalf("claim from an empty queue: %d, %v", len(runs), err)
	}
	var late *coordinator.Job
	h.seen(woke, "the late job", func() { late = h.enqueue(coordinator.EnqueueParams{Kind: "k", Priority: 3}) })
	if r := h.claimOne(s); r.Job().ID != late.ID {
		t.Fatalf("claimed %s, want the job that landed after the queue emptied", r.Job().ID)
	}
}

// testStaleReadHidesNoJob: etcd tells watchers of a write just before
// reads can see it, so a claim woken by a new job may read the queue at a
// revision without it. Such a read must not move the floor past the job,
// and the claim reads again rather than report the queue empty: a worker
// whose claim finds nothing waits for the next wake-up or poll.
func testStaleReadHidesNoJob(t *testing.T, h *harness) {
	stale := &staleRangeStore{Store: h.store}
	c := h.coordinator(stale, coordinator.Config{})
	woke := h.watchWith(c)
	s := h.session(c)
	// The queue is empty: a claim reads to its end and moves the floor
	// there.
	if runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false); err != nil || len(runs) != 0 {
		t.Fatalf("claim from an empty queue: %d runs, %v", len(runs), err)
	}
	var job *coordinator.Job
	h.seen(woke, "the job", func() { job = h.enqueue(coordinator.EnqueueParams{Kind: "k"}) })
	claimDespiteStaleRead(t, h, c, s, stale, job)
}

// claimDespiteStaleRead claims from the default queue with its next read
// answered stale (missing job): the claim must still take job, and if it
// does not, the claim after it says whether the floor passed the job.
func claimDespiteStaleRead(t *testing.T, h *harness, c *coordinator.Coordinator, s *coordinator.Session, stale *staleRangeStore, job *coordinator.Job) {
	t.Helper()
	stale.armed.Store(true) // the next read of the queue misses the job
	runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 || runs[0].Job().ID != job.ID {
		t.Errorf("claim whose first read missed the job: %d runs, %v; want job %s", len(runs), err, job.ID)
		if runs, _, err = c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false); err != nil || len(runs) != 1 {
			t.Fatalf("the claim after it: %d runs, %v; the floor passed the job", len(runs), err)
		}
	}
	if stale.armed.Load() {
		t.Fatal("no read of the queue was answered stale: the test tested nothing")
	}
}

// staleRangeStore answers the first read of an available index after it
// is armed as etcd may just after a watch event: with nothing, at an older
// revision.
type staleRangeStore struct {
	kv.Store
	armed atomic.Bool
}

func (s *staleRangeStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if strings.Contains(r.Start, "/q/") && s.armed.CompareAndSwap(true, false) {
		return kv.RangeResult{Revision: 1}, nil
	}
	return s.Store.Range(ctx, r)
}

// testClaimWindows: a claim that reads from a floor reads windows of
// scheduled time after it before reading on to the queue's end; jobs
// beyond every window, and of a later priority, are still claimed, in
// order.
func testClaimWindows(t *testing.T, h *harness) {
	first := h.enqueue(coordinator.EnqueueParams{Kind: "k", Priority: 2})
	later := h.enqueue(coordinator.EnqueueParams{Kind: "k", Priority: 2, ScheduledAt: h.clock.Now().Add(200 * time.Second)})
	last := h.enqueue(coordinator.EnqueueParams{Kind: "k", Priority: 3})
	h.clock.Advance(300 * time.Second)
	if n, err := h.c.PromoteDue(h.ctx()); err != nil || n != 1 {
		t.Fatalf("PromoteDue = %d, %v", n, err)
	}
	h.watchAvailable() // the floor is kept only while the queue is watched
	s := h.session(h.c)
	for i, want := range []*coordinator.Job{first, later, last} {
		if r := h.claimOne(s); r.Job().ID != want.ID {
			t.Fatalf("claim %d took %s, want %s", i+1, r.Job().ID, want.ID)
		}
	}
	if runs, _, err := h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, 5, false); err != nil || len(runs) != 0 {
		t.Fatalf("claim from an empty queue: %d, %v", len(runs), err)
	}
}

// countingStore reports that ranges cost every key up to their end, as
// etcd's do, and adds up how many limited ranges it served and how many
// live keys they spanned.
type countingStore struct {
	kv.Store
	reads, spanned atomic.Int64
}

func (s *countingStore) Limits() kv.Limits {
	l := s.Store.Limits()
	l.RangeCountsAll = true
	return l
}

func (s *countingStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if r.Limit > 0 && r.End != "" {
		s.reads.Add(1)
		all, err := s.Store.Range(ctx, kv.RangeRequest{Start: r.Start, End: r.End, KeysOnly: true})
		if err != nil {
			return kv.RangeResult{}, err
		}
		s.spanned.Add(int64(len(all.KVs)))
	}
	return s.Store.Range(ctx, r)
}

// testClaimsCountFewKeys: on a store where a limited range costs every
// key up to its end (etcd), claims from a long queue must not each span
// the backlog. 600 jobs enqueued at one instant (one batch: time windows
// cannot split them), claimed 10 at a time: without the horizon each claim
// spans the whole remainder (about 13,600 keys in all); with it, mostly
// the 40 keys read ahead.
func testClaimsCountFewKeys(t *testing.T, h *harness) {
	ps := make([]coordinator.EnqueueParams, 600)
	for i := range ps {
		ps[i] = coordinator.EnqueueParams{Kind: "k"}
	}
	if _, err := h.c.EnqueueBatch(h.ctx(), ps); err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: h.store}
	c := h.coordinator(cs, coordinator.Config{})
	h.watchWith(c)
	s := h.session(c)
	seen := map[string]bool{}
	for i := range 30 {
		runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 10, false)
		if err != nil || len(runs) != 10 {
			t.Fatalf("claim %d: %d jobs, %v", i+1, len(runs), err)
		}
		for _, r := range runs {
			if seen[r.Job().ID] {
				t.Fatalf("job %s claimed twice", r.Job().ID)
			}
			seen[r.Job().ID] = true
		}
	}
	if n := cs.spanned.Load(); n > 8000 {
		t.Fatalf("30 claims of 10 spanned %d keys in all: claims read the backlog", n)
	}
}

// watchWith runs WatchAvailable of the default queue on c (which keeps a
// claim floor only while it watches) until the test ends. It returns once
// the watch is set up; the channel then signals each wake-up.
func (h *harness) watchWith(c *coordinator.Coordinator) <-chan struct{} {
	ctx, cancel := context.WithCancel(context.Background())
	wake := make(chan struct{}, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.WatchAvailable(ctx, coordinator.DefaultQueue, func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
	}()
	h.t.Cleanup(func() { cancel(); <-done })
	<-wake // the watch is set up (it wakes once at start)
	return wake
}

// seen runs do, which should make a watch wake woke, and waits for that
// wake-up (earlier ones are dropped first).
func (h *harness) seen(woke <-chan struct{}, what string, do func()) {
	h.t.Helper()
	for len(woke) > 0 {
		<-woke
	}
	do()
	select {
	case <-woke:
	case <-time.After(10 * time.Second):
		h.t.Fatalf("the watch did not see %s", what)
	}
}

// stepStore holds the next range read (of more than one key), and the
// next writing Txn, of a claim until the test lets them go.
type stepStore struct {
	kv.Store
	rangeArmed, txnArmed atomic.Bool
	rangeHeld, rangeGo   chan struct{}
	txnHeld, txnGo       chan struct{}
}

func newStepStore(s kv.Store) *stepStore {
	return &stepStore{Store: s, rangeHeld: make(chan struct{}), rangeGo: make(chan struct{}), txnHeld: make(chan struct{}), txnGo: make(chan struct{})}
}

func (g *stepStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if r.End != "" && g.rangeArmed.CompareAndSwap(true, false) {
		close(g.rangeHeld)
		<-g.rangeGo
	}
	return g.Store.Range(ctx, r)
}

func (g *stepStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if kvtest.Writes(t) && g.txnArmed.CompareAndSwap(true, false) {
		close(g.txnHeld)
		<-g.txnGo
	}
	return g.Store.Txn(ctx, t)
}

// testClaimsInFlight: a daemon keeps two claims of a queue in flight. The
// second reads on from where the first moved the floor, even when a job
// became available while the first was reading (which must not stop the
// floor from moving, nor hide that job): the two take different jobs, and
// neither loses any to the other.
func testClaimsInFlight(t *testing.T, h *harness) {
	for range 20 {
		h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	}
	g := newStepStore(h.store)
	c := h.coordinator(g, coordinator.Config{})
	wake := h.watchWith(c)
	s := h.session(c)
	type result struct {
		runs []*coordinator.Run
		st   coordinator.ClaimStats
		err  error
	}
	first := make(chan result, 1)
	g.rangeArmed.Store(true)
	g.txnArmed.Store(true)
	go func() {
		runs, st, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 5, false)
		first <- result{runs, st, err}
	}()
	<-g.rangeHeld
	// A job becomes available while the first claim reads.
	var late *coordinator.Job
	h.seen(wake, "the late job", func() { late = h.enqueue(coordinator.EnqueueParams{Kind: "k"}) })
	close(g.rangeGo)
	<-g.txnHeld // the first claim has read and waits to commit
	second, st, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 5, false)
	if err != nil || len(second) != 5 || st.Conflicts != 0 {
		t.Fatalf("second claim: %d jobs, %d conflicts, %v; want 5 and none", len(second), st.Conflicts, err)
	}
	close(g.txnGo)
	r := <-first
	if r.err != nil || len(r.runs) != 5 || r.st.Conflicts != 0 {
		t.Fatalf("first claim: %d jobs, %d conflicts, %v; want 5 and none", len(r.runs), r.st.Conflicts, r.err)
	}
	rest, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 50, false)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, x := range append(append(r.runs, second...), rest...) {
		if seen[x.Job().ID] {
			t.Fatalf("job %s claimed twice", x.Job().ID)
		}
		seen[x.Job().ID] = true
	}
	if len(seen) != 21 || !seen[late.ID] {
		t.Fatalf("claimed %d of 21 jobs (the late one: %v)", len(seen), seen[late.ID])
	}
}

// testUnwatchedClaimsInFlight: with no watch of the queue there is no
// floor to move past a claim in flight, so a second claim must skip the
// jobs the first one tries: it takes five others and loses none to it.
func testUnwatchedClaimsInFlight(t *testing.T, h *harness) {
	for range 10 {
		h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	}
	g := newStepStore(h.store)
	c := h.coordinator(g, coordinator.Config{})
	s := h.session(c)
	first := make(chan []*coordinator.Run, 1)
	g.txnArmed.Store(true)
	go func() {
		runs, _, _ := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 5, false)
		first <- runs
	}()
	<-g.txnHeld // the first claim has read and waits to commit
	second, st, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 5, false)
	close(g.txnGo)
	if err != nil || len(second) != 5 || st.Conflicts != 0 {
		t.Fatalf("second claim: %d jobs, %d conflicts, %v; want 5 and none", len(second), st.Conflicts, err)
	}
	if runs := <-first; len(runs) != 5 {
		t.Fatalf("first claim: %d jobs, want 5", len(runs))
	}
}

// testConcurrentClaimsMissNoJob: a daemon's claims in flight at once, in
// order and spread (random picks leave holes that the floor must not
// pass), take every job, each once. A claim that finds nothing is checked
// with no claim in flight: if jobs are still available, a claim then must
// find them (a floor that passed them would hide them, but for a full read
// allowed once a second).
func testConcurrentClaimsMissNoJob(t *testing.T, h *harness) {
	const total = 1500
	ps := make([]coordinator.EnqueueParams, total)
	for i := range ps {
		ps[i] = coordinator.EnqueueParams{Kind: "k"}
	}
	if _, err := h.c.EnqueueBatch(h.ctx(), ps); err != nil {
		t.Fatal(err)
	}
	c := h.coordinator(h.store, coordinator.Config{})
	h.watchWith(c)
	s := h.session(c)
	var (
		inFlight sync.RWMutex // claims hold it shared; the check, alone
		mu       sync.Mutex
		seen     = map[string]bool{}
		quiet    int // claims made with none in flight that found jobs
	)
	record := func(runs []*coordinator.Run) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range runs {
			if seen[r.Job().ID] {
				return 0, fmt.Errorf("job %s claimed twice", r.Job().ID)
			}
			seen[r.Job().ID] = true
		}
		return len(seen), nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				inFlight.RLock()
				runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 16, g != 0)
				inFlight.RUnlock()
				if err != nil {
					errs <- err
					return
				}
				n, err := record(runs)
				if err != nil {
					errs <- err
					return
				}
				if n == total {
					return
				}
				if len(runs) > 0 {
					continue
				}
				inFlight.Lock()
				if left := h.counts()[coordinator.StateAvailable]; left > 0 {
					runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 16, false)
					if err == nil && len(runs) == 0 {
						err = fmt.Errorf("no claim in flight, %d jobs available, and a claim finds none", left)
					}
					if err == nil {
						_, err = record(runs)
						quiet++
					}
					if err != nil {
						inFlight.Unlock()
						errs <- err
						return
					}
				}
				inFlight.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != total {
		t.Fatalf("claimed %d of %d jobs", len(seen), total)
	}
	if quiet > 0 {
		// Each is a claim that found nothing past the floor while jobs
		// were left before it (found then by a full read).
		t.Fatalf("%d times claims found nothing while jobs were available", quiet)
	}
}

// testGroupedOutcomes: concurrent outcome writes share store transactions,
// but each is decided on its own fence: the stale ones are refused and the
// others accepted, whatever batch they land in.
func testGroupedOutcomes(t *testing.T, h *harness) {
	for range 20 {
		h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	}
	s1, s2 := h.session(h.c), h.session(h.c)
	old, _, err := h.c.Claim(h.ctx(), s1, coordinator.DefaultQueue, 10, false)
	if err != nil || len(old) != 10 {
		t.Fatalf("claim 10: %d, %v", len(old), err)
	}
	if err := h.store.Revoke(h.ctx(), s1.Lease()); err != nil {
		t.Fatal(err)
	}
	if n, err := h.c.Reap(h.ctx(), nil, nil); err != nil || n != 10 {
		t.Fatalf("Reap = %d, %v", n, err)
	}
	cur, _, err := h.c.Claim(h.ctx(), s2, coordinator.DefaultQueue, 20, false)
	if err != nil || len(cur) != 20 {
		t.Fatalf("claim 20: %d, %v", len(cur), err)
	}
	all := append(append([]*coordinator.Run{}, old...), cur...)
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, r := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Complete(h.ctx(), nil)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i < len(old) && !errors.Is(err, fence.ErrLeaseLost) {
			t.Errorf("stale run %d: %v, want ErrLeaseLost", i, err)
		}
		if i >= len(old) && err != nil {
			t.Errorf("current run %d: %v", i, err)
		}
	}
	if n := h.counts(); n[coordinator.StateCompleted] != 20 {
		t.Fatalf("completed = %d, want 20", n[coordinator.StateCompleted])
	}
}

// testOrphanedClaims: a claim that landed while its claimer never learned
// of it (its reply lost, the resolution failed) hangs on a live lease with
// no handler; ReleaseOrphans gives such jobs back, and only those.
func testOrphanedClaims(t *testing.T, h *harness) {
	a := h.enqueue(coordinator.EnqueueParams{Kind: "k", MaxAttempts: 1})
	b := h.enqueue(coordinator.EnqueueParams{Kind: "k", MaxAttempts: 1})
	s := h.session(h.c)
	runs, _, err := h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, 2, false)
	if err != nil || len(runs) != 2 {
		t.Fatalf("claim: %d, %v", len(runs), err)
	}
	held := runs[0].Job().ID // the caller knows of this one only
	n, err := h.c.ReleaseOrphans(h.ctx(), s, func(id string) bool { return id == held })
	if err != nil || n != 1 {
		t.Fatalf("ReleaseOrphans = %d, %v; want 1", n, err)
	}
	orphan := a.ID
	if held == a.ID {
		orphan = b.ID
	}
	if j := h.wantState(orphan, coordinator.StateAvailable); j.Attempt != 0 {
		t.Fatalf("released orphan used an attempt: %d", j.Attempt)
	}
	h.wantState(held, coordinator.StateRunning)
	if err := runs[0].Complete(h.ctx(), nil); err != nil {
		t.Fatalf("the held run is untouched: %v", err)
	}
}
