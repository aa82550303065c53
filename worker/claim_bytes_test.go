package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/worker"
)

// TestLargeJobsClaimedWithinTheByteBound: claims of jobs whose records are
// large take fewer than the free slots (coordinator.Config.MaxClaimBytes),
// and the claim loop follows such a claim with another while jobs remain,
// without waiting for a poll (there is none within the test), until every
// job ran.
func TestLargeJobsClaimedWithinTheByteBound(t *testing.T) {
	const (
		jobs   = 40
		budget = 35_000 // three jobs of 10,000-byte payloads, not four
		fit    = 3
	)
	e := newEnv(t, nil)
	c, err := coordinator.New(e.store, coordinator.Config{Logger: slog.New(slog.DiscardHandler), MaxClaimBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	ps := make([]coordinator.EnqueueParams, jobs)
	for i := range ps {
		ps[i] = coordinator.EnqueueParams{Kind: "big", Payload: json.RawMessage(`"` + strings.Repeat("x", 9_998) + `"`)}
	}
	if _, err := c.EnqueueBatch(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	var ran, most atomic.Int64
	all := make(chan struct{})
	e.worker(worker.Config{
		Concurrency:  16,
		PollInterval: time.Hour, // only the watches wake the claim loop
		OnClaim: func(_ string, n int, _ coordinator.ClaimStats) {
			for m := most.Load(); int64(n) > m && !most.CompareAndSwap(m, int64(n)); m = most.Load() {
			}
		},
	}, map[string]worker.Handler{"big": func(context.Context, *worker.Job) error {
		if ran.Add(1) == jobs {
			close(all)
		}
		return nil
	}})
	select {
	case <-all:
	case <-time.After(20 * time.Second):
		t.Fatalf("%d of %d jobs ran: the claim loop stopped claiming while jobs remained", ran.Load(), jobs)
	}
	if m := most.Load(); m > fit {
		t.Fatalf("a claim took %d jobs of 10,000-byte payloads: over the %d-byte bound (%d fit)", m, budget, fit)
	}
}
