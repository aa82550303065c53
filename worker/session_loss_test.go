package worker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/worker"
)

// lostThenUnreachable reports the session's lease gone at the next renewal
// once lose is set (as a store that expired it would, though here it
// lives on), and fails the first revoke after that (as a store still out
// of reach would). It records the leases it revoked.
type lostThenUnreachable struct {
	kv.Store
	lose, revokeFailed atomic.Bool
	mu                 sync.Mutex
	revoked            map[kv.LeaseID]bool
}

func (s *lostThenUnreachable) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	if s.lose.CompareAndSwap(true, false) {
		return 0, kv.ErrLeaseNotFound
	}
	return s.Store.KeepAliveOnce(ctx, id)
}

func (s *lostThenUnreachable) Revoke(ctx context.Context, id kv.LeaseID) error {
	if s.revokeFailed.CompareAndSwap(false, true) {
		return errors.New("store out of reach")
	}
	if err := s.Store.Revoke(ctx, id); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked[id] = true
	return nil
}

// TestLostSessionLeaseRevokedOnceStoreAnswers: a session that ended while
// its revoke failed leaves a lease that may live on with its jobs'
// ownership keys; the worker revokes it as soon as its new session is up,
// so those jobs run again at once, not when the lease expires (it was
// never revoked at all).
func TestLostSessionLeaseRevokedOnceStoreAnswers(t *testing.T) {
	st := &lostThenUnreachable{revoked: map[kv.LeaseID]bool{}}
	st.revokeFailed.Store(true) // none until the session is lost
	e := newEnv(t, func(s kv.Store) kv.Store { st.Store = s; return st })
	started := make(chan struct{}, 2)
	var runs atomic.Int32
	w := e.worker(worker.Config{LeaseTTL: 3 * time.Second}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error {
			started <- struct{}{}
			if runs.Add(1) == 1 {
				<-ctx.Done() // until the session is lost
				return ctx.Err()
			}
			return nil
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	<-started
	old := w.Session().Lease()
	st.revokeFailed.Store(false) // the next revoke fails
	st.lose.Store(true)
	if j := e.wait(id); j.State != coordinator.StateCompleted || runs.Load() != 2 {
		t.Fatalf("job %s after %d runs; want completed after 2", j.State, runs.Load())
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.revoked[old] {
		t.Fatalf("the lost session's lease %d was never revoked after its first revoke failed", old)
	}
}
