package coordinator_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/coordtest"
	"github.com/leasehold/leasehold/localstore"
)

// A purge of many finished jobs that still hold their unique keys is
// split into transactions that the store takes: each job's delete carries
// the nested transaction that frees its key, whose compare and delete the
// store counts. Sized as if that nested transaction were an empty op, on
// Pebble (a byte limit, no op limit) each chunk came out about twice what
// the store takes, every pass was refused as too large, and the finished
// jobs and their keys were never deleted.
func TestPurgeChunksFitTheStore(t *testing.T) {
	const limit = 256 << 10
	s, err := localstore.Open(t.TempDir(), localstore.Options{Logger: slog.New(slog.DiscardHandler), MaxTxnBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	clock := coordtest.NewClock(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	c, err := coordinator.New(s, coordinator.Config{Clock: clock, Retention: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Well over one transaction's worth of purges with their keys.
	const n = 600
	key := strings.Repeat("k", 240)
	for i := 0; i < n; i += 100 {
		ps := make([]coordinator.EnqueueParams, 100)
		for k := range ps {
			ps[k] = coordinator.EnqueueParams{Kind: "k", UniqueKey: fmt.Sprintf("%s-%d", key, i+k),
				Unique: &coordinator.UniqueOpts{ByState: []coordinator.State{coordinator.StateCancelled}}}
		}
		if _, err := c.EnqueueBatch(ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := c.CancelMany(ctx, coordinator.CancelFilter{}); err != nil || res.Cancelled != n {
		t.Fatalf("cancel all: %+v, %v; want %d cancelled", res, err, n)
	}
	clock.Advance(2 * time.Hour)
	purged, err := c.PurgeFinished(ctx)
	if err != nil {
		t.Fatalf("purge of %d finished jobs holding their unique keys, over one %d-byte request: %v", n, limit, err)
	}
	if purged != n {
		t.Fatalf("purged %d jobs, want %d", purged, n)
	}
	// Their keys are free: each may be taken by a new job.
	res, err := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k", UniqueKey: key + "-0"})
	if err != nil || res.Existed {
		t.Fatalf("enqueue with a purged job's key: existed %v, %v; want a new job", res.Existed, err)
	}
}
