package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/testutil"
)

// gatedFinished holds every read of the finished index of namespace
// "stats" until gate is closed, and counts them.
type gatedFinished struct {
	kv.Store
	gate  chan struct{}
	reads atomic.Int64
}

func (s *gatedFinished) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if strings.HasPrefix(r.Start, "/leasehold/stats/f/") {
		s.reads.Add(1)
		<-s.gate
	}
	return s.Store.Range(ctx, r)
}

// GET /v1/stats, open to any reader, reads the whole finished index: the
// requests that come while one count is under way share the next count
// rather than each start its own, and each still counts the jobs
// finished before it was sent.
func TestStatsRequestsShareACount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Everything in the bubble: the store's goroutines and wait
		// groups belong to it.
		log := testutil.QuietLogger(t)
		store := &gatedFinished{Store: testutil.TempLocal(t, log), gate: make(chan struct{})}
		coord, err := coordinator.New(store, coordinator.Config{Namespace: "stats", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		r, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "echo"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := coord.Cancel(ctx, r.Job.ID); err != nil {
			t.Fatal(err)
		}
		h := New(Config{Coord: coord, Logger: log})
		const n = 50
		var wg sync.WaitGroup
		answers := make([]StatsResponse, n)
		call := func(i int) {
			wg.Go(func() {
				code, body := testutil.APICall(t, h, "GET", "/v1/stats", "")
				if code != http.StatusOK {
					t.Errorf("GET /v1/stats: %d %s", code, body)
				}
				_ = json.Unmarshal(body, &answers[i])
			})
		}
		call(0)
		synctest.Wait() // its count is under way, held at the finished index
		for i := 1; i < n; i++ {
			call(i)
		}
		synctest.Wait()
		close(store.gate)
		wg.Wait()
		if got := store.reads.Load(); got != 2 {
			t.Errorf("%d requests read the finished index %d times, want 2 (the first's count, then one that the others shared)", n, got)
		}
		for i, a := range answers {
			if a.Counts[coordinator.StateCancelled] != 1 || a.Total != 1 {
				t.Errorf("answer %d: %+v, want the cancelled job counted", i, a)
			}
		}
	})
}
