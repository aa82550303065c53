package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/worker"
)

// countingStore counts a daemon's requests to etcd by kind, and signals
// each lease renewal with the number of renewals so far.
type countingStore struct {
	kv.Store
	mu       sync.Mutex
	n        map[string]int
	renewals chan int // buffered for every renewal of a test: none is dropped
}

func (s *countingStore) count(kind string) {
	s.mu.Lock()
	s.n[kind]++
	s.mu.Unlock()
}

func (s *countingStore) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.n))
	for k, v := range s.n {
		out[k] = v
	}
	return out
}

func (s *countingStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	s.count("txn")
	return s.Store.Txn(ctx, t)
}

func (s *countingStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	s.count("range")
	return s.Store.Range(ctx, r)
}

func (s *countingStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	s.count("watch")
	return s.Store.Watch(ctx, prefix, fromRev)
}

func (s *countingStore) Grant(ctx context.Context, ttl time.Duration) (kv.LeaseID, error) {
	s.count("grant")
	return s.Store.Grant(ctx, ttl)
}

func (s *countingStore) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	ttl, err := s.Store.KeepAliveOnce(ctx, id)
	// Counted and signalled together, so that a window measured from one
	// signal to another holds exactly the renewals between them.
	s.mu.Lock()
	s.n["keepalive"]++
	n := s.n["keepalive"]
	s.mu.Unlock()
	s.renewals <- n
	return ttl, err
}

func (s *countingStore) Revoke(ctx context.Context, id kv.LeaseID) error {
	s.count("revoke")
	return s.Store.Revoke(ctx, id)
}

// TestSharedHeartbeatTrafficFlat: what a daemon asks of etcd while its jobs
// run does not grow with how many run. The whole session is one lease and
// one KeepAliveOnce per renewal interval; the jobs' ownership keys hang on
// it. Measured over the same number of renewals with 1 running job and with
// thousands (10,000; 3,000 under the race detector, which caps goroutines).
func TestSharedHeartbeatTrafficFlat(t *testing.T) {
	many := 10000
	if raceEnabled {
		many = 3000
	}
	const (
		// Not the 2 s minimum: a renewal must be answered within
		// TTL - TTL/5 - TTL/3 of the one before, 0.93 s at 2 s, and with
		// thousands of handlers and this process's race-instrumented etcd
		// on a loaded 2-core machine one was not: the session fenced
		// itself and its jobs stopped running. 6 s leaves 2.8 s.
		ttl       = 6 * time.Second
		window    = 6               // renewals, every TTL/3
		reapEvery = 2 * time.Second // reaper and orphan-janitor scans
	)
	measure := func(running int) map[string]int {
		e := newSharedEnv(t)
		cs := &countingStore{n: map[string]int{}, renewals: make(chan int, 1024)}
		c := e.coordinator(e.srv.Endpoint(), func(s kv.Store) kv.Store { cs.Store = s; return cs })
		release := make(chan struct{})
		started := make(chan struct{}, running)
		block := func(ctx context.Context, j *worker.Job) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// The jobs are enqueued before the daemon starts, in calls of a
		// few transactions each, one after another: what is measured is
		// the traffic once they run, not the enqueue. (Batches of 1,000
		// while the daemon claimed them sent eight transactions of 100 KB
		// at once to the race-instrumented etcd of this process: on a
		// loaded machine one waited out the store's 3 s write deadline
		// behind the others.)
		ps := make([]coordinator.EnqueueParams, running)
		for i := range ps {
			ps[i] = coordinator.EnqueueParams{Kind: "block"}
		}
		const perCall = 100
		for i := 0; i < len(ps); i += perCall {
			if _, err := e.c.EnqueueBatch(ctx, ps[i:min(i+perCall, len(ps))]); err != nil {
				t.Fatal(err)
			}
		}
		w := e.daemon(c, worker.Config{
			Concurrency:  running,
			LeaseTTL:     ttl,
			ReapInterval: reapEvery,
			OnStart:      func(coordinator.Job, fence.Token) { started <- struct{}{} },
		}, map[string]worker.Handler{"block": block})
		defer close(release)
		for range running {
			select {
			case <-started:
			case <-ctx.Done():
				t.Fatalf("only %d of %d jobs started", w.Running(), running)
			}
		}
		// From one renewal to the window-th after it, from now on.
		next := func() int {
			select {
			case n := <-cs.renewals:
				return n
			case <-ctx.Done():
				t.Fatal("no lease renewal")
				return 0
			}
		}
		for len(cs.renewals) > 0 {
			<-cs.renewals
		}
		first := next()
		before := cs.snapshot()
		last := first
		for range window {
			last = next()
		}
		after := cs.snapshot()
		if got := w.Running(); got != running {
			t.Fatalf("%d jobs running at the end of the window, want %d", got, running)
		}
		diff := map[string]int{}
		for k, v := range after {
			if d := v - before[k]; d != 0 {
				diff[k] = d
			}
		}
		diff["keepalive"] = last - first // exact, whatever the snapshots caught in flight
		return diff
	}
	one, lots := measure(1), measure(many)
	t.Logf("requests over %d renewals: 1 running job %v; %d running jobs %v", window, one, many, lots)
	if lots["keepalive"] != window || one["keepalive"] != window {
		t.Errorf("renewals in the window: %d and %d, want %d each", one["keepalive"], lots["keepalive"], window)
	}
	total := func(m map[string]int) (n int) {
		for _, v := range m {
			n += v
		}
		return n
	}
	// Besides renewals, a daemon scans the running and ownership indexes
	// every reapEvery (the reaper: both; the orphan janitor: ownership),
	// keys only, 1,000 keys per request: so per running thousand, at most
	// three pages per scan interval in the window. Reading each running
	// job, or a request per job, would add thousands.
	pages := (many + 999) / 1000
	scans := int((window*ttl/3)/reapEvery) + 1
	if extra, limit := total(lots)-total(one), 3*pages*scans+3; extra > limit {
		t.Errorf("a daemon running %d jobs sent %d requests over %d renewals, one running 1 job %d: %d more, want at most %d",
			many, total(lots), window, total(one), extra, limit)
	}
}
