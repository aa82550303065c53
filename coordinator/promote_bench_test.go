package coordinator_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/coordtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// passStore signals the end of each pass of RunMaintenance: its read of
// the next due time, which follows the pass.
type passStore struct {
	kv.Store
	timers string
	passes chan struct{}
}

func (s *passStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	res, err := s.Store.Range(ctx, r)
	if r.End == kv.PrefixEnd(s.timers) && r.Limit == 1 {
		s.passes <- struct{}{}
	}
	return res, err
}

// BenchmarkPromotionPass: a job enqueued with a delay, and the pass of
// the maintenance loop that its timer wakes, after n jobs were promoted
// (their timer entries deleted, and not yet compacted away: on etcd until
// the next compaction, in Pebble until its compactions reach them).
//
//	go test -run '^$' -bench PromotionPass ./coordinator/
func BenchmarkPromotionPass(b *testing.B) {
	for _, n := range []int{0, 20000, 100000} {
		b.Run(fmt.Sprintf("promoted=%d", n), func(b *testing.B) {
			benchStores(b, func(b *testing.B, store kv.Store) {
				ns := fmt.Sprintf("promote-%d-%d", n, benchNS.Add(1))
				ps := &passStore{Store: store, timers: "/leasehold/" + ns + "/t/", passes: make(chan struct{}, 1)}
				t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
				clk := coordtest.NewClock(t0)
				c, err := coordinator.New(ps, coordinator.Config{Namespace: ns, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				for done := 0; done < n; {
					k := min(n-done, 1000)
					batch := make([]coordinator.EnqueueParams, k)
					for i := range batch {
						batch[i] = coordinator.EnqueueParams{Kind: "k", ScheduledAt: t0.Add(time.Minute + time.Duration(done+i)*time.Microsecond)}
					}
					if _, err := c.EnqueueBatch(ctx, batch); err != nil {
						b.Fatal(err)
					}
					done += k
				}
				clk.Advance(2 * time.Minute)
				loop := make(chan error, 1)
				go func() { loop <- c.RunMaintenance(ctx, coordinator.MaintainConfig{MaxWait: time.Hour}) }()
				defer func() {
					cancel()
					go func() {
						for range ps.passes {
						}
					}()
					<-loop
					close(ps.passes)
				}()
				<-ps.passes // the first pass promoted the n jobs
				b.ResetTimer()
				for i := range b.N {
					if _, err := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k", ScheduledAt: clk.Now().Add(time.Hour + time.Duration(i)*time.Microsecond)}); err != nil {
						b.Fatal(err)
					}
					<-ps.passes
				}
			})
		})
	}
}
