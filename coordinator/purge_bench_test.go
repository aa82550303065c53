package coordinator_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/coordtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// gapStore times the promotion passes of RunMaintenance (their reads of
// the timer index) and signals its first read of the next due time, which
// comes once the purge under way has ended.
type gapStore struct {
	kv.Store
	timers string
	slept  chan struct{}

	mu     sync.Mutex
	last   time.Time
	maxGap time.Duration
}

func (s *gapStore) pass(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.IsZero() {
		s.maxGap = max(s.maxGap, now.Sub(s.last))
	}
	s.last = now
}

func (s *gapStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if strings.HasPrefix(r.Start, s.timers) && r.End != "" {
		s.pass(time.Now())
		if r.End == kv.PrefixEnd(s.timers) && r.Limit == 1 {
			select {
			case s.slept <- struct{}{}:
			default:
			}
		}
	}
	return s.Store.Range(ctx, r)
}

// BenchmarkPurgeBacklog: the maintenance loop's purge of n finished jobs
// past retention (a lowered --retention, a daemon down for days). It
// reports the purge's whole time (purge-ms) and the longest wait between
// two promotion passes meanwhile (max-pass-gap-ms): how late a job that
// fell due during the purge could be promoted.
//
//	go test -run '^$' -bench PurgeBacklog -benchtime 1x ./coordinator/
func BenchmarkPurgeBacklog(b *testing.B) {
	for _, n := range []int{20000, 100000} {
		b.Run(fmt.Sprintf("finished=%d", n), func(b *testing.B) {
			benchStores(b, func(b *testing.B, store kv.Store) {
				for range b.N {
					benchPurgeBacklog(b, store, n)
				}
			})
		})
	}
}

func benchPurgeBacklog(b *testing.B, store kv.Store, n int) {
	b.StopTimer()
	ns := fmt.Sprintf("purge-%d-%d", n, benchNS.Add(1))
	gs := &gapStore{Store: store, timers: "/leasehold/" + ns + "/t/", slept: make(chan struct{}, 1)}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := coordtest.NewClock(t0)
	c, err := coordinator.New(gs, coordinator.Config{Namespace: ns, Clock: clk, Retention: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for done := 0; done < n; {
		k := min(n-done, 1000)
		batch := make([]coordinator.EnqueueParams, k)
		for i := range batch {
			batch[i] = coordinator.EnqueueParams{Kind: "old"}
		}
		if _, err := c.EnqueueBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
		done += k
	}
	if _, err := c.CancelMany(ctx, coordinator.CancelFilter{Kind: "old"}); err != nil {
		b.Fatal(err)
	}
	clk.Advance(2 * time.Hour)
	loop := make(chan error, 1)
	b.StartTimer()
	start := time.Now()
	go func() { loop <- c.RunMaintenance(ctx, coordinator.MaintainConfig{MaxWait: time.Hour}) }()
	<-gs.slept // the purge ended
	took := time.Since(start)
	b.StopTimer()
	cancel()
	<-loop
	if counts, err := c.Counts(context.Background()); err != nil || counts[coordinator.StateCancelled] != 0 {
		b.Fatalf("after the purge: %v, %v; want no cancelled job left", counts, err)
	}
	b.ReportMetric(float64(took.Milliseconds()), "purge-ms")
	b.ReportMetric(float64(gs.maxGap.Milliseconds()), "max-pass-gap-ms")
}
