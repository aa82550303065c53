package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/worker"
)

// sharedEnv is one etcd member and any number of daemons on it, each with
// its own client (optionally through a fault proxy) and coordinator.
type sharedEnv struct {
	t   *testing.T
	srv *etcdtest.Server
	ns  string
	c   *coordinator.Coordinator // an observer, not a daemon
}

func newSharedEnv(t *testing.T) *sharedEnv {
	srv := etcdtest.Start(t)
	e := &sharedEnv{t: t, srv: srv, ns: "t" + coordinator.NewWorkerID()[len(coordinator.NewWorkerID())-8:]}
	e.c = e.coordinator(srv.Endpoint(), nil)
	return e
}

func (e *sharedEnv) coordinator(endpoint string, wrap func(kv.Store) kv.Store) *coordinator.Coordinator {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := etcdkv.Dial(ctx, etcdkv.Config{Endpoints: []string{endpoint}, KeepAliveTime: time.Second, KeepAliveTimeout: time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cli.Close() })
	var store kv.Store = etcdkv.New(cli, etcdkv.Options{})
	if wrap != nil {
		store = wrap(store)
	}
	c, err := coordinator.New(store, coordinator.Config{Namespace: e.ns, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *sharedEnv) daemon(c *coordinator.Coordinator, cfg worker.Config, handlers map[string]worker.Handler) *worker.Worker {
	e.t.Helper()
	cfg.Reap, cfg.Maintain, cfg.Spread = true, true, true
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.ReapInterval == 0 {
		cfg.ReapInterval = time.Second
	}
	w, err := worker.New(c, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, h := range handlers {
		w.Handle(k, h)
	}
	if err := w.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

func (e *sharedEnv) wait(id string, d time.Duration) *coordinator.Job {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	j, err := e.c.Wait(ctx, id)
	if err != nil {
		cur, gerr := e.c.Get(context.Background(), id)
		n, _ := e.c.Counts(context.Background())
		e.t.Fatalf("wait for %s: %v (now %+v, %v; counts %v)", id, err, cur, gerr, n)
	}
	return j
}

// TestSharedDaemonsRunEachJobOnce: three daemons over one etcd drain a
// queue; without faults every job runs exactly once.
func TestSharedDaemonsRunEachJobOnce(t *testing.T) {
	e := newSharedEnv(t)
	var mu sync.Mutex
	runs := map[string]int{}
	h := map[string]worker.Handler{"k": func(ctx context.Context, j *worker.Job) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		return nil
	}}
	for range 3 {
		e.daemon(e.coordinator(e.srv.Endpoint(), nil), worker.Config{Concurrency: 8}, h)
	}
	ps := make([]coordinator.EnqueueParams, 300)
	for i := range ps {
		ps[i] = coordinator.EnqueueParams{Kind: "k"}
	}
	res, err := e.c.EnqueueBatch(context.Background(), ps)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if j := e.wait(r.Job.ID, 30*time.Second); j.State != coordinator.StateCompleted {
			t.Fatalf("job %s %s", j.ID, j.State)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("job %s ran %d times", id, n)
		}
	}
	if len(runs) != len(ps) {
		t.Errorf("%d jobs ran, want %d", len(runs), len(ps))
	}
}

// TestSharedPartitionedDaemonFencesItself: a daemon cut off from etcd
// cancels its job before its lease can expire; a peer takes the job over;
// after the partition heals, the cut-off daemon's writes are refused and the
// peer's outcome stands.
func TestSharedPartitionedDaemonFencesItself(t *testing.T) {
	e := newSharedEnv(t)
	const ttl = 2 * time.Second
	proxy := etcdtest.NewProxy(t, e.srv.Endpoint())
	started := make(chan *worker.Job, 1)
	cancelled := make(chan error, 1)
	heal := make(chan struct{})
	lateWrite := make(chan error, 1)
	a := e.daemon(e.coordinator(proxy.URL(), nil), worker.Config{LeaseTTL: ttl}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error {
			started <- j
			<-ctx.Done()
			cancelled <- context.Cause(ctx)
			<-heal
			// A paused or partitioned handler that writes anyway.
			lateWrite <- j.Checkpoint(context.Background(), "late")
			return nil
		},
	})
	id := e.wait0(coordinator.EnqueueParams{Kind: "k"})
	j := <-started
	if j.ID != id {
		t.Fatalf("started %s", j.ID)
	}
	// The lease was last renewed no later than now: the server cannot
	// expire it before now+TTL, and the daemon must give up before that.
	cut := time.Now()
	proxy.Blackhole()
	select {
	case cause := <-cancelled:
		if !errors.Is(cause, coordinator.ErrSessionExpired) {
			t.Fatalf("handler cancelled with %v", cause)
		}
		if el := time.Since(cut); el >= ttl {
			t.Fatalf("handler cancelled %s after the cut: not before the lease could expire", el)
		}
	case <-time.After(3 * ttl):
		t.Fatal("partitioned daemon did not cancel its handler")
	}
	// A peer reaps the job after the lease expires and runs it.
	var peerToken atomic.Int64
	e.daemon(e.coordinator(e.srv.Endpoint(), nil), worker.Config{LeaseTTL: ttl}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error { peerToken.Store(int64(j.Token)); return nil },
	})
	final := e.wait(id, 20*time.Second)
	if final.State != coordinator.StateCompleted || final.Token != fence.Token(peerToken.Load()) || final.Owner == a.ID() {
		t.Fatalf("final record: %s token %d owner %s; want completed by the peer (token %d)", final.State, final.Token, final.Owner, peerToken.Load())
	}
	if final.Token <= j.Token {
		t.Fatalf("peer's token %d not above the first run's %d", final.Token, j.Token)
	}
	proxy.Heal()
	close(heal)
	if err := <-lateWrite; !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("late write from the cut-off run: %v, want ErrLeaseLost", err)
	}
	if again, _ := e.c.Get(context.Background(), id); again.State != coordinator.StateCompleted || again.Token != final.Token {
		t.Fatalf("record changed after the late write: %+v", again)
	}
}

