package coordtest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
)

// Tests from a review of the reap path (2026-12-03). Run adds them to the
// suite.
var reapReviewTests = []suiteTest{
	{"ReapCountsMovesBeforeAFailedTransaction", testReapPartialCounted},
	{"SessionEndsOnRenewalAcknowledgedAfterDeadline", testSessionLateAck},
	{"SessionDeadlineInMonotonicTime", testSessionDeadlineMonotonic},
	{"SessionCloseRetriesFailedRevoke", testSessionCloseRetry},
	{"ReapMovesBeforeReadingEveryJob", testReapMovesAsItReads},
	{"ReapReadsRecordsOnlyUnlessAMoveIsRefused", testReapReadsRecords},
}

// chunkStore reports a small MaxOps, so that the coordinator splits a
// batch of moves into several transactions, and fails the failAt-th write
// transaction (counting from 1) before it reaches the store.
type chunkStore struct {
	kv.Store
	maxOps int
	failAt int64
	writes atomic.Int64
}

var errTxnFailed = errors.New("transaction failed")

func (s *chunkStore) Limits() kv.Limits {
	l := s.Store.Limits()
	l.MaxOps = s.maxOps
	return l
}

func (s *chunkStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if kvtest.Writes(t) && s.writes.Add(1) == s.failAt {
		return kv.TxnResult{}, errTxnFailed
	}
	return s.Store.Txn(ctx, t)
}

// testReapPartialCounted: a reap whose moves take several transactions
// (the store's limits) and whose second transaction fails has still moved
// the jobs of the first. Reap reports them (its count, OnReap for metrics,
// its log), not zero: an operator counting reaps, or a caller logging
// "reaped n", would otherwise never learn of moves that happened.
func testReapPartialCounted(t *testing.T, h *harness) {
	for range 3 {
		h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	}
	s := h.session(h.c)
	runs, _, err := h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, 3, false)
	if err != nil || len(runs) != 3 {
		t.Fatalf("Claim 3: %d runs, %v", len(runs), err)
	}
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	// A move is 3 ops (and 3 compares): with at most 5 ops a transaction,
	// two moves fit in one, the third goes in a second transaction, which
	// fails.
	cs := &chunkStore{Store: h.store, maxOps: 5, failAt: 2}
	var mu sync.Mutex
	var reported []string
	reaper := h.coordinator(cs, coordinator.Config{OnReap: func(j *coordinator.Job) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, j.ID)
	}})
	n, err := reaper.Reap(h.ctx(), nil, nil)
	if !errors.Is(err, errTxnFailed) {
		t.Fatalf("Reap with its second transaction failing: %d, %v; want the failure", n, err)
	}
	var moved []string
	for _, r := range runs {
		if j := h.get(r.Job().ID); j.State == coordinator.StateAvailable {
			moved = append(moved, j.ID)
		}
	}
	if len(moved) != 2 {
		t.Fatalf("%d jobs moved by the first transaction, want 2 (the test's limits are off)", len(moved))
	}
	mu.Lock()
	defer mu.Unlock()
	if n != len(moved) || len(reported) != len(moved) {
		t.Fatalf("Reap moved %d jobs before its error but returned %d and reported %d to OnReap", len(moved), n, len(reported))
	}
	// The third is reaped by the next pass.
	if n, err := h.c.Reap(h.ctx(), nil, nil); err != nil || n != 1 {
		t.Fatalf("next Reap = %d, %v; want 1", n, err)
	}
}

// orderStore reports a small MaxOps, like chunkStore, and counts the
// transactions that only read until the first one that writes.
type orderStore struct {
	kv.Store
	maxOps int
	mu     sync.Mutex
	reads  int // read-only transactions before the first write
	writes int
}

func (s *orderStore) Limits() kv.Limits {
	l := s.Store.Limits()
	l.MaxOps = s.maxOps
	return l
}

