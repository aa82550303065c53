package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/worker"
)

// refusingWrites refuses every transaction once refuse is set, while lease
// renewals go on: as etcd out of space (its NOSPACE alarm) does.
type refusingWrites struct {
	kv.Store
	refuse atomic.Bool
}

func (s *refusingWrites) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if s.refuse.Load() {
		return kv.TxnResult{}, errors.New("etcdserver: mvcc: database space exceeded")
	}
	return s.Store.Txn(ctx, t)
}

// TestStopGivesUpOutcomeTheStoreKeepsRefusing: an outcome write that the
// store keeps refusing while the session renews is retried for
// AbandonGrace after Stop's deadline, then given up, and Stop returns; it
// retried for ever, and Stop never returned.
func TestStopGivesUpOutcomeTheStoreKeepsRefusing(t *testing.T) {
	st := &refusingWrites{}
	e := newEnv(t, func(s kv.Store) kv.Store { st.Store = s; return st })
	started := make(chan struct{})
	outcomes := make(chan worker.Outcome, 1)
	w, err := worker.New(e.c, worker.Config{
		AbandonGrace: 50 * time.Millisecond,
		OnOutcome:    func(o worker.Outcome) { outcomes <- o },
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(ctx context.Context, j *worker.Job) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	<-started
	st.refuse.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(ctx) }()
	watchdog := time.NewTimer(20 * time.Second)
	defer watchdog.Stop()
	select {
	case err := <-stopped:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Stop = %v, want its ctx's error", err)
		}
	case <-watchdog.C:
		st.refuse.Store(false) // let the stuck Stop end
		t.Fatal("Stop does not return while the store refuses the outcome write")
	}
	if o := <-outcomes; o.Op != "release" || o.Err == nil {
		t.Fatalf("outcome %s err %v, want a release that was not recorded", o.Op, o.Err)
	}
}

// TestNegativeIntervalsRefused: a negative ReapInterval is refused as the
// other negative settings are; it was accepted, and the claim loop then
// looked for orphaned claims before every claim (and a reaper scanned
// without pause).
//
// Each refusal names the setting, and a lease margin that leaves too
// little of the TTL is refused by New, not only by Start (found in
// review: New accepted LeaseMargin 1h, Start refused it).
func TestNegativeIntervalsRefused(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		cfg  worker.Config
		want string
	}{
		{worker.Config{PollInterval: -time.Second}, "worker.Config.PollInterval is negative"},
		{worker.Config{ReapInterval: -time.Second}, "worker.Config.ReapInterval is negative"},
		{worker.Config{AbandonGrace: -1}, "worker.Config.AbandonGrace is negative"},
		{worker.Config{LeaseMargin: -time.Second}, "worker.Config.LeaseMargin is negative"},
		{worker.Config{LeaseMargin: time.Hour}, "lease margin 1h0m0s leaves too little of TTL 30s beyond one renewal every 10s: want under 15s"},
	} {
		if _, err := worker.New(e.c, c.cfg); !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("worker.New(%+v) = %v, want ErrInvalid saying %q", c.cfg, err, c.want)
		}
	}
}

// stallOutcomes holds every outcome commit until its caller's context
// ends, while lease renewals go on: a store whose writes hang (a stalled
// disk, a member that takes requests and answers none) but whose leases
// are renewed.
type stallOutcomes struct {
	kv.Store
	held chan struct{}
}

func (s *stallOutcomes) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if isOutcomeCommit(t) {
		signal(s.held)
		<-ctx.Done()
		return kv.TxnResult{}, ctx.Err()
	}
	return s.Store.Txn(ctx, t)
}

// TestStopGivesUpOutcomeTheStoreHolds: an outcome write that the store
// holds until its deadline, while the session renews, is given up
// AbandonGrace after Stop's deadline, as one the store refuses is, and
// Stop returns. Each attempt ran until the session's validity deadline,
// and one that ended so under a renewed session went on under the new
// deadline without looking at the drain's cut: Stop never returned.
func TestStopGivesUpOutcomeTheStoreHolds(t *testing.T) {
	st := &stallOutcomes{held: make(chan struct{}, 1)}
	e := newEnv(t, func(s kv.Store) kv.Store { st.Store = s; return st })
	outcomes := make(chan worker.Outcome, 1)
	w, err := worker.New(e.c, worker.Config{
		LeaseTTL:     coordinator.MinLeaseTTL,
		AbandonGrace: 50 * time.Millisecond,
		OnOutcome:    func(o worker.Outcome) { outcomes <- o },
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(ctx context.Context, j *worker.Job) error { return nil })
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	awaitSignal(t, st.held, "the outcome write reached the store")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(ctx) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop = %v, want nil (no handler was running)", err)
		}
	case <-time.After(outageBound):
		t.Fatal("Stop does not return while the store holds the outcome write")
	}
	if o := <-outcomes; o.Op != "complete" || o.Err == nil {
		t.Fatalf("outcome %s err %v, want a completion that was not recorded", o.Op, o.Err)
	}
}

// TestStopReleasesAbandonedHandlersJob: a handler that ignores its
// cancelled context past AbandonGrace at Stop is abandoned, and its job
// is released (available again, no attempt used) before Stop returns:
// its outcome write gets AbandonGrace of its own from when it begins, not
// what is left of the drain's.
func TestStopReleasesAbandonedHandlersJob(t *testing.T) {
	e := newEnv(t, nil)
	started := make(chan struct{})
	release := make(chan struct{})
	outcomes := make(chan worker.Outcome, 1)
	w, err := worker.New(e.c, worker.Config{
		AbandonGrace: 50 * time.Millisecond,
		OnOutcome:    func(o worker.Outcome) { outcomes <- o },
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(ctx context.Context, j *worker.Job) error {
		close(started)
		<-release // ignores ctx
		return nil
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer close(release)
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Stop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop = %v, want its ctx's error", err)
	}
	if o := <-outcomes; o.Op != "release" || o.Err != nil {
		t.Fatalf("outcome %s err %v, want a recorded release", o.Op, o.Err)
	}
	if j, err := e.c.Get(context.Background(), id); err != nil || j.State != coordinator.StateAvailable || j.Attempt != 0 {
		t.Fatalf("job %+v (%v): want available, attempt 0", j, err)
	}
}

// TestQueueListedTwiceRefused: a queue listed twice in Config.Queues is
// refused by New, naming it. It was taken: the round robin claimed from it
// twice as often as from the others, and the registration listed it twice,
// so that queues list counted the daemon twice among those serving it.
func TestQueueListedTwiceRefused(t *testing.T) {
	e := newEnv(t, nil)
	_, err := worker.New(e.c, worker.Config{Queues: []string{"mail", "default", "mail"}})
	if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "queue mail is listed twice") {
		t.Fatalf("worker.New(Queues [mail default mail]) = %v, want ErrInvalid saying queue mail is listed twice", err)
	}
	if _, err := worker.New(e.c, worker.Config{Queues: []string{"mail", "default"}}); err != nil {
		t.Fatalf("worker.New(Queues [mail default]) = %v", err)
	}
}
