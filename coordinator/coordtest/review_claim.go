package coordtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
)

// Tests from a review of the claim path (2026-12-03). Run adds them to the
// suite.
var claimReviewTests = []suiteTest{
	{"LimitedClaimsInFlightTakeDifferentSlots", testLimitedClaimsInFlight},
	{"StaleReadAfterWatchRestartHidesNoJob", testStaleReadAfterWatchRestart},
	{"StaleSlotReadDoesNotHoldQueue", testStaleSlotRead},
	{"SlotRefusedToClaimInFlightStaysFree", testSlotRefusedInFlight},
	{"ClaimResolvingOnUnreachableStoreEndsWithSession", testClaimResolveUnreachable},
	{"SpreadClaimsKeepPriority", testSpreadClaimsKeepPriority},
	{"LostClaimNeverAdoptsAnotherClaimsRun", testLostClaimAdoptsNoOtherRun},
	{"HeldClaimEndsWithItsSession", testHeldClaimEndsWithSession},
	{"ReadBeforeAnotherClaimCommitsSkipsItsJobs", testReadBeforeCommit},
	{"SlotReadBeforeAnotherClaimCommitsSkipsItsSlots", testSlotReadBeforeCommit},
	{"SiblingClaimFailingBeforeTheReadHidesNoJob", testSiblingFailsBeforeRead},
	{"ClaimReadsFitTheQueuesTail", testClaimReadsFitTheTail},
	{"ClaimsAmidEnqueuesAndFailuresMissNoJob", testClaimsAmidEnqueues},
	{"ClaimBesideAnotherReadsWhatItTakes", testClaimBesideAnotherReads},
	{"LostClaimFromAStaleReadAdoptsNoRunningJob", testLostClaimStaleReadAdoptsNothing},
	{"LostClaimReadingKeyAndRecordApartAdoptsNoOtherRun", testLostClaimSplitReadAdoptsNothing},
}

// claimResult is what one Claim call returned.
type claimResult struct {
	runs []*coordinator.Run
	st   coordinator.ClaimStats
	err  error
}

// goClaim runs c.Claim(ctx, s, queue, n, false) on a goroutine of its own
// and returns the channel its result comes on.
func goClaim(ctx context.Context, c *coordinator.Coordinator, s *coordinator.Session, queue string, n int) <-chan claimResult {
	out := make(chan claimResult, 1)
	go func() {
		runs, st, err := c.Claim(ctx, s, queue, n, false)
		out <- claimResult{runs, st, err}
	}()
	return out
}

// testLimitedClaimsInFlight: a daemon keeps two claims of a queue in flight
// (ADR 0012), also on a queue with a global limit. The second claim reads
// the free slots while the first has not committed yet: it must not try the
// slots the first one tries (every one of its jobs would be refused, seen
// as contention), but the others that are free.
func testLimitedClaimsInFlight(t *testing.T, h *harness) {
	const q = "api"
	for range 10 {
		h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: q})
	}
	if _, _, err := h.c.SetQueueLimit(h.ctx(), q, 4); err != nil {
		t.Fatal(err)
	}
	g := newStepStore(h.store)
	c := h.coordinator(g, coordinator.Config{})
	s := h.session(c)
	g.txnArmed.Store(true)
	first := goClaim(h.ctx(), c, s, q, 2)
	<-g.txnHeld // the first claim has read and waits to commit
	second, st, err := c.Claim(h.ctx(), s, q, 2, false)
	close(g.txnGo)
	r := <-first
	if r.err != nil || len(r.runs) != 2 || r.st.Conflicts != 0 {
		t.Fatalf("first claim: %d jobs, %d conflicts, %v; want 2 and none", len(r.runs), r.st.Conflicts, r.err)
	}
	if err != nil || len(second) != 2 || st.Conflicts != 0 {
		t.Fatalf("second claim, beside the first under a limit of 4: %d jobs, %d conflicts, %v; want 2 and none", len(second), st.Conflicts, err)
	}
	// The limit holds: four run, and a third claim is held.
	more, st, err := c.Claim(h.ctx(), s, q, 2, false)
	if err != nil || len(more) != 0 || !st.Held {
		t.Fatalf("claim at the limit: %d jobs, %+v, %v; want none, held", len(more), st, err)
	}
}

// slotReadStore signals each read of a queue's global-limit slots once it
// has been answered.
type slotReadStore struct {
	kv.Store
	read chan struct{}
}

func (s *slotReadStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	rr, err := s.Store.Range(ctx, r)
	if strings.Contains(r.Start, "/qm/s/") {
		select {
		case s.read <- struct{}{}:
		default:
		}
	}
	return rr, err
}

// testSlotRefusedInFlight: when the claims in flight of a daemon try every
// free slot of a limited queue, a claim beside them waits for them rather
// than try the same slots; a slot that one of them did not get (its job
// was cancelled meanwhile) is free again, with no watch event to say so,
// and the waiting claim takes it.
func testSlotRefusedInFlight(t *testing.T, h *harness) {
	const q = "api"
	var jobs []*coordinator.Job
	for range 3 {
		jobs = append(jobs, h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: q}))
	}
	if _, _, err := h.c.SetQueueLimit(h.ctx(), q, 2); err != nil {
		t.Fatal(err)
	}
	g := newStepStore(h.store)
	sr := &slotReadStore{Store: g, read: make(chan struct{}, 1)}
	c := h.coordinator(sr, coordinator.Config{})
	s := h.session(c)
	g.txnArmed.Store(true)
	first := goClaim(h.ctx(), c, s, q, 2)
	<-g.txnHeld // the first claim tries both slots, with the first two jobs
	<-sr.read
	if _, err := h.c.Cancel(h.ctx(), jobs[0].ID); err != nil {
		t.Fatal(err)
	}
	second := goClaim(h.ctx(), c, s, q, 1)
	<-sr.read // the second claim has read the slots: none free but those tried
	close(g.txnGo)
	r := <-first
	if r.err != nil || len(r.runs) != 1 || r.runs[0].Job().ID != jobs[1].ID {
		t.Fatalf("first claim: %d jobs, %v; want job %s only (the other was cancelled)", len(r.runs), r.err, jobs[1].ID)
	}
	r = <-second
	if r.err != nil || len(r.runs) != 1 || r.runs[0].Job().ID != jobs[2].ID || r.st.Conflicts != 0 {
		t.Fatalf("second claim: %d jobs, %+v, %v; want job %s, no conflict (a slot is free again)", len(r.runs), r.st, r.err, jobs[2].ID)
	}
}

