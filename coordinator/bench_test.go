package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/localstore"
)

// The hot paths of the state machine, on both backends:
//
//	go test -run '^$' -bench . ./coordinator/
//
// Each benchmark runs in a fresh namespace; the localstore ones on a fresh
// Pebble directory. The etcd ones share one embedded member per top-level
// benchmark, started only if an etcd sub-benchmark is selected.

// benchStores runs fn as one sub-benchmark per backend.
func benchStores(b *testing.B, fn func(b *testing.B, store kv.Store)) {
	b.Run("localstore", func(b *testing.B) {
		s, err := localstore.Open(b.TempDir(), localstore.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		fn(b, s)
	})
	var (
		once  sync.Once
		store kv.Store
	)
	parent := b
	b.Run("etcd", func(b *testing.B) {
		once.Do(func() {
			srv := etcdtest.Start(parent)
			s := etcdkv.New(srv.Client(parent), etcdkv.Options{})
			parent.Cleanup(func() { _ = s.Close() })
			store = s
		})
		if store == nil {
			b.Fatal("no etcd store")
		}
		fn(b, store)
	})
}

var benchNS atomic.Int64

func newBenchCoordinator(b *testing.B, store kv.Store) *coordinator.Coordinator {
	b.Helper()
	c, err := coordinator.New(store, coordinator.Config{
		Namespace: fmt.Sprintf("bench-%d-%d", benchNS.Add(1), runtime.NumGoroutine()),
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func benchParams(n int) []coordinator.EnqueueParams {
	ps := make([]coordinator.EnqueueParams, n)
	for i := range ps {
		ps[i] = coordinator.EnqueueParams{Kind: "bench", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
	}
	return ps
}

// enqueueN inserts n jobs in batches of 1000.
func enqueueN(b *testing.B, c *coordinator.Coordinator, n int) {
	b.Helper()
	for n > 0 {
		k := min(n, 1000)
		if _, err := c.EnqueueBatch(context.Background(), benchParams(k)); err != nil {
			b.Fatal(err)
		}
		n -= k
	}
}

func newBenchSession(b *testing.B, c *coordinator.Coordinator) *coordinator.Session {
	b.Helper()
	sess, err := c.NewSession(context.Background(), coordinator.SessionConfig{
		Worker: coordinator.WorkerInfo{ID: coordinator.NewWorkerID()},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sess.Close(context.Background()) })
	return sess
}

// BenchmarkEnqueueBatch1000: one op is one EnqueueBatch call of 1000 jobs.
func BenchmarkEnqueueBatch1000(b *testing.B) {
	benchStores(b, func(b *testing.B, store kv.Store) {
		c := newBenchCoordinator(b, store)
		ps := benchParams(1000)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := c.EnqueueBatch(ctx, ps); err != nil {
				b.Fatal(err)
			}
		}
		jobs := float64(b.N) * 1000
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/jobs, "ns/job")
		b.ReportMetric(jobs/b.Elapsed().Seconds(), "jobs/s")
	})
}

// BenchmarkClaimAndComplete: one op is a Claim of one job and its
// Complete, by concurrent claimers (spread claims, as several daemons
// would) on a queue of b.N jobs. Each claim scans the head of the queue,
// so the cost per op includes skipping what was claimed before it.
func BenchmarkClaimAndComplete(b *testing.B) {
	benchStores(b, func(b *testing.B, store kv.Store) {
		c := newBenchCoordinator(b, store)
		enqueueN(b, c, b.N)
		sess := newBenchSession(b, c)
		var conflicts, empty, done atomic.Int64
		b.SetParallelism(4) // 4 × GOMAXPROCS claimers
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				for {
					runs, st, err := c.Claim(ctx, sess, coordinator.DefaultQueue, 1, true)
					if err != nil {
						b.Error(err)
						return
					}
					conflicts.Add(int64(st.Conflicts))
					if len(runs) == 0 {
						empty.Add(1)
						if done.Load() >= int64(b.N) {
							return
						}
						continue
					}
					if err := runs[0].Complete(ctx, nil); err != nil {
						b.Error(err)
						return
					}
					done.Add(1)
					break
				}
			}
		})
		b.ReportMetric(float64(conflicts.Load())/float64(b.N), "conflicts/op")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	})
}

// BenchmarkFencedCheckpoint: one op is a Checkpoint of a running job (a
// transaction conditional on its ownership key), by concurrent runs, each
// checkpointing its own job.
func BenchmarkFencedCheckpoint(b *testing.B) {
	benchStores(b, func(b *testing.B, store kv.Store) {
		c := newBenchCoordinator(b, store)
		const parallel = 4
		procs := runtime.GOMAXPROCS(0)
		nruns := parallel * procs
		enqueueN(b, c, nruns)
		sess := newBenchSession(b, c)
		runs, _, err := c.Claim(context.Background(), sess, coordinator.DefaultQueue, nruns, false)
		if err != nil {
			b.Fatal(err)
		}
		if len(runs) != nruns {
			b.Fatalf("claimed %d runs, want %d", len(runs), nruns)
		}
		var next atomic.Int64
		data := json.RawMessage(`{"offset":123456,"note":"a checkpoint of realistic size"}`)
		b.SetParallelism(parallel)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			r := runs[int(next.Add(1)-1)%len(runs)]
			ctx := context.Background()
			for pb.Next() {
				if err := r.Checkpoint(ctx, data); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checkpoints/s")
	})
}

// BenchmarkReap: one op is the reap of the 2,000 running jobs of a daemon
// whose lease was revoked (as its death would end it): the pass that
// finds them, reads them, and moves them back to available. Failover
// time with many jobs is lease expiry plus this plus the claims after.
func BenchmarkReap(b *testing.B) {
	const jobs = 2000
	benchStores(b, func(b *testing.B, store kv.Store) {
		ctx := context.Background()
		var moved int
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			c := newBenchCoordinator(b, store)
			enqueueN(b, c, jobs)
			sess, err := c.NewSession(ctx, coordinator.SessionConfig{Worker: coordinator.WorkerInfo{ID: coordinator.NewWorkerID()}})
			if err != nil {
				b.Fatal(err)
			}
			for held := 0; held < jobs; {
				runs, _, err := c.Claim(ctx, sess, coordinator.DefaultQueue, jobs-held, false)
				if err != nil {
					b.Fatal(err)
				}
				held += len(runs)
			}
			if err := store.Revoke(ctx, sess.Lease()); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			n, err := c.Reap(ctx, nil, nil)
			if err != nil || n != jobs {
				b.Fatalf("reaped %d, %v; want %d", n, err, jobs)
			}
			moved += n
			b.StopTimer()
			_ = sess.Close(ctx)
			b.StartTimer()
		}
		b.ReportMetric(float64(moved)/b.Elapsed().Seconds(), "jobs/s")
	})
}
