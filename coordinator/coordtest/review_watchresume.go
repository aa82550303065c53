package coordtest

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// Tests from a review of the watches and what they resume from. Run adds
// them to the suite.
var watchResumeReviewTests = []suiteTest{
	{"RegistrationWatchResumesAfterAFailedRead", testRegistrationWatchResumesAfterFailedRead},
}

var errWatchCut = errors.New("coordtest: watch cancelled by the server")

// cutRegistrationStore plays a store around a leader change for one
// daemon's registration, key: its first watch of key ends with an error
// once cut is closed (etcd cancelling a require-leader watch), and its
// first read of key, the one after that end, fails after the lease (set
// before cut is closed) is revoked, as an etcd leader that lost its
// leadership may do (etcd-io/etcd#15247). Everything else reaches the
// store.
type cutRegistrationStore struct {
	kv.Store
	key     string
	cut     chan struct{}
	lease   atomic.Int64
	watches atomic.Int32
	reads   atomic.Int32
}

func (s *cutRegistrationStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	if prefix != s.key || s.watches.Add(1) > 1 {
		return s.Store.Watch(ctx, prefix, fromRev)
	}
	ch := make(chan kv.WatchResponse, 1)
	go func() {
		defer close(ch)
		select {
		case <-s.cut:
			ch <- kv.WatchResponse{Err: errWatchCut}
		case <-ctx.Done():
		}
	}()
	return ch
}

func (s *cutRegistrationStore) Limits() kv.Limits {
	l := s.Store.Limits()
	l.LeasesExpire = true
	return l
}

func (s *cutRegistrationStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if r.Start != s.key || s.reads.Add(1) > 1 {
		return s.Store.Range(ctx, r)
	}
	if err := s.Store.Revoke(ctx, kv.LeaseID(s.lease.Load())); err != nil {
		return kv.RangeResult{}, err
	}
	return kv.RangeResult{}, errReadFailed
}

// testRegistrationWatchResumesAfterFailedRead (promise 6): a session
// whose registration watch ended (a require-leader watch cancelled as the
// leader changed) and whose read of its registration then failed watches
// again from where the ended watch was, not from the store's revision
// of now: the registration deleted between the two (the lease revoked by
// the leader that lost its leadership) is seen, and the session ends at
// once. Before, it watched from "now", missed the deletion, and lived on
// until its next renewal (here 20 s of a clock that does not move; up to
// a third of the TTL in a daemon) while the reapers, which read again
// after their watches end, had handed its jobs to other daemons.
func testRegistrationWatchResumesAfterFailedRead(t *testing.T, h *harness) {
	id := "w-cut-" + coordinator.NewWorkerID()
	st := &cutRegistrationStore{Store: h.store, key: h.keysRoot() + "w/" + id, cut: make(chan struct{})}
	c, err := coordinator.New(st, coordinator.Config{Namespace: h.ns, Clock: h.clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewSession(h.ctx(), coordinator.SessionConfig{TTL: 60 * time.Second, Worker: coordinator.WorkerInfo{ID: id}})
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	st.lease.Store(int64(s.Lease()))
	close(st.cut)
	select {
	case <-s.Done():
	case <-time.After(failBound):
		t.Fatalf("the session lives on after its registration was deleted between its watch's end and its next watch (%d watches of it, %d reads)", st.watches.Load(), st.reads.Load())
	}
	if cause := context.Cause(s.Ctx()); !errors.Is(cause, coordinator.ErrSessionExpired) {
		t.Fatalf("session ended with %v, want ErrSessionExpired", cause)
	}
}