// unreachableStore stops answering once armed, as an etcd client does
// (it waits for a connection) when no member can be reached: every
// transaction blocks until its context ends. It signals the first write
// (the claim's commit) and the first read after it (the claim finding out
// whether its commit landed).
type unreachableStore struct {
	kv.Store
	armed, wrote, read atomic.Bool
	writing, reading   chan struct{}
}

func (s *unreachableStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if !s.armed.Load() {
		return s.Store.Txn(ctx, t)
	}
	if kvtest.Writes(t) {
		if s.wrote.CompareAndSwap(false, true) {
			close(s.writing)
		}
	} else if s.wrote.Load() && s.read.CompareAndSwap(false, true) {
		close(s.reading)
	}
	<-ctx.Done()
	return kv.TxnResult{}, ctx.Err()
}

// testClaimResolveUnreachable: a claim whose commit got no answer finds
// out from the store whether it landed, even once its caller gave up
// (Stop cancels the claim loop's context). On a store that cannot be
// reached that read must still end, at the latest with the session (its
// runs could not write anything after that anyway): a worker's Stop waits
// for its claims in flight, and would wait for as long as the outage.
func testClaimResolveUnreachable(t *testing.T, h *harness) {
	h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	us := &unreachableStore{Store: h.store, writing: make(chan struct{}), reading: make(chan struct{})}
	c := h.coordinator(us, coordinator.Config{})
	s := h.session(c)
	ctx, cancel := context.WithCancel(h.ctx())
	defer cancel()
	us.armed.Store(true)
	done := goClaim(ctx, c, s, coordinator.DefaultQueue, 1)
	<-us.writing
	cancel() // the caller gives up on the claim (a worker's Stop)
	<-us.reading
	// The session ends (here closed; on an outage, at its deadline).
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	_ = s.Close(cctx)
	select {
	case r := <-done:
		if r.err == nil || len(r.runs) != 0 {
			t.Fatalf("claim on an unreachable store: %d runs, %v; want an error", len(r.runs), r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a claim resolving its commit on an unreachable store did not return when its session ended")
	}
}

// testSpreadClaimsKeepPriority: a spread claim picks among more jobs than
// it wants, at random or preferring those rendezvous hashing gives its
// daemon, but never a job of a later priority while one of an earlier
// priority among them waits: priority 1 runs first, also under contention.
// Four priority-1 jobs among sixteen candidates: a pick at random takes
// all four one time in 1,820.
func testSpreadClaimsKeepPriority(t *testing.T, h *harness) {
	s := h.session(h.c)
	for round, peers := range [][]string{nil, {s.WorkerID(), "other-daemon"}} {
		if peers != nil {
			s.SetPeers(peers)
		}
		for range 12 {
			h.enqueue(coordinator.EnqueueParams{Kind: "k", Priority: 2})
		}
		urgent := map[string]bool{}
		for range 4 {
			urgent[h.enqueue(coordinator.EnqueueParams{Kind: "k", Priority: 1}).ID] = true
		}
		runs, _, err := h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, 4, true)
		if err != nil || len(runs) != 4 {
			t.Fatalf("round %d: spread claim of 4: %d runs, %v", round, len(runs), err)
		}
		for _, r := range runs {
			if !urgent[r.Job().ID] {
				t.Fatalf("round %d (peers %v): a spread claim took job %s of priority %d while priority-1 jobs waited", round, peers, r.Job().ID, r.Job().Priority)
			}
		}
		// The rest are left for the next round, behind its priority-1 jobs.
	}
}

// testStaleReadAfterWatchRestart: a job that became available while the
// queue was not watched (between a watch's end and the read that restarts
// it) is in no watch event; a claim's read older than that restart (a
// lagging etcd member's) missed it and moved the floor past it, where it
// waited for the once-a-minute read from the queue's start.
func testStaleReadAfterWatchRestart(t *testing.T, h *harness) {
	stale := &staleRangeStore{Store: h.store}
	ws := &dropWatchStore{staleRangeStore: stale}
	c := h.coordinator(ws, coordinator.Config{})
	woke := h.watchWith(c)
	s := h.session(c)
	if runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false); err != nil || len(runs) != 0 {
		t.Fatalf("claim from an empty queue: %d runs, %v", len(runs), err)
	}
	// The watch drops the job's event and ends; the watch that replaces
	// it starts after the job.
	var job *coordinator.Job
	ws.drop.Store(true)
	h.seen(woke, "the watch's restart", func() { job = h.enqueue(coordinator.EnqueueParams{Kind: "k"}) })
	if ws.drop.Load() {
		t.Fatal("the watch delivered no event to drop: the test tested nothing")
	}
	claimDespiteStaleRead(t, h, c, s, stale, job)
}