func (s *orderStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	s.mu.Lock()
	if kvtest.Writes(t) {
		s.writes++
	} else if s.writes == 0 {
		s.reads++
	}
	s.mu.Unlock()
	return s.Store.Txn(ctx, t)
}

// testReapMovesAsItReads: a reap of many jobs, whose reads and moves take
// many transactions each (the store's limits), applies its first
// transaction of moves after reading the jobs it moves, not after reading
// every job: a daemon that held thousands of jobs dies, and the first of
// them must be claimable elsewhere one transaction's worth of reads after
// its death is seen, not after thousands of reads (2026-12-05: 47 reads of
// 128 keys for 2,000 jobs before the first move, on etcd). The moves take
// as few transactions as before.
func testReapMovesAsItReads(t *testing.T, h *harness) {
	const jobs = 60
	for range jobs {
		h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	}
	s := h.session(h.c)
	for held := 0; held < jobs; {
		runs, _, err := h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, jobs-held, false)
		if err != nil || len(runs) == 0 {
			t.Fatalf("Claim: %d runs, %v", len(runs), err)
		}
		held += len(runs)
	}
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	// At most 16 ops a transaction: a read takes 16 jobs (their records),
	// a transaction of moves 13 (3 ops each, one per job), so 1 read comes
	// before the first move, and 60 jobs take 5 transactions of moves.
	os := &orderStore{Store: h.store, maxOps: 16}
	n, err := h.coordinator(os, coordinator.Config{}).Reap(h.ctx(), nil, nil)
	if err != nil || n != jobs {
		t.Fatalf("Reap = %d, %v; want %d", n, err, jobs)
	}
	os.mu.Lock()
	defer os.mu.Unlock()
	if os.reads > 1 {
		t.Errorf("%d read transactions before the first move, want 1 (that of the jobs it moves)", os.reads)
	}
	if os.writes != 5 {
		t.Errorf("the moves took %d transactions, want 5 (13 jobs each)", os.writes)
	}
}

// readStore counts the keys read by transactions that only read.
type readStore struct {
	kv.Store
	mu   sync.Mutex
	read map[string]int // key → times read
}

func (s *readStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if !kvtest.Writes(t) {
		s.mu.Lock()
		for _, op := range t.Then {
			s.read[op.Key]++
		}
		s.mu.Unlock()
	}
	return s.Store.Txn(ctx, t)
}

