package localstore

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// TestWatchWakesOnlyItsPrefix: a write wakes the watches whose prefix it
// concerns, not every idle watch. A worker serving a thousand queues holds
// a watch on each; waking all of them for every write made each job cost a
// thousand goroutine wake-ups.
func TestWatchWakesOnlyItsPrefix(t *testing.T) {
	s := openTemp(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const others, writes = 200, 50
	for i := range others {
		s.Watch(ctx, fmt.Sprintf("a/%d/", i), 0)
	}
	ch := s.Watch(ctx, "b/", 0)
	for i := range writes {
		rev := mustPut(t, s, "b/"+strconv.Itoa(i), "v", 0)
		for got := int64(0); got < rev; {
			resp, ok := next(t, ch)
			if !ok || resp.Err != nil {
				t.Fatalf("watch of b/: %+v", resp)
			}
			got = resp.Events[len(resp.Events)-1].KV.ModRevision
		}
	}
	// The watch of b/ woke about once per write; the others, which no
	// write concerned, not at all (each woke for each write before:
	// 9,716 here). A watch whose registration finds the watermark moved
	// since it read it counts a wake-up too (a watch still starting when
	// the first writes land): hence the slack.
	if n := s.watchWakes.Load(); n > 2*writes {
		t.Fatalf("%d wake-ups of watches for %d writes under one watch's prefix, beside %d idle watches of other prefixes: want at most %d", n, writes, others, 2*writes)
	}
}

// TestWatchWakesNestedPrefixes: every watch whose prefix an event's key
// has receives it, however the prefixes nest, and no other.
func TestWatchWakesNestedPrefixes(t *testing.T) {
	s := openTemp(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prefixes := []string{"", "a", "a/", "a/b/", "ab", "c/"}
	chs := map[string]<-chan kv.WatchResponse{}
	for _, p := range prefixes {
		chs[p] = s.Watch(ctx, p, 0)
	}
	keys := []string{"a/b/x", "abz", "c/1", "a/c", "zz"}
	for _, k := range keys {
		mustPut(t, s, k, "v", 0)
	}
	mustPut(t, s, "end", "v", 0) // after every key: "" sees it last
	for _, p := range prefixes {
		var want []string
		for _, k := range keys {
			if len(k) >= len(p) && k[:len(p)] == p {
				want = append(want, k)
			}
		}
		if p == "" {
			want = append(want, "end")
		}
		var got []string
		for len(got) < len(want) {
			resp, ok := next(t, chs[p])
			if !ok || resp.Err != nil {
				t.Fatalf("watch of %q: %+v", p, resp)
			}
			for _, ev := range resp.Events {
				got = append(got, ev.KV.Key)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("watch of %q: got %v, want %v", p, got, want)
		}
	}
}

// BenchmarkTxnBesideIdleWatches: synced transactions beside idle watches
// of other prefixes (a worker's watch of each queue it serves). Each write
// woke every watch: the CPU time of a write grew with their number.
func BenchmarkTxnBesideIdleWatches(b *testing.B) {
	for _, watches := range []int{1, 1000} {
		b.Run("watches="+strconv.Itoa(watches), func(b *testing.B) {
			s := openTemp(b, Options{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for i := range watches {
				s.Watch(ctx, fmt.Sprintf("q/%d/", i), 0)
			}
			value := make([]byte, 256)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := range b.N {
				if _, err := s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("job/"+strconv.Itoa(i), value, 0)}}); err != nil {
					b.Fatal(err)
				}
			}
			// The wake-ups run beside the writer, on other cores: what they
			// cost shows in CPU time, not in the writer's wall time.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