// dropWatchStore ends the next watch response of an available index
// after drop is set, dropping its events, as a watch cut off (a member
// restarted, the connection lost) would.
type dropWatchStore struct {
	*staleRangeStore
	drop atomic.Bool
}

func (s *dropWatchStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	if !strings.Contains(prefix, "/q/") {
		return s.staleRangeStore.Watch(ctx, prefix, fromRev)
	}
	return filterWatch(ctx, s.staleRangeStore, prefix, fromRev, func(r kv.WatchResponse) (kv.WatchResponse, bool) {
		return r, len(r.Events) == 0 || !s.drop.CompareAndSwap(true, false)
	})
}

// filterWatch watches prefix on store and passes each response through f:
// what f returns is sent on, until f says to stop (the watch then ends, as
// a broken stream would) or ctx ends.
func filterWatch(ctx context.Context, store kv.Store, prefix string, fromRev int64, f func(kv.WatchResponse) (kv.WatchResponse, bool)) <-chan kv.WatchResponse {
	wctx, cancel := context.WithCancel(ctx)
	in := store.Watch(wctx, prefix, fromRev)
	out := make(chan kv.WatchResponse)
	go func() {
		defer close(out)
		defer func() {
			cancel()
			for range in { // until the store closes it
			}
		}()
		for resp := range in {
			resp, more := f(resp)
			if !more {
				return
			}
			select {
			case out <- resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// testStaleSlotRead: a claim woken because a slot of the queue's global
// limit was freed may read the slots from a member that has not applied
// the release yet (a serializable read); it must not report the queue
// held (a worker then waits for the next wake-up or poll) without reading
// again at the current revision.
func testStaleSlotRead(t *testing.T, h *harness) {
	const q = "api"
	if _, _, err := h.c.SetQueueLimit(h.ctx(), q, 1); err != nil {
		t.Fatal(err)
	}
	a := h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: q})
	b := h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: q})
	st := &replayRangeStore{Store: h.store, match: slotReads}
	c := h.coordinator(st, coordinator.Config{})
	s := h.session(c)
	runs, _, err := c.Claim(h.ctx(), s, q, 1, false)
	if err != nil || len(runs) != 1 || runs[0].Job().ID != a.ID {
		t.Fatalf("first claim: %d runs, %v", len(runs), err)
	}
	if more, cs, err := c.Claim(h.ctx(), s, q, 1, false); err != nil || len(more) != 0 || !cs.Held {
		t.Fatalf("claim with the only slot taken: %d runs, held %v, %v", len(more), cs.Held, err)
	}
	if err := runs[0].Complete(h.ctx(), nil); err != nil { // frees the slot
		t.Fatal(err)
	}
	st.armed.Store(true) // the next serializable read of the slots is the one before
	runs, cs, err := c.Claim(h.ctx(), s, q, 1, false)
	if err != nil || len(runs) != 1 || runs[0].Job().ID != b.ID {
		t.Fatalf("claim after the slot was freed, its first read stale: %d runs, held %v, %v; want job %s", len(runs), cs.Held, err, b.ID)
	}
	if st.armed.Load() {
		t.Fatal("no read of the slots was answered stale: the test tested nothing")
	}
}

// unappliedStore holds the first claim transaction once armed, until open,
// then fails it without applying it: a commit whose outcome the caller
// cannot know (etcd's "request timed out", a leader change).
type unappliedStore struct {
	kv.Store
	armed      atomic.Bool
	held, open chan struct{}
}

func (s *unappliedStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if kvtest.Writes(t) && s.armed.CompareAndSwap(true, false) {
		close(s.held)
		<-s.open
		return kv.TxnResult{}, errReplyLost
	}
	return s.Store.Txn(ctx, t)
}

// testLostClaimAdoptsNoOtherRun: a claim whose reply is lost learns from
// the ownership keys which of its jobs it took. Meanwhile another daemon
// claims one of them and gives it back (a snooze), and this daemon's
// second claim in flight takes it under its new index entry. The lost
// claim, which never applied, must not take that run for its own: the job
// would run twice at once under one token, both runs' writes passing the
// fence (promises 1, 3 and 9).
func testLostClaimAdoptsNoOtherRun(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	us := &unappliedStore{Store: h.store, held: make(chan struct{}), open: make(chan struct{})}
	c := h.coordinator(us, coordinator.Config{})
	s := h.session(c)
	us.armed.Store(true)
	first := goClaim(h.ctx(), c, s, coordinator.DefaultQueue, 1)
	<-us.held

	// Another daemon claims the job and snoozes it: available again, at
	// a later time, under another index entry.
	other := h.session(h.c)
	h.clock.Advance(time.Millisecond)
	r := h.claimOneFrom(h.c, other)
	if r.Job().ID != j.ID {
		t.Fatalf("other daemon claimed %s, want %s", r.Job().ID, j.ID)
	}
	if err := r.Snooze(h.ctx(), 0); err != nil {
		t.Fatalf("snooze: %v", err)
	}
	// This daemon's second claim in flight: the job is the first claim's
	// candidate until that claim is resolved, so it is not taken now.
	second, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
	if err != nil {
		t.Fatalf("second claim: %v", err)
	}
	close(us.open)
	res := <-first
	runs := append(second, res.runs...)
	if len(runs) > 1 {
		t.Fatalf("one job, %d runs from two claims of one daemon (tokens %d and %d): a lost claim adopted another claim's run", len(runs), runs[0].Token(), runs[1].Token())
	}
	if len(res.runs) == 1 {
		t.Fatalf("the lost claim, never applied, returned a run of job %s (token %d)", j.ID, res.runs[0].Token())
	}
	if len(second) == 0 {
		// Held back while the first claim was unresolved: the job is
		// still available, and a claim now takes it.
		if r := h.claimOneFrom(c, s); r.Job().ID != j.ID {
			t.Fatalf("claimed %s after the lost claim was resolved, want %s", r.Job().ID, j.ID)
		}
	}
}

