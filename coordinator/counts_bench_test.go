package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// pagedStore hides a store's Scan: the coordinator then reads in pages of
// Range, as it does on etcd before 3.7.
type pagedStore struct{ kv.Store }

// BenchmarkCountsFinished is Counts (every metrics scrape, /v1/stats, the
// dashboard) with 100,000 finished jobs kept, as a day's retention of a
// little over one job a second leaves: on etcd in one pass (RangeStream)
// and in pages of Range, which cost etcd a walk of its index to the end of
// the range each, and on Pebble.
//
//	go test -run '^$' -bench CountsFinished ./coordinator/
func BenchmarkCountsFinished(b *testing.B) {
	const finished = 100_000
	run := func(b *testing.B, store kv.Store) {
		c, err := New(store, Config{Namespace: "counts", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for b.Loop() {
			n, err := c.Counts(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			if n[StateCompleted] != finished {
				b.Fatalf("Counts: %d completed, want %d", n[StateCompleted], finished)
			}
		}
	}
	b.Run("localstore", func(b *testing.B) {
		s := tempLocalstore(b)
		putFinished(b, s, finished)
		run(b, s)
	})
	b.Run("etcd", func(b *testing.B) {
		s := tempEtcdStore(b)
		putFinished(b, s, finished)
		b.Run("scan", func(b *testing.B) { run(b, s) })
		b.Run("pages", func(b *testing.B) { run(b, pagedStore{s}) })
	})
}

// putFinished writes n completed jobs (records and finished-index entries)
// in namespace "counts", with ids from 0 on.
func putFinished(tb testing.TB, s kv.Store, n int) {
	putFinishedFrom(tb, s, 0, n)
}

// putFinishedFrom is putFinished of the ids from first on.
func putFinishedFrom(tb testing.TB, s kv.Store, first, n int) {
	tb.Helper()
	k := newKeys("counts")
	now := time.Now().UTC()
	for lo := first; lo < first+n; lo += 60 {
		var ops []kv.Op
		for i := lo; i < min(lo+60, first+n); i++ {
			j := &Job{ID: fmt.Sprintf("%026d", i), Kind: "k", Queue: DefaultQueue, State: StateCompleted,
				Payload: []byte(`{}`), Errors: []AttemptError{}, CreatedAt: now, ScheduledAt: now, FinalizedAt: &now}
			_, puts := k.put(j)
			ops = append(ops, puts...)
		}
		if _, err := s.Txn(context.Background(), kv.Txn{Then: ops}); err != nil {
			tb.Fatalf("write finished jobs: %v", err)
		}
	}
}
