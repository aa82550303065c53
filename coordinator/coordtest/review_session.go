package coordtest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// Tests from a review of sessions, renewals and self-fencing (promise 6
// of DESIGN.md, ADR 0042). Run adds them to the suite.
var sessionReviewTests = []suiteTest{
	{"RenewalAnsweredWithoutTTLEndsSession", testRenewalWithoutTTL},
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