// heldQueueReadStore, once armed, holds the first read of a queue's
// available index until its context ends (a hung connection), and says
// when it holds it.
type heldQueueReadStore struct {
	kv.Store
	armed   atomic.Bool
	holding chan struct{}
}

func (s *heldQueueReadStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if strings.Contains(r.Start, "/q/") && s.armed.CompareAndSwap(true, false) {
		close(s.holding)
		<-ctx.Done()
		return kv.RangeResult{}, ctx.Err()
	}
	return s.Store.Range(ctx, r)
}

// testHeldClaimEndsWithSession: a claim whose read of the queue the store
// holds ends when its session does, with ErrSessionExpired, although its
// caller's context goes on; and the claims of the next session are not
// held behind it (claims of one queue read one at a time). Before, the
// next session claimed nothing from the queue for as long as the store
// held the old claim's read.
func testHeldClaimEndsWithSession(t *testing.T, h *harness) {
	job := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	hs := &heldQueueReadStore{Store: h.store, holding: make(chan struct{})}
	c := h.coordinator(hs, coordinator.Config{})
	old := h.session(c)
	hs.armed.Store(true)
	done := goClaim(h.ctx(), c, old, coordinator.DefaultQueue, 1)
	<-hs.holding
	cctx, cancel := context.WithTimeout(h.ctx(), 5*time.Second)
	defer cancel()
	_ = old.Close(cctx) // the session ends (on an outage, at its deadline)
	select {
	case r := <-done:
		if !errors.Is(r.err, coordinator.ErrSessionExpired) || len(r.runs) != 0 {
			t.Fatalf("held claim after its session ended: %d runs, %v; want none and ErrSessionExpired", len(r.runs), r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a claim held by the store did not return when its session ended")
	}
	runs, _, err := c.Claim(cctx, h.session(c), coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 || runs[0].Job().ID != job.ID {
		t.Fatalf("claim of the next session: %d runs, %v; want job %s", len(runs), err, job.ID)
	}
}

// answeredReadStore, once armed, answers the next read whose start holds
// match (a queue's available index, "/q/", or its slots, "/qm/s/") from
// the store at once, says so, and hands the answer to the caller only when
// let go.
type answeredReadStore struct {
	kv.Store
	match      string
	armed      atomic.Bool
	read, free chan struct{}
}

func (s *answeredReadStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	rr, err := s.Store.Range(ctx, r)
	if strings.Contains(r.Start, s.match) && s.armed.CompareAndSwap(true, false) {
		close(s.read)
		<-s.free
	}
	return rr, err
}

// testReadBeforeCommit: a claim reads the queue while another claim of
// the same daemon is in flight, and that claim commits and ends before the
// read's answer is handled. The read still saw the other claim's jobs as
// available; trying them again, every one is refused, counted as a
// conflict with another daemon, and the claim takes fewer jobs than are
// there (a claim conflict in a one-daemon run, seen once in CI).
func testReadBeforeCommit(t *testing.T, h *harness) {
	for range 4 {
		h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	}
	g := newStepStore(h.store)
	rs := &answeredReadStore{Store: g, match: "/q/", read: make(chan struct{}), free: make(chan struct{})}
	c := h.coordinator(rs, coordinator.Config{})
	s := h.session(c)
	claim := func() <-chan claimResult { return goClaim(h.ctx(), c, s, coordinator.DefaultQueue, 2) }
	g.txnArmed.Store(true)
	first := claim()
	<-g.txnHeld // the first claim has read and waits to commit
	rs.armed.Store(true)
	second := claim()
	<-rs.read // the second's read is answered, the first's jobs in it
	close(g.txnGo)
	r1 := <-first // committed, and its hold on its jobs released
	close(rs.free)
	r2 := <-second
	ids := map[string]bool{}
	for i, r := range []claimResult{r1, r2} {
		if r.err != nil || len(r.runs) != 2 || r.st.Conflicts != 0 {
			t.Fatalf("claim %d of 2: %d jobs, %d conflicts, %v; want 2 jobs and no conflict", i+1, len(r.runs), r.st.Conflicts, r.err)
		}
		for _, run := range r.runs {
			ids[run.Job().ID] = true
		}
	}
	if len(ids) != 4 {
		t.Fatalf("two claims of 2 took %d distinct jobs, want 4", len(ids))
	}
}

// testSlotReadBeforeCommit: as testReadBeforeCommit, on a queue with a
// global limit: the second claim reads the free slots before the first
// commits, and the first ends before that answer is handled. The slots
// the first took looked free in it; trying them, every job of the second
// claim would be refused.
func testSlotReadBeforeCommit(t *testing.T, h *harness) {
	const q = "api"
	for range 4 {
		h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: q})
	}
	if _, _, err := h.c.SetQueueLimit(h.ctx(), q, 4); err != nil {
		t.Fatal(err)
	}
	g := newStepStore(h.store)
	rs := &answeredReadStore{Store: g, match: "/qm/s/", read: make(chan struct{}), free: make(chan struct{})}
	c := h.coordinator(rs, coordinator.Config{})
	s := h.session(c)
	claim := func() <-chan claimResult { return goClaim(h.ctx(), c, s, q, 2) }
	g.txnArmed.Store(true)
	first := claim()
	<-g.txnHeld // the first claim tries two slots and waits to commit
	rs.armed.Store(true)
	second := claim()
	<-rs.read // the second's read of the slots is answered: all four free
	close(g.txnGo)
	r1 := <-first // committed, and its hold on its slots released
	close(rs.free)
	r2 := <-second
	for i, r := range []claimResult{r1, r2} {
		if r.err != nil || len(r.runs) != 2 || r.st.Conflicts != 0 {
			t.Fatalf("claim %d of 2 under a limit of 4: %d jobs, %d conflicts, %v; want 2 jobs and no conflict", i+1, len(r.runs), r.st.Conflicts, r.err)
		}
	}
}

// testSiblingFailsBeforeRead: a claim fails (its reply is lost, nothing
// applied) and gives its candidate back after a second claim took the
// queue's read lock but before that claim read the queue. The job is
// still available: the second claim may take it, and if it does not, it
// must not move the floor past it (no watch event would bring it back; a
// claim in CI found nothing for 20 s).
func testSiblingFailsBeforeRead(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	// A limit, so that the second claim reads the slots, and can be held
	// there, between taking the read lock and reading the queue.
	if _, _, err := h.c.SetQueueLimit(h.ctx(), coordinator.DefaultQueue, 4); err != nil {
		t.Fatal(err)
	}
	us := &unappliedStore{Store: h.store, held: make(chan struct{}), open: make(chan struct{})}
	rs := &answeredReadStore{Store: us, match: "/qm/s/", read: make(chan struct{}), free: make(chan struct{})}
	c := h.coordinator(rs, coordinator.Config{})
	h.watchWith(c) // the floor is kept
	s := h.session(c)
	claim := func() <-chan claimResult { return goClaim(h.ctx(), c, s, coordinator.DefaultQueue, 1) }
	us.armed.Store(true)
	first := claim()
	<-us.held // the first claim tries the job and waits to commit
	rs.armed.Store(true)
	second := claim()
	<-rs.read      // the second holds the read lock, its slots read
	close(us.open) // the first fails and gives the job back
	if r := <-first; r.err == nil || len(r.runs) != 0 {
		t.Fatalf("first claim: %d runs, %v; want its commit's error", len(r.runs), r.err)
	}
	close(rs.free)
	r := <-second
	if r.err != nil {
		t.Fatalf("second claim: %v", r.err)
	}
	runs := r.runs
	if len(runs) == 0 {
		var err error
		runs, _, err = c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
		if err != nil || len(runs) != 1 {
			t.Fatalf("claim after the second found nothing: %d runs, %v; want job %s (the floor passed it)", len(runs), err, j.ID)
		}
	}
	if runs[0].Job().ID != j.ID {
		t.Fatalf("claimed %s, want %s", runs[0].Job().ID, j.ID)
	}
}

// testClaimReadsFitTheTail: on a store where a limited range costs every
// key up to its end (etcd), claims read the queue past the floor in one
// range when the floor knows the tail is short, and not at all when it
// knows the tail is empty; a backlog that lands after that is read window
// by window again (ClaimsCountFewKeys). Jobs enqueued one at a time read
// window by window cost a claim four ranges, and the empty claim after it
// four more.
func testClaimReadsFitTheTail(t *testing.T, h *harness) {
	cs := &countingStore{Store: h.store}
	c := h.coordinator(cs, coordinator.Config{})
	woke := h.watchWith(c)
	s := h.session(c)
	claim := func(what string, n, want int) (reads int64) {
		t.Helper()
		before := cs.reads.Load()
		runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, n, false)
		if err != nil || len(runs) != want {
			t.Fatalf("%s: %d jobs, %v; want %d", what, len(runs), err, want)
		}
		return cs.reads.Load() - before
	}
	claim("claim of the empty queue", 4, 0) // from the queue's start: the tail is empty
	if n := claim("claim after it", 4, 0); n != 0 {
		t.Fatalf("a claim of a tail the floor knows is empty read %d ranges, want none", n)
	}
	for i := range 5 {
		h.seen(woke, "a job enqueued", func() { h.enqueue(coordinator.EnqueueParams{Kind: "k"}) })
		// Two when the first, serializable, read predates the watch's
		// event and is read again linearizably (see claim).
		if n := claim("claim of a new job", 4, 1); n > 2 {
			t.Fatalf("job %d: its claim read %d ranges, want one (two at most)", i+1, n)
		}
		if n := claim("claim after it", 4, 0); n != 0 {
			t.Fatalf("job %d: the claim after the one that took the tail read %d ranges, want none", i+1, n)
		}
	}
	// A short tail that a claim takes but its last entry: the floor stops
	// at that entry, which the next claim reads.
	h.seen(woke, "three jobs enqueued", func() {
		three := []coordinator.EnqueueParams{{Kind: "k"}, {Kind: "k"}, {Kind: "k"}}
		if _, err := h.c.EnqueueBatch(h.ctx(), three); err != nil {
			t.Fatal(err)
		}
	})
	claim("claim of two of the three", 2, 2)
	claim("claim of the third", 4, 1)
	ps := make([]coordinator.EnqueueParams, 600)
	for i := range ps {
		ps[i] = coordinator.EnqueueParams{Kind: "k"}
	}
	h.seen(woke, "a backlog enqueued", func() {
		if _, err := h.c.EnqueueBatch(h.ctx(), ps); err != nil {
			t.Fatal(err)
		}
	})
	spanned := cs.spanned.Load()
	for i := range 30 {
		claim(fmt.Sprintf("claim %d of the backlog", i+1), 10, 10)
	}
	// Read to its end each time, 30 claims of 10 would span some 13,600
	// keys; window by window, a few more than the 40 read ahead each.
	if n := cs.spanned.Load() - spanned; n > 8000 {
		t.Fatalf("30 claims of 10 spanned %d keys in all: claims read the backlog to its end", n)
	}
}

