package localstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// next returns the next response of ch, failing after a time-out.
func next(t *testing.T, ch <-chan kv.WatchResponse) (kv.WatchResponse, bool) {
	t.Helper()
	select {
	case resp, ok := <-ch:
		return resp, ok
	case <-time.After(10 * time.Second):
		t.Fatalf("no watch response")
		return kv.WatchResponse{}, false
	}
}

func TestWatchBeforeOpenIsCompacted(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, Options{})
	first := mustPut(t, s, "a", "1", 0)
	mustPut(t, s, "a", "2", 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, _ := next(t, s.Watch(ctx, "", first))
	if !errors.Is(resp.Err, kv.ErrCompacted) || resp.CompactRevision != s.StartRevision() {
		t.Fatalf("watch from before open: %+v, want ErrCompacted at %d", resp, s.StartRevision())
	}
	// From just above the compact revision, it works.
	ch := s.Watch(ctx, "", resp.CompactRevision+1)
	rev := mustPut(t, s, "a", "3", 0)
	resp, _ = next(t, ch)
	if resp.Err != nil || len(resp.Events) != 1 || resp.Events[0].KV.ModRevision != rev {
		t.Fatalf("watch from the compact revision + 1: %+v", resp)
	}
}

func TestWatchHistoryRing(t *testing.T) {
	s := openTemp(t, Options{WatchHistory: 8})
	var revs []int64
	for i := range 20 {
		revs = append(revs, mustPut(t, s, fmt.Sprint("k", i), "v", 0))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, _ := next(t, s.Watch(ctx, "", revs[0]))
	if !errors.Is(resp.Err, kv.ErrCompacted) || resp.CompactRevision != revs[11] {
		t.Fatalf("watch from an evicted revision: %+v, want ErrCompacted at %d", resp, revs[11])
	}
	ch := s.Watch(ctx, "", revs[12])
	var got []int64
	for len(got) < 8 {
		resp, ok := next(t, ch)
		if !ok || resp.Err != nil {
			t.Fatalf("watch from the oldest held revision: %+v", resp)
		}
		for _, e := range resp.Events {
			got = append(got, e.KV.ModRevision)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(revs[12:]) {
		t.Fatalf("replayed %v, want %v", got, revs[12:])
	}
}

// TestWatchSlowReader: a watcher that does not read does not hold writers
// up; once the events it has not read leave the history, it ends with
// ErrCompacted after delivering, in order, what it could.
func TestWatchSlowReader(t *testing.T) {
	s := openTemp(t, Options{WatchHistory: 16, WatchBuffer: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := mustPut(t, s, "start", "", 0) + 1
	ch := s.Watch(ctx, "", start)
	done := make(chan error, 1)
	go func() {
		for i := range 200 {
			if _, err := s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put(fmt.Sprint(i), nil, 0)}}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("writers blocked by a watcher that does not read")
	}
	want := start
	for {
		resp, ok := next(t, ch)
		if !ok {
			t.Fatalf("watch closed without ErrCompacted")
		}
		if resp.Err != nil {
			if !errors.Is(resp.Err, kv.ErrCompacted) || resp.CompactRevision < want {
				t.Fatalf("slow watcher ended with %v at compact revision %d, next wanted %d", resp.Err, resp.CompactRevision, want)
			}
			if _, ok := next(t, ch); ok {
				t.Fatalf("response after the error")
			}
			return
		}
		for _, e := range resp.Events {
			if e.KV.ModRevision != want {
				t.Fatalf("event at revision %d, want %d: a gap", e.KV.ModRevision, want)
			}
			want++
		}
	}
}

// TestWatchRevisionNotSplit: a transaction larger than one response's
// share of events still arrives in one response.
func TestWatchRevisionNotSplit(t *testing.T) {
	s := openTemp(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = maxWatchEvents + 500
	var ops []kv.Op
	for i := range n {
		ops = append(ops, kv.Put(fmt.Sprintf("big/%05d", i), []byte("v"), 0))
	}
	r1 := mustPut(t, s, "small", "1", 0)
	r2 := mustTxn(t, s, kv.Txn{Then: ops}).Revision
	r3 := mustPut(t, s, "small", "2", 0)
	ch := s.Watch(ctx, "", r1)
	var sizes []int
	var got int
	for got < n+2 {
		resp, ok := next(t, ch)
		if !ok || resp.Err != nil {
			t.Fatalf("watch: %+v", resp)
		}
		revs := map[int64]int{}
		for _, e := range resp.Events {
			revs[e.KV.ModRevision]++
		}
		if c, ok := revs[r2]; ok && c != n {
			t.Fatalf("revision %d split: %d of %d events in one response", r2, c, n)
		}
		sizes = append(sizes, len(resp.Events))
		got += len(resp.Events)
	}
	if got != n+2 || r3 != r2+1 {
		t.Fatalf("got %d events in responses of %v", got, sizes)
	}
}

func TestWatchFutureRevision(t *testing.T) {
	s := openTemp(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	from := mustPut(t, s, "x", "", 0) + 3
	ch := s.Watch(ctx, "", from)
	for i := range 4 {
		mustPut(t, s, "x", fmt.Sprint(i), 0)
	}
	resp, _ := next(t, ch)
	if resp.Err != nil || resp.Events[0].KV.ModRevision != from {
		t.Fatalf("watch from a future revision: first event %+v, want revision %d", resp, from)
	}
}

func TestWatchAfterCloseFails(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	resp, ok := next(t, s.Watch(context.Background(), "", 0))
	if !ok || !errors.Is(resp.Err, kv.ErrClosed) {
		t.Fatalf("Watch on a closed store: %+v", resp)
	}
}

// TestWatchHistoryBytes: large values bound the history by its bytes, not
// only by its event count; the newest revision stays whole, and a watch
// from an evicted revision ends with ErrCompacted.
func TestWatchHistoryBytes(t *testing.T) {
	const max = 1 << 20
	s := openTemp(t, Options{WatchHistoryBytes: max})
	big := strings.Repeat("x", 300<<10)
	var revs []int64
	for i := range 10 {
		revs = append(revs, mustPut(t, s, fmt.Sprint("k", i), big, 0))
	}
	s.hist.mu.RLock()
	held, bytes := s.hist.n, s.hist.bytes
	s.hist.mu.RUnlock()
	if bytes > max || held != 3 {
		t.Fatalf("history holds %d events, %d bytes; want 3 within %d", held, bytes, max)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, _ := next(t, s.Watch(ctx, "", revs[0]))
	if !errors.Is(resp.Err, kv.ErrCompacted) || resp.CompactRevision != revs[6] {
		t.Fatalf("watch from an evicted revision: err %v compact %d, want ErrCompacted at %d", resp.Err, resp.CompactRevision, revs[6])
	}
	resp, _ = next(t, s.Watch(ctx, "", revs[7]))
	if resp.Err != nil || len(resp.Events) == 0 || resp.Events[0].KV.ModRevision != revs[7] {
		t.Fatalf("watch from the oldest held revision: err %v, %d events", resp.Err, len(resp.Events))
	}

	// One revision larger than the budget is kept whole, until the next.
	ops := make([]kv.Op, 5)
	for i := range ops {
		ops[i] = kv.Put(fmt.Sprint("batch", i), []byte(big), 0)
	}
	res, err := s.Txn(ctx, kv.Txn{Then: ops})
	if err != nil {
		t.Fatal(err)
	}
	resp, _ = next(t, s.Watch(ctx, "batch", res.Revision))
	if resp.Err != nil || len(resp.Events) != 5 {
		t.Fatalf("watch of the newest revision, over the budget alone: err %v, %d events; want 5", resp.Err, len(resp.Events))
	}
}
