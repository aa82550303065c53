package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// finishedReadStore counts the reads of namespace "counts"'s finished
// index. during, if set, runs in each such read before it is served (it
// may advance the clock, or hold the read). A read that begins while
// another is under way fails.
type finishedReadStore struct {
	kv.Store
	reads   atomic.Int64
	active  atomic.Int64
	during  func(ctx context.Context) error
	prefix  string
	overlap atomic.Bool
}

func newFinishedReadStore(s kv.Store) *finishedReadStore {
	return &finishedReadStore{Store: s, prefix: newKeys("counts").finished()}
}

func (s *finishedReadStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if r.Start < s.prefix || r.Start >= kv.PrefixEnd(s.prefix) {
		return s.Store.Range(ctx, r)
	}
	s.reads.Add(1)
	if s.active.Add(1) > 1 {
		s.overlap.Store(true)
		s.active.Add(-1)
		return kv.RangeResult{}, errors.New("test: a second read of the finished index while one is under way")
	}
	defer s.active.Add(-1)
	if s.during != nil {
		if err := s.during(ctx); err != nil {
			return kv.RangeResult{}, err
		}
	}
	return s.Store.Range(ctx, r)
}

// forEachStore runs test on a localstore and on an etcd member.
func forEachStore(t *testing.T, test func(t *testing.T, s kv.Store)) {
	t.Run("localstore", func(t *testing.T) { test(t, tempLocalstore(t)) })
	t.Run("etcd", func(t *testing.T) { test(t, tempEtcdStore(t)) })
}