// rangeCountsAllStore reports that ranges cost every key up to their end,
// as etcd's do: claims through it read windows, horizons and tails as on
// etcd, whatever the store.
type rangeCountsAllStore struct{ kv.Store }

func (s rangeCountsAllStore) Limits() kv.Limits {
	l := s.Store.Limits()
	l.RangeCountsAll = true
	return l
}

// testClaimsAmidEnqueues: two daemons (coordinators, each with its own
// watch and claim floor; one reads as on etcd, window by window, whatever
// the store), two claimers each, claim while jobs are enqueued one at a time
// and in batches at every priority, and while some claims fail before
// reaching the store, others lose their reply, and others are refused by
// a pause and resume of the queue. Every job must be claimed exactly once,
// and none may stay hidden behind a floor: once the
// enqueues end, one daemon's claims alone take every job left, long before
// the once-a-minute read from the queue's start would find one its floor
// passed. Twice, each daemon finishing once.
func testClaimsAmidEnqueues(t *testing.T, h *harness) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var ds [2]*racingDaemon
	for i := range ds {
		fs := &flakyStore{Store: h.store}
		cs := &confBumpStore{Store: fs, bump: func(ctx context.Context) error {
			if _, _, err := h.c.PauseQueue(ctx, coordinator.DefaultQueue); err != nil {
				return err
			}
			_, _, err := h.c.ResumeQueue(ctx, coordinator.DefaultQueue)
			return err
		}}
		var st kv.Store = cs
		if i == 1 {
			st = rangeCountsAllStore{cs}
		}
		c := h.coordinator(st, coordinator.Config{})
		ds[i] = &racingDaemon{c: c, fs: fs, cs: cs, woke: h.watchWith(c), s: h.session(c)}
	}
	running := 0
	for round, finisher := range []int{int(seed % 2), int(1 - seed%2)} {
		running += claimAmidEnqueues(t, h, ds, finisher, seed+uint64(round)*1000)
		if n := h.counts(); n[coordinator.StateAvailable] != 0 || n[coordinator.StateRunning] != running {
			t.Fatalf("round %d: counts after every job was claimed: %v; want %d running", round+1, n, running)
		}
	}
}