// testReapReadsRecords: a reap reads the records of the jobs it finds and
// not their ownership and cancel keys (missing for nearly every one, and
// checked by each move's compares anyway): at 2,000 jobs they were two of
// every three keys it read (2026-12-06). A job whose move those compares
// refuse is read again, all three keys, and decided on them: one with a
// pending cancel request becomes cancelled, its request deleted; one
// claimed again by a live daemon since the reap listed it is left running.
func testReapReadsRecords(t *testing.T, h *harness) {
	const jobs = 10
	var ids []string
	for range jobs {
		ids = append(ids, h.enqueue(coordinator.EnqueueParams{Kind: "k"}).ID)
	}
	s := h.session(h.c)
	if runs, _, err := h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, jobs, false); err != nil || len(runs) != jobs {
		t.Fatalf("Claim %d: %d runs, %v", jobs, len(runs), err)
	}
	cancelled := ids[0]
	if _, err := h.c.Cancel(h.ctx(), cancelled); err != nil {
		t.Fatal(err)
	}
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	// Another reaper re-queues the last job and a live daemon claims it,
	// after this reap has listed it as ownerless.
	reclaimed := ids[jobs-1]
	live := h.session(h.c)
	gate := kvtest.NewGate(h.store)
	gate.Match = func(tx kv.Txn) bool { return !kvtest.Writes(tx) }
	open := openOnce(t, gate)
	rs := &readStore{Store: gate, read: map[string]int{}}
	gate.Arm()
	done := make(chan error, 1)
	var n int
	go func() {
		var err error
		n, err = h.coordinator(rs, coordinator.Config{}).Reap(h.ctx(), ids, nil)
		done <- err
	}()
	select {
	case <-gate.Held():
	case <-time.After(failBound):
		t.Fatal("the reap never read the jobs")
	}
	if n, err := h.c.Reap(h.ctx(), []string{reclaimed}, nil); err != nil || n != 1 {
		t.Fatalf("Reap of the last job = %d, %v; want 1", n, err)
	}
	if runs, _, err := h.c.Claim(h.ctx(), live, coordinator.DefaultQueue, 1, false); err != nil || len(runs) != 1 {
		t.Fatalf("claim by the live daemon: %d runs, %v", len(runs), err)
	}
	open()
	if err := <-done; err != nil || n != jobs-1 {
		t.Fatalf("Reap = %d, %v; want %d", n, err, jobs-1)
	}
	h.wantState(cancelled, coordinator.StateCancelled)
	if got := h.wantState(reclaimed, coordinator.StateRunning); got.Owner != live.WorkerID() {
		t.Fatalf("the job claimed again is owned by %q, want the live daemon %q", got.Owner, live.WorkerID())
	}
	for _, id := range ids[1 : jobs-1] {
		h.wantState(id, coordinator.StateAvailable)
	}
	rr, err := h.store.Range(h.ctx(), kv.RangeRequest{Start: h.keysRoot() + "c/", End: kv.PrefixEnd(h.keysRoot() + "c/"), KeysOnly: true})
	if err != nil || len(rr.KVs) != 0 {
		t.Fatalf("cancel keys left after the reap: %d, %v; want none (the request is done with)", len(rr.KVs), err)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	want := map[string]int{}
	for _, id := range ids {
		want[h.keysRoot()+"j/"+id] = 1
	}
	for _, id := range []string{cancelled, reclaimed} { // refused once, read again
		want[h.keysRoot()+"j/"+id]++
		want[h.keysRoot()+"o/"+id]++
		want[h.keysRoot()+"c/"+id]++
	}
	for k, w := range want {
		if rs.read[k] != w {
			t.Errorf("%s read %d times, want %d", k, rs.read[k], w)
		}
	}
	for k, got := range rs.read {
		if want[k] == 0 {
			t.Errorf("%s read %d times, want never", k, got)
		}
	}
}

// testSessionLateAck (promise 6): a renewal whose reply arrives only after
// the validity deadline has passed does not revive the session. Valid was
// false from the deadline on (fenced writes refused locally, their runs
// abandoned), while the handlers' context was not cancelled: the deadline
// passed without an acknowledged renewal, so the session ends, with
// ErrSessionExpired, instead of going on with a new deadline.
func testSessionLateAck(t *testing.T, h *harness) {
	const ttl = 10 * time.Second // deadline TTL − TTL/5 = 8 s after the start
	clock := newSignalClock(NewClock(time.Now()))
	var late atomic.Bool
	rs := &renewStore{Store: h.store, onRenew: func() {
		if late.Load() {
			// Sent 1 s after the start; answered 8.5 s after it, half a
			// second past the deadline.
			clock.Advance(7500 * time.Millisecond)
		}
	}}
	s := h.clockSession(h.coordinator(rs, coordinator.Config{}), clock, ttl)
	clock.next(t) // the heartbeat waits for its first renewal
	deadline := s.ValidUntil()
	clock.Advance(time.Second)
	late.Store(true)
	s.RenewNow()
	select {
	case <-s.Done():
	case due := <-clock.timers:
		t.Fatalf("a renewal answered %v after the validity deadline %v kept the session (valid until %v, valid now: %v); next renewal due %v",
			clock.Now().Sub(deadline), deadline.Format(time.StampMilli), s.ValidUntil().Format(time.StampMilli), s.Valid(), due.Format(time.StampMilli))
	case <-time.After(failBound):
		t.Fatal("the heartbeat neither ended the session nor came back to wait")
	}
	if cause := context.Cause(s.Ctx()); !errors.Is(cause, coordinator.ErrSessionExpired) {
		t.Fatalf("session ended with %v, want ErrSessionExpired", cause)
	}
	if s.Valid() {
		t.Fatal("ended session still valid")
	}
}

