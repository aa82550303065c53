//go:build unix

package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/localstore"
)

// offsetClock is the wall clock moved on by the benchmark: a count takes
// its real time, and the scrapes are 15 s apart.
type offsetClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *offsetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *offsetClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func (c *offsetClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// BenchmarkScrapeFinished is the scrape of the job gauges every 15 s with
// 200,000 finished jobs kept (their index entries: what the counts read),
// on Pebble and on an etcd member in the process. cpu-ms/scrape is the
// process's CPU (the etcd member's included) per scrape.
//
//	go test -run '^$' -bench ScrapeFinished -benchtime 20x ./metrics/
func BenchmarkScrapeFinished(b *testing.B) {
	const finished = 200_000
	run := func(b *testing.B, store kv.Store) {
		const ns = "scrapes"
		ctx := context.Background()
		now := time.Now()
		for lo := 0; lo < finished; lo += 100 {
			var ops []kv.Op
			for i := lo; i < min(lo+100, finished); i++ {
				key := fmt.Sprintf("/leasehold/%s/f/%020d/%026d", ns, now.UnixNano(), i)
				ops = append(ops, kv.Put(key, []byte(coordinator.StateCompleted), 0))
			}
			if _, err := store.Txn(ctx, kv.Txn{Then: ops}); err != nil {
				b.Fatal(err)
			}
		}
		clock := &offsetClock{}
		c, err := coordinator.New(store, coordinator.Config{Namespace: ns, Clock: clock, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		m, reg := newTest()
		m.RegisterJobs(c, slog.New(slog.DiscardHandler))
		var before syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		b.ResetTimer()
		for b.Loop() {
			mfs, err := reg.Gather()
			if err != nil || len(mfs) == 0 {
				b.Fatalf("gather: %d families, %v", len(mfs), err)
			}
			clock.advance(15 * time.Second)
		}
		b.StopTimer()
		var after syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		cpu := time.Duration(syscall.TimevalToNsec(after.Utime) + syscall.TimevalToNsec(after.Stime) -
			syscall.TimevalToNsec(before.Utime) - syscall.TimevalToNsec(before.Stime))
		b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/scrape")
	}
	b.Run("localstore", func(b *testing.B) {
		s, err := localstore.Open(b.TempDir(), localstore.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s)
	})
	b.Run("etcd", func(b *testing.B) {
		srv := etcdtest.Start(b)
		s := etcdkv.New(srv.Client(b), etcdkv.Options{})
		defer s.Close()
		run(b, s)
	})
}