// racingDaemon is one daemon of testClaimsAmidEnqueues.
type racingDaemon struct {
	c    *coordinator.Coordinator
	fs   *flakyStore
	cs   *confBumpStore
	s    *coordinator.Session
	woke <-chan struct{}
}

// confBumpStore runs bump (a pause and resume of the queue) before the
// next write transaction when armed: a claim that read the queue's
// configuration before it is refused.
type confBumpStore struct {
	kv.Store
	bump func(ctx context.Context) error
	// armed counts the upcoming writes to bump before.
	armed atomic.Int32
}

func (s *confBumpStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if kvtest.Writes(t) && s.armed.Add(-1) >= 0 {
		if err := s.bump(ctx); err != nil {
			return kv.TxnResult{}, fmt.Errorf("pause and resume before a claim: %w", err)
		}
	}
	return s.Store.Txn(ctx, t)
}

// claimAmidEnqueues runs one round of testClaimsAmidEnqueues, in which
// ds[finisher] claims the jobs left once the enqueues end, and returns how
// many jobs it enqueued.
func claimAmidEnqueues(t *testing.T, h *harness, ds [2]*racingDaemon, finisher int, seed uint64) int {
	t.Helper()
	const enqueuers, perEnqueuer = 2, 300
	const total = enqueuers * perEnqueuer
	ctx := h.ctx()
	errs := make(chan error, 8)
	var enqWG sync.WaitGroup
	for e := range enqueuers {
		enqWG.Add(1)
		go func() {
			defer enqWG.Done()
			rnd := rand.New(rand.NewPCG(seed, uint64(e)))
			for n := 0; n < perEnqueuer; {
				k := 1
				switch left := perEnqueuer - n; {
				case left <= 50:
					k = left // a backlog for the finishing daemon
				case rnd.IntN(4) == 0:
					k = 1 + rnd.IntN(40)
				}
				ps := make([]coordinator.EnqueueParams, k)
				for i := range ps {
					ps[i] = coordinator.EnqueueParams{Kind: "k", Priority: 1 + rnd.IntN(4)}
				}
				if _, err := h.c.EnqueueBatch(ctx, ps); err != nil {
					errs <- fmt.Errorf("enqueue: %w", err)
					return
				}
				n += k
				if rnd.IntN(3) == 0 {
					// A pause now and then, for the claims to empty the queue.
					time.Sleep(time.Duration(rnd.IntN(3000)) * time.Microsecond)
				}
			}
		}()
	}
	enqueued := make(chan struct{})
	go func() { enqWG.Wait(); close(enqueued) }()
	var (
		mu       sync.Mutex
		seen     = map[string]bool{}
		finished = make(chan struct{})
	)
	record := func(runs []*coordinator.Run) error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range runs {
			if seen[r.Job().ID] {
				return fmt.Errorf("job %s claimed twice", r.Job().ID)
			}
			seen[r.Job().ID] = true
		}
		if len(runs) > 0 && len(seen) == total {
			close(finished)
		}
		return nil
	}
	var claimWG sync.WaitGroup
	for i := range 4 {
		d := ds[i%2]
		// The other daemon's claimers stop once the enqueues end.
		stop := enqueued
		if i%2 == finisher {
			stop = finished
		}
		claimWG.Add(1)
		go func() {
			defer claimWG.Done()
			rnd := rand.New(rand.NewPCG(seed, uint64(100+i)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				switch rnd.IntN(16) {
				case 0:
					d.fs.drop.Store(1) // the next claim fails before the store
				case 1:
					d.fs.fail.Store(1) // the next claim commits and loses its reply
				case 2, 3:
					// The queue is paused and resumed just before the next
					// claim commits: refused whole, its candidates stay
					// available under the floor it moved (ADR 0015).
					d.cs.armed.Store(1)
				}
				runs, _, err := d.c.Claim(ctx, d.s, coordinator.DefaultQueue, 1+rnd.IntN(16), rnd.IntN(2) == 0)
				if err != nil && !errors.Is(err, errReplyLost) {
					errs <- fmt.Errorf("claim: %w", err)
					return
				}
				if err := record(runs); err != nil {
					errs <- err
					return
				}
				if len(runs) > 0 {
					continue
				}
				// Nothing found: wait for the watch, as a worker does, or
				// a poll's worth.
				select {
				case <-stop:
					return
				case <-d.woke:
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	wait := func(what string, c <-chan struct{}) {
		t.Helper()
		select {
		case <-c:
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(20 * time.Second):
			// Claims of a queue that no floor hides take these jobs in
			// well under a second; a hidden job waits for the read from
			// the queue's start, a minute after the watch began.
			mu.Lock()
			n := len(seen)
			mu.Unlock()
			t.Fatalf("%s: %d of %d jobs claimed, %d available that daemon %d's claims do not find", what, n, total, h.counts()[coordinator.StateAvailable], finisher)
		}
	}
	wait("enqueues", enqueued)
	wait("claims after the enqueues", finished)
	claimWG.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	return total
}

// entriesReadStore counts the entries that limited ranges (a claim's reads
// of a queue) return.
type entriesReadStore struct {
	kv.Store
	entries atomic.Int64
}

func (s *entriesReadStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	rr, err := s.Store.Range(ctx, r)
	if r.Limit > 0 && r.End != "" {
		s.entries.Add(int64(len(rr.KVs)))
	}
	return rr, err
}

// testClaimBesideAnotherReads: a daemon's second claim in flight reads
// from where the first moved the floor, past the first one's candidates,
// so it reads only the entries it takes, not those the first tries too
// (each a job record: in a drain on etcd, a third of the records claims
// read). Without a watch there is no floor: the second claim reads from
// the queue's start, over the first one's candidates, and must still
// take as many jobs as it asks for. With a floor, the read is tried as
// the store does it and as on etcd (windows, horizons).
func testClaimBesideAnotherReads(t *testing.T, h *harness) {
	const n = 10
	for _, v := range []struct {
		name            string
		watched, asEtcd bool
	}{{"floor", true, false}, {"floor, read as on etcd", true, true}, {"no floor", false, false}} {
		ps := make([]coordinator.EnqueueParams, 10*n)
		for i := range ps {
			ps[i] = coordinator.EnqueueParams{Kind: "k"}
		}
		if _, err := h.c.EnqueueBatch(h.ctx(), ps); err != nil {
			t.Fatal(err)
		}
		var base kv.Store = h.store
		if v.asEtcd {
			base = rangeCountsAllStore{base}
		}
		g := newStepStore(base)
		er := &entriesReadStore{Store: g}
		c := h.coordinator(er, coordinator.Config{})
		if v.watched {
			h.watchWith(c)
		}
		s := h.session(c)
		g.txnArmed.Store(true)
		first := goClaim(h.ctx(), c, s, coordinator.DefaultQueue, n)
		<-g.txnHeld // the first claim has read and waits to commit
		er.entries.Store(0)
		second, st, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, n, false)
		read := er.entries.Load()
		close(g.txnGo)
		r := <-first
		if r.err != nil || len(r.runs) != n || r.st.Conflicts != 0 {
			t.Fatalf("%s: first claim: %d jobs, %d conflicts, %v; want %d and none", v.name, len(r.runs), r.st.Conflicts, r.err, n)
		}
		if err != nil || len(second) != n || st.Conflicts != 0 {
			t.Fatalf("%s: second claim, beside the first: %d jobs, %d conflicts, %v; want %d and none", v.name, len(second), st.Conflicts, err, n)
		}
		if v.watched && read > n {
			t.Errorf("%s: the second claim read %d entries to take %d: it read the first claim's candidates too", v.name, read, n)
		}
		for _, x := range append(second, r.runs...) {
			if err := x.Complete(h.ctx(), nil); err != nil {
				t.Fatalf("%s: complete: %v", v.name, err)
			}
		}
	}
}

// replayRangeStore, once armed, answers the next read that match selects
// with an earlier answer to such a read, as a member that lags behind
// would: the answer to the read before, or with first to the first read
// of all.
type replayRangeStore struct {
	kv.Store
	match func(kv.RangeRequest) bool
	first bool
	armed atomic.Bool
	mu    sync.Mutex
	kept  *kv.RangeResult
}

func (s *replayRangeStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if !s.match(r) {
		return s.Store.Range(ctx, r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kept != nil && s.armed.CompareAndSwap(true, false) {
		return *s.kept, nil
	}
	rr, err := s.Store.Range(ctx, r)
	if err == nil && (s.kept == nil || !s.first) {
		s.kept = &rr
	}
	return rr, err
}

// queueReads selects the reads of an available index; slotReads the
// serializable reads of a queue's global-limit slots.
func queueReads(r kv.RangeRequest) bool { return strings.Contains(r.Start, "/q/") && r.End != "" }
func slotReads(r kv.RangeRequest) bool  { return strings.Contains(r.Start, "/qm/s/") && r.Serializable }

// staleLostClaim is a daemon whose claims read through a
// replayRangeStore and write through a flakyStore, and that has claimed
// one job (first).
type staleLostClaim struct {
	rs    *replayRangeStore
	fs    *flakyStore
	c     *coordinator.Coordinator
	s     *coordinator.Session
	first *coordinator.Run
}

// newStaleLostClaim starts a daemon on store whose first claim must take
// job j.
func newStaleLostClaim(t *testing.T, h *harness, store kv.Store, j *coordinator.Job) *staleLostClaim {
	t.Helper()
	d := &staleLostClaim{rs: &replayRangeStore{Store: store, match: queueReads, first: true}}
	d.fs = &flakyStore{Store: d.rs}
	d.c = h.coordinator(d.fs, coordinator.Config{})
	d.s = h.session(d.c)
	if d.first = h.claimOneFrom(d.c, d.s); d.first.Job().ID != j.ID {
		t.Fatalf("claimed %s, want %s", d.first.Job().ID, j.ID)
	}
	return d
}

// claimLost claims one job again: the read is answered as before the
// first claim (the job shows available), and the claim commits and loses
// its reply.
func (d *staleLostClaim) claimLost(t *testing.T, h *harness) ([]*coordinator.Run, error) {
	t.Helper()
	d.rs.armed.Store(true)
	d.fs.fail.Store(1)
	runs, _, err := d.c.Claim(h.ctx(), d.s, coordinator.DefaultQueue, 1, false)
	if d.rs.armed.Load() {
		t.Fatal("no read was answered from before the first claim: the test tested nothing")
	}
	return runs, err
}

// testLostClaimStaleReadAdoptsNothing: a claim's read is serializable, and
// a member that lags behind may still show the entry of a job that this
// daemon claimed and runs. A claim that tries it is refused for that job;
// if its reply is lost, it learns from the ownership keys which jobs it
// took, and the job's key is this session's, put by the earlier claim. It
// must not take that run for its own: the job would run twice at once
// under one token, both runs' writes passing the fence (promises 1, 3 and
// 9). No watch: every claim reads from the queue's start.
func testLostClaimStaleReadAdoptsNothing(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	d := newStaleLostClaim(t, h, h.store, j)
	first := d.first
	// The clock stands still: the two claims' times differ only because
	// the session gives each claim a time of its own.
	runs, err := d.claimLost(t, h)
	for _, r := range runs {
		t.Fatalf("a claim refused for job %s, its reply lost, returned a run of it (token %d) beside the first claim's (token %d): two runs of one job", r.Job().ID, r.Token(), first.Token())
	}
	if err == nil {
		t.Fatalf("a claim whose reply was lost and that took nothing returned no error")
	}
	if err := first.Complete(h.ctx(), nil); err != nil {
		t.Fatalf("complete the first claim's run: %v", err)
	}
}

// splitGetStore reports a limit of one operation per transaction, so
// that a lookup of several keys reads each in a transaction of its own,
// and once armed runs between after the read of key.
type splitGetStore struct {
	kv.Store
	key     string
	armed   atomic.Bool
	between func()
}

func (s *splitGetStore) Limits() kv.Limits {
	l := s.Store.Limits()
	l.MaxOps = 1
	return l
}

func (s *splitGetStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	res, err := s.Store.Txn(ctx, t)
	if !kvtest.Writes(t) && len(t.Then) == 1 && t.Then[0].Key == s.key && s.armed.CompareAndSwap(true, false) {
		s.between()
	}
	return res, err
}

// testLostClaimSplitReadAdoptsNothing: a claim whose reply was lost reads
// each job's ownership key and record, which may take two reads (a store
// that takes few operations per request). Between them, the earlier run
// of the job that holds the key gives the job back, and another daemon
// claims it, at the same claim time (one clock for both daemons). The key
// read was this session's and the record holds the claim's time, but they
// are of two runs: the lost claim must not adopt the job.
func testLostClaimSplitReadAdoptsNothing(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	sp := &splitGetStore{Store: h.store, key: h.keysRoot() + "o/" + j.ID}
	a := newStaleLostClaim(t, h, sp, j)
	first := a.first
	// Daemon B, whose claims' times follow the same steps as A's.
	cb := h.coordinator(h.store, coordinator.Config{})
	sb := h.session(cb)
	h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	if r := h.claimOneFrom(cb, sb); r.Job().ID == j.ID {
		t.Fatalf("daemon B claimed %s, held by A", j.ID)
	}
	var other *coordinator.Run
	sp.between = func() {
		if err := first.Release(h.ctx()); err != nil {
			t.Errorf("release the first run: %v", err)
			return
		}
		runs, _, err := cb.Claim(h.ctx(), sb, coordinator.DefaultQueue, 1, false)
		if err != nil || len(runs) != 1 || runs[0].Job().ID != j.ID {
			t.Errorf("daemon B's claim of the released job: %d runs, %v", len(runs), err)
			return
		}
		other = runs[0]
	}
	sp.armed.Store(true)
	runs, _ := a.claimLost(t, h)
	if sp.armed.Load() || other == nil {
		t.Fatalf("the test tested nothing: key read split %v, daemon B's run %v", !sp.armed.Load(), other != nil)
	}
	for _, r := range runs {
		t.Fatalf("the lost claim adopted job %s (token %d) while daemon B runs it (token %d)", r.Job().ID, r.Token(), other.Token())
	}
	if err := other.Complete(h.ctx(), nil); err != nil {
		t.Fatalf("daemon B's run: complete: %v", err)
	}
}
