package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
)

// BenchmarkDrain: one op drains a queue of N no-op jobs through a worker
// with 64 slots on a fresh Pebble directory, from Start until every job's
// outcome is recorded. The two sizes show how the cost per job grows with
// the length of the queue already drained.
//
//	go test -run '^$' -bench Drain ./worker/
func BenchmarkDrain(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) { benchDrain(b, n) })
	}
}

func benchDrain(b *testing.B, n int) {
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		s, err := localstore.Open(b.TempDir(), localstore.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		c, err := coordinator.New(s, coordinator.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < n; i += 1000 {
			ps := make([]coordinator.EnqueueParams, min(1000, n-i))
			for k := range ps {
				ps[k] = coordinator.EnqueueParams{Kind: "noop", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i+k))}
			}
			if _, err := c.EnqueueBatch(context.Background(), ps); err != nil {
				b.Fatal(err)
			}
		}
		w, err := worker.New(c, worker.Config{Concurrency: 64})
		if err != nil {
			b.Fatal(err)
		}
		var started atomic.Int64
		all := make(chan struct{})
		w.Handle("noop", func(context.Context, *worker.Job) error {
			if started.Add(1) == int64(n) {
				close(all)
			}
			return nil
		})
		b.StartTimer()
		t0 := time.Now()
		if err := w.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		<-all
		// Running drops for a job only once its outcome is written.
		for w.Running() > 0 {
			time.Sleep(100 * time.Microsecond)
		}
		elapsed += time.Since(t0)
		b.StopTimer()
		if err := w.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
		counts, err := c.Counts(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if counts[coordinator.StateCompleted] != n {
			b.Fatalf("completed %d of %d jobs: %v", counts[coordinator.StateCompleted], n, counts)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/(float64(n)*float64(b.N)), "ns/job")
}
