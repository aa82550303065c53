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
	"time"

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

// stalledFinished holds every read of the finished index of namespace
// "stats" until its context ends, as a store that stalls.
type stalledFinished struct{ kv.Store }

func (s stalledFinished) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if strings.HasPrefix(r.Start, "/leasehold/stats/f/") {
		<-ctx.Done()
		return kv.RangeResult{}, ctx.Err()
	}
	return s.Store.Range(ctx, r)
}

// StopProbe ends the count that requests of GET /v1/stats share, which may
// outlive them while the store stalls, and waits for its goroutine; the
// request waiting for it, and those after, answer at once.
func TestStopProbeEndsTheSharedCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := testutil.QuietLogger(t)
		store := stalledFinished{testutil.TempLocal(t, log)}
		coord, err := coordinator.New(store, coordinator.Config{Namespace: "stats", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		h := New(Config{Coord: coord, Logger: log})
		var wg sync.WaitGroup
		codes := make(chan int, 2)
		for range 2 {
			wg.Go(func() {
				code, _ := testutil.APICall(t, h, "GET", "/v1/stats", "")
				codes <- code
			})
			synctest.Wait() // the first holds the count, the second waits for the next
		}
		t0 := time.Now() // the bubble's clock: it moves only when every goroutine waits
		if err := h.StopProbe(context.Background()); err != nil {
			t.Fatalf("StopProbe: %v", err)
		}
		wg.Wait()
		if d := time.Since(t0); d > 0 {
			t.Errorf("the requests answered %s after StopProbe (the store's deadline), want at once: the count went on", d)
		}
		close(codes)
		for code := range codes {
			if code != http.StatusServiceUnavailable {
				t.Errorf("a request of /v1/stats answered %d from a count StopProbe ended, want 503", code)
			}
		}
		t0 = time.Now()
		if code, body := testutil.APICall(t, h, "GET", "/v1/stats", ""); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "stopping") || time.Since(t0) > 0 {
			t.Errorf("GET /v1/stats after StopProbe: %d %s after %s, want a refusal at once", code, body, time.Since(t0))
		}
	})
}
