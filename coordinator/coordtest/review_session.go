package coordtest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
)

// Tests from a review of sessions, renewals and self-fencing (promise 6
// of DESIGN.md, ADR 0042). Run adds them to the suite.
var sessionReviewTests = []suiteTest{
	{"RenewalAnsweredWithoutTTLEndsSession", testRenewalWithoutTTL},
	{"ClaimLandingPastBootDeadlineStartsNoRun", testClaimPastBootDeadline},
}

// noTTLStore answers every renewal, once the store has renewed the lease,
// with a TTL of zero: on etcd's wire, a lease that is gone (clientv3's
// KeepAliveOnce turns it into ErrLeaseNotFound).
type noTTLStore struct {
	kv.Store
	on atomic.Bool
}

func (s *noTTLStore) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	ttl, err := s.Store.KeepAliveOnce(ctx, id)
	if err == nil && s.on.Load() {
		return 0, nil
	}
	return ttl, err
}

// testRenewalWithoutTTL (promise 6): a renewal answered with a TTL of zero
// or less renewed nothing (etcd answers so for a lease that is gone). The
// session ends at once, as for ErrLeaseNotFound. Before, the heartbeat
// took a TTL it could not use for the full TTL, and moved its deadline a
// whole TTL past the renewal's send time.
func testRenewalWithoutTTL(t *testing.T, h *harness) {
	clock := newSignalClock(NewClock(time.Now()))
	ns := &noTTLStore{Store: h.store}
	c := h.coordinator(ns, coordinator.Config{})
	s := h.clockSession(c, clock, 30*time.Second)
	clock.next(t) // the heartbeat waits for its first renewal
	ns.on.Store(true)
	s.RenewNow()
	select {
	case <-s.Done():
	case <-clock.timers:
		t.Fatalf("a renewal answered with no TTL was taken for a renewal: the session lives on, valid until %v (%d renewals counted)", s.ValidUntil(), s.Renewals())
	case <-time.After(failBound):
		t.Fatal("the session neither ended nor came back to wait")
	}
	if cause := context.Cause(s.Ctx()); !errors.Is(cause, coordinator.ErrSessionExpired) {
		t.Fatalf("session ended with %v, want ErrSessionExpired", cause)
	}
	if n := s.Renewals(); n != 0 {
		t.Fatalf("%d renewals counted, want none", n)
	}
}

// testClaimPastBootDeadline (promise 6): a claim sent before the session's
// deadline whose reply comes after it on the boot clock (the machine
// suspended with the claim in flight; the monotonic clock stood still)
// hands out no run: the lease may have expired meanwhile and another
// daemon may run the job. Before, Claim returned the run, and the worker,
// whose check (Session.Valid) does not read the boot clock, started its
// handler, for up to a second until the session's suspend check ended it.
// The session ends at once.
func testClaimPastBootDeadline(t *testing.T, h *harness) {
	const ttl = 10 * time.Second
	h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	gate := kvtest.NewGate(h.store)
	gate.Land = true // the claim committed before the suspend
	open := openOnce(t, gate)
	c := h.coordinator(gate, coordinator.Config{})
	var boot atomic.Int64
	s, err := c.NewSession(h.ctx(), coordinator.SessionConfig{
		TTL: ttl, Clock: NewClock(time.Now()),
		BootClock: func() time.Duration { return time.Duration(boot.Load()) },
		Worker:    coordinator.WorkerInfo{ID: fmt.Sprintf("w%d-%s", workerSeq.Add(1), coordinator.NewWorkerID())},
	})
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	type result struct {
		runs []*coordinator.Run
		err  error
	}
	done := make(chan result, 1)
	gate.Arm()
	go func() {
		runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
		done <- result{runs, err}
	}()
	select {
	case <-gate.Held():
	case <-time.After(failBound):
		t.Fatal("the claim did not reach the store")
	}
	boot.Add(int64(ttl)) // suspended for a TTL with the claim in flight
	open()
	var r result
	select {
	case r = <-done:
	case <-time.After(failBound):
		t.Fatal("the claim did not return")
	}
	if len(r.runs) != 0 {
		t.Fatalf("a claim answered after the session's deadline on the boot clock handed out %d run(s) (err %v): its handler would run while another daemon may", len(r.runs), r.err)
	}
	if !errors.Is(r.err, coordinator.ErrSessionExpired) {
		t.Fatalf("claim past the deadline: %v, want ErrSessionExpired", r.err)
	}
	select {
	case <-s.Done():
	case <-time.After(failBound):
		t.Fatal("the session did not end")
	}
	if cause := context.Cause(s.Ctx()); !errors.Is(cause, coordinator.ErrSessionExpired) {
		t.Fatalf("session ended with %v, want ErrSessionExpired", cause)
	}
}