// hasMonotonic reports whether t carries a monotonic clock reading, which
// its String shows as "m=±<seconds>" (see package time).
func hasMonotonic(t time.Time) bool { return strings.Contains(t.String(), " m=") }

// testSessionDeadlineMonotonic (promise 6): the validity deadline is
// kept in elapsed time, as the server counts a lease's TTL. A deadline kept
// as wall-clock time moves with every step of the wall clock: stepped back
// by a minute (NTP, a VM resumed), a daemon cut off from the store would
// go on believing its lease alive, its handlers running, a minute after the
// store expired it and its jobs ran elsewhere; stepped forward, every
// session ends at once. A test cannot step the wall clock, so it checks
// what makes the deadline immune: it keeps the monotonic reading of the
// session clock's times (Go then compares and waits in monotonic time),
// at the start and after a renewal.
func testSessionDeadlineMonotonic(t *testing.T, h *harness) {
	if !hasMonotonic(time.Now()) {
		t.Skip("this platform's clock has no monotonic reading")
	}
	s := h.session(h.c) // RealClock
	if v := s.ValidUntil(); !hasMonotonic(v) {
		t.Fatalf("validity deadline %v is wall-clock time: a step of the wall clock moves it", v)
	}
	clock := newSignalClock(NewClock(time.Now()))
	s = h.clockSession(h.c, clock, 10*time.Second)
	clock.next(t) // the heartbeat waits for its first renewal
	clock.Advance(time.Second)
	s.RenewNow()
	clock.next(t) // renewed; the heartbeat waits again
	if n := s.Renewals(); n != 1 {
		t.Fatalf("%d renewals acknowledged, want 1", n)
	}
	if v := s.ValidUntil(); !hasMonotonic(v) {
		t.Fatalf("validity deadline after a renewal %v is wall-clock time: a step of the wall clock moves it", v)
	}
}

// revokeFailStore fails the next Revoke, once armed, without sending it.
type revokeFailStore struct {
	kv.Store
	fail atomic.Bool
}

var errRevokeFailed = errors.New("revoke failed")

func (s *revokeFailStore) Revoke(ctx context.Context, id kv.LeaseID) error {
	if s.fail.CompareAndSwap(true, false) {
		return errRevokeFailed
	}
	return s.Store.Revoke(ctx, id)
}

// testSessionCloseRetry: a Close whose revoke failed (the store was
// unreachable) reports it, and a second Close tries again: it does not
// report success while the lease, with the registration and the ownership
// keys of any job still held, lives on until its TTL runs out.
func testSessionCloseRetry(t *testing.T, h *harness) {
	rs := &revokeFailStore{Store: h.store}
	s := h.session(h.coordinator(rs, coordinator.Config{}))
	rs.fail.Store(true)
	if err := s.Close(h.ctx()); !errors.Is(err, errRevokeFailed) {
		t.Fatalf("Close with its revoke failing: %v, want that failure", err)
	}
	if cause := context.Cause(s.Ctx()); !errors.Is(cause, coordinator.ErrSessionClosed) {
		t.Fatalf("closed session's cause %v, want ErrSessionClosed", cause)
	}
	if err := s.Close(h.ctx()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := h.store.KeepAliveOnce(h.ctx(), s.Lease()); !errors.Is(err, kv.ErrLeaseNotFound) {
		t.Fatalf("lease after a second Close returned nil: renewal %v, want ErrLeaseNotFound (the lease was never revoked)", err)
	}
	if err := s.Close(h.ctx()); err != nil {
		t.Fatalf("third Close: %v", err)
	}
}