func (e *sharedEnv) wait0(p coordinator.EnqueueParams) string {
	e.t.Helper()
	r, err := e.c.Enqueue(context.Background(), p)
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Job.ID
}

// TestSharedRenewedLeaseNeverReaped: a job running for several TTLs on a
// healthy daemon is never reaped by a peer's reaper.
func TestSharedRenewedLeaseNeverReaped(t *testing.T) {
	e := newSharedEnv(t)
	const ttl = 2 * time.Second
	release := make(chan struct{})
	started := make(chan struct{})
	e.daemon(e.coordinator(e.srv.Endpoint(), nil), worker.Config{LeaseTTL: ttl}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error {
			close(started)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
	id := e.wait0(coordinator.EnqueueParams{Kind: "k", MaxAttempts: 1})
	<-started
	// A peer that only reaps, scanning every 200ms, for 3 TTLs.
	peer := e.coordinator(e.srv.Endpoint(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*ttl)
	defer cancel()
	for ctx.Err() == nil {
		if n, err := peer.Reap(ctx, nil, nil); err == nil && n != 0 {
			t.Fatalf("peer reaped %d jobs of a live daemon", n)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	close(release)
	j := e.wait(id, 10*time.Second)
	if j.State != coordinator.StateCompleted || j.Rescues != 0 || j.Attempt != 1 {
		t.Fatalf("job %s rescues %d attempt %d", j.State, j.Rescues, j.Attempt)
	}
}

// compactingWatches ends the first watch of every prefix with
// ErrCompacted, as a compaction during a disconnect would.
type compactingWatches struct {
	kv.Store
	mu   sync.Mutex
	seen map[string]bool
	hits atomic.Int32
}

func (s *compactingWatches) Watch(ctx context.Context, prefix string, rev int64) <-chan kv.WatchResponse {
	s.mu.Lock()
	first := !s.seen[prefix]
	s.seen[prefix] = true
	s.mu.Unlock()
	if !first {
		return s.Store.Watch(ctx, prefix, rev)
	}
	s.hits.Add(1)
	ch := make(chan kv.WatchResponse, 1)
	ch <- kv.WatchResponse{Err: kv.ErrCompacted, CompactRevision: rev}
	close(ch)
	return ch
}

// TestSharedWatchCompactionDoesNotStrand: watches that end with
// ErrCompacted (after a real compaction of the store) are resumed by reading
// again; jobs enqueued meanwhile still run, promptly.
func TestSharedWatchCompactionDoesNotStrand(t *testing.T) {
	e := newSharedEnv(t)
	cw := &compactingWatches{seen: map[string]bool{}}
	c := e.coordinator(e.srv.Endpoint(), func(s kv.Store) kv.Store { cw.Store = s; return cw })
	done := make(chan string, 10)
	e.daemon(c, worker.Config{PollInterval: time.Hour}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error { done <- j.ID; return nil },
	})
	cli := e.srv.Client(t)
	resp, err := cli.Get(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(context.Background(), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	id := e.wait0(coordinator.EnqueueParams{Kind: "k"})
	select {
	case got := <-done:
		if got != id {
			t.Fatalf("ran %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("job stranded after a compacted watch (the poll backstop is an hour)")
	}
	if cw.hits.Load() == 0 {
		t.Fatal("no watch was compacted: the test tested nothing")
	}
}
