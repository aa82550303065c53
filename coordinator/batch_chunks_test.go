package coordinator_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/localstore"
)

// A batch of small jobs larger than one request of the store is split
// into transactions that the store takes: each job goes as one nested
// transaction, whose encoding the store counts too. On Pebble, which
// limits a transaction's bytes but not its ops, chunks sized without it
// were refused as too large (a batch of 100,000 small jobs at the default
// 64 MiB), while the batch's last, smaller chunk was written. (etcd's
// --max-txn-ops keeps its chunks far below its byte limit.)
func TestBatchChunksFitTheStore(t *testing.T) {
	const limit = 1 << 20
	s, err := localstore.Open(t.TempDir(), localstore.Options{Logger: slog.New(slog.DiscardHandler), MaxTxnBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c, err := coordinator.New(s, coordinator.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// About 700 bytes each as sent: three transactions' worth.
	ps := make([]coordinator.EnqueueParams, 4000)
	for i := range ps {
		ps[i] = coordinator.EnqueueParams{Kind: "k"}
	}
	res, err := c.EnqueueBatch(ctx, ps)
	if err != nil {
		t.Fatalf("enqueue of %d small jobs in a batch over one %d-byte request: %v", len(ps), limit, err)
	}
	if len(res) != len(ps) {
		t.Fatalf("%d results for %d jobs", len(res), len(ps))
	}
	counts, err := c.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts[coordinator.StateAvailable] != len(ps) {
		t.Fatalf("jobs available: %d, want %d", counts[coordinator.StateAvailable], len(ps))
	}
}