func newCountsCoordinator(t *testing.T, s kv.Store) (*Coordinator, *modelClock) {
	t.Helper()
	clock := &modelClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	c, err := New(s, Config{Namespace: "counts", Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return c, clock
}

// recentCounts calls RecentCounts and checks the finished states' count
// time and the completed and available jobs.
func recentCounts(t *testing.T, c *Coordinator, wantAt time.Time, completed, available int) {
	t.Helper()
	n, at, err := c.RecentCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !at.Equal(wantAt) || n[StateCompleted] != completed || n[StateAvailable] != available {
		t.Fatalf("RecentCounts: counted at %v, %d completed, %d available; want %v, %d, %d",
			at, n[StateCompleted], n[StateAvailable], wantAt, completed, available)
	}
}

// Calls of RecentCounts within 1 s of a count that took no time read the
// finished index once; the unfinished states are read at every call; a
// call 1 s after the count counts the finished jobs again.
func TestRecentCountsReadFinishedOncePerInterval(t *testing.T) {
	forEachStore(t, func(t *testing.T, inner kv.Store) {
		putFinished(t, inner, 3)
		s := newFinishedReadStore(inner)
		c, clock := newCountsCoordinator(t, s)
		t0 := clock.Now()
		recentCounts(t, c, t0, 3, 0)
		putFinishedFrom(t, inner, 3, 2)
		if _, err := c.Enqueue(context.Background(), EnqueueParams{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		clock.advance(999 * time.Millisecond)
		recentCounts(t, c, t0, 3, 1)
		if n := s.reads.Load(); n != 1 {
			t.Fatalf("two calls within 1 s read the finished index %d times, want 1", n)
		}
		if n, err := c.Counts(context.Background()); err != nil || n[StateCompleted] != 5 {
			t.Fatalf("Counts: %v, %v; want 5 completed", n, err)
		}
		clock.advance(time.Millisecond)
		recentCounts(t, c, t0.Add(time.Second), 5, 1)
		if n := s.reads.Load(); n != 3 { // and the one of Counts
			t.Fatalf("the finished index was read %d times, want 3", n)
		}
	})
}

// A count that takes long is kept for 1,000 times as long as it took, and
// at most 60 s.
func TestRecentCountsKeptLongerWhenTheyTakeLonger(t *testing.T) {
	forEachStore(t, func(t *testing.T, inner kv.Store) {
		putFinished(t, inner, 3)
		s := newFinishedReadStore(inner)
		c, clock := newCountsCoordinator(t, s)
		took := 30 * time.Millisecond
		s.during = func(context.Context) error { clock.advance(took); return nil }
		t0 := clock.Now()
		recentCounts(t, c, t0, 3, 0)
		clock.advance(29*time.Second + 969*time.Millisecond) // 29.999 s after t0
		recentCounts(t, c, t0, 3, 0)
		if n := s.reads.Load(); n != 1 {
			t.Fatalf("a count that took 30 ms was made again within 30 s (%d reads)", n)
		}
		clock.advance(time.Millisecond)
		took = 2 * time.Second
		recentCounts(t, c, t0.Add(30*time.Second), 3, 0)
		clock.advance(57999 * time.Millisecond) // 59.999 s after that count began
		recentCounts(t, c, t0.Add(30*time.Second), 3, 0)
		if n := s.reads.Load(); n != 2 {
			t.Fatalf("%d reads, want 2: a count that took 2 s is kept for 60 s", n)
		}
		clock.advance(time.Millisecond)
		recentCounts(t, c, t0.Add(90*time.Second), 3, 0)
		if n := s.reads.Load(); n != 3 {
			t.Fatalf("%d reads, want 3: a count is made again 60 s after the last", n)
		}
	})
}

// Callers that arrive while the finished jobs are counted wait for that
// count and share it; if the counting caller gives up, one of them counts.
func TestRecentCountsShareOneRead(t *testing.T) {
	forEachStore(t, func(t *testing.T, inner kv.Store) {
		putFinished(t, inner, 3)
		s := newFinishedReadStore(inner)
		c, _ := newCountsCoordinator(t, s)
		entered, release := make(chan struct{}, 4), make(chan struct{})
		s.during = func(ctx context.Context) error {
			entered <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		joined := make(chan struct{}, 4)
		c.finished.joined = func() { joined <- struct{}{} }
		type result struct {
			completed int
			err       error
		}
		call := func(ctx context.Context) <-chan result {
			ch := make(chan result, 1)
			go func() {
				n, _, err := c.RecentCounts(ctx)
				ch <- result{n[StateCompleted], err}
			}()
			return ch
		}
		firstCtx, cancelFirst := context.WithCancel(context.Background())
		defer cancelFirst()
		first := call(firstCtx)
		<-entered
		var waiting []<-chan result
		for range 2 {
			r := call(context.Background())
			select {
			case <-joined:
			case got := <-r:
				t.Fatalf("a caller did not wait for the count under way: %+v", got)
			}
			waiting = append(waiting, r)
		}
		// The first caller gives up: one of the others counts, the
		// other shares that count.
		cancelFirst()
		if got := <-first; !errors.Is(got.err, context.Canceled) {
			t.Fatalf("the caller that gave up: %+v", got)
		}
		select {
		case <-entered:
		case got := <-waiting[0]:
			t.Fatalf("a waiting caller, once the counting one gave up: %+v; want it to count", got)
		}
		close(release)
		for _, r := range waiting {
			if got := <-r; got.err != nil || got.completed != 3 {
				t.Fatalf("a waiting caller: %+v, want 3 completed", got)
			}
		}
		if n := s.reads.Load(); n != 2 || s.overlap.Load() {
			t.Fatalf("%d reads of the finished index (overlapping: %v), want 2 one after the other", n, s.overlap.Load())
		}
	})
}

// A count whose read panics (recovered by its caller, as net/http does
// for a dashboard handler) does not leave the next callers waiting for it:
// the next call counts.
func TestRecentCountsAfterAPanickedCount(t *testing.T) {
	inner := tempLocalstore(t)
	putFinished(t, inner, 2)
	s := newFinishedReadStore(inner)
	c, clock := newCountsCoordinator(t, s)
	s.during = func(context.Context) error { panic("test: the store's read panics") }
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("RecentCounts did not panic with its read")
			}
		}()
		_, _, _ = c.RecentCounts(context.Background())
	}()
	s.during = nil
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, at, err := c.RecentCounts(ctx)
	if err != nil || n[StateCompleted] != 2 || !at.Equal(clock.Now()) {
		t.Fatalf("RecentCounts after a panicked count: %v, %v, %v; want 2 completed, counted now", n, at, err)
	}
}
