package coordtest

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
)

var watchLoopReviewTests = []suiteTest{
	{"WatchLoopsBackOffWhenWatchesEndAtOnce", testWatchLoopsBackOff},
	{"WatchLoopsResumeAtOnceAfterNormalEnd", testWatchLoopsResumeAtOnce},
	{"MaintenancePromotesDuringWatchPause", testMaintenancePromotesDuringWatchPause},
	{"ElectionCandidatePausesStartOverAfterLeading", testCandidatePausesStartOver},
	{"ClaimsFindJobsWhileAvailableWatchIsDown", testClaimsWhileWatchDown},
}

// watchLoop is one loop that reads, watches from the read's revision, and
// reads again when its watch ends.
type watchLoop struct {
	name string
	// start runs the loop over c until ctx ends.
	start func(h *harness, ctx context.Context, c *coordinator.Coordinator) error
	// ignore is the duration of the loop's own timers that are not
	// pauses between watches (the reaper's scan interval).
	ignore time.Duration
	// poke makes a change that the loop's watch sees.
	poke func(t *testing.T, h *harness)
	// busy has each read of the loop come after a write it does not
	// watch, as in a store in use: the store's revision moves on between
	// its reads.
	busy bool
}

const watchLoopInterval = time.Hour

func watchLoops() []watchLoop {
	const election = "wl"
	electionKey := func(h *harness) string { return h.keysRoot() + "e/" + election }
	// A key of another election that election "wl" prefixes: its watch
	// sees it.
	pokeElection := func(t *testing.T, h *harness) {
		if _, err := h.store.Txn(h.ctx(), kv.Txn{Then: []kv.Op{kv.Put(electionKey(h)+"-other", []byte("x"), 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	runElected := func(h *harness, ctx context.Context, c *coordinator.Coordinator, started *atomic.Int32) error {
		s := h.session(h.c) // its heartbeat is not one of the loop's calls
		return c.RunElected(ctx, election, func() *coordinator.Session { return s }, func(ctx context.Context) error {
			started.Add(1)
			<-ctx.Done()
			return nil
		})
	}
	var leaderStarts atomic.Int32
	var waited atomic.Value // the id of the job the Wait loop waits for
	return []watchLoop{
		{name: "Wait", start: func(h *harness, ctx context.Context, c *coordinator.Coordinator) error {
			r, err := h.c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k"})
			if err != nil {
				return err
			}
			waited.Store(r.Job.ID)
			_, err = c.Wait(ctx, r.Job.ID)
			return err
		}, poke: func(t *testing.T, h *harness) {
			// The record written again as it is: an event, not final.
			key := h.keysRoot() + "j/" + waited.Load().(string)
			rr, err := h.store.Range(h.ctx(), kv.RangeRequest{Start: key})
			if err != nil || len(rr.KVs) != 1 {
				t.Fatalf("read %s: %v", key, err)
			}
			if _, err := h.store.Txn(h.ctx(), kv.Txn{Then: []kv.Op{kv.Put(key, rr.KVs[0].Value, 0)}}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "RunMaintenance", start: func(h *harness, ctx context.Context, c *coordinator.Coordinator) error {
			return c.RunMaintenance(ctx, coordinator.MaintainConfig{MaxWait: watchLoopInterval, PurgeEvery: watchLoopInterval})
		}, ignore: watchLoopInterval, poke: func(t *testing.T, h *harness) {
			// A timer entry, due long after the loop's own timer.
			h.enqueue(coordinator.EnqueueParams{Kind: "k", ScheduledAt: h.clock.Now().Add(10 * watchLoopInterval)})
		}},
		{name: "WatchAvailable", start: func(h *harness, ctx context.Context, c *coordinator.Coordinator) error {
			return c.WatchAvailable(ctx, coordinator.DefaultQueue, func() {})
		}, poke: func(t *testing.T, h *harness) { h.enqueue(coordinator.EnqueueParams{Kind: "k"}) }},
		{name: "WatchQueues", start: func(h *harness, ctx context.Context, c *coordinator.Coordinator) error {
			return c.WatchQueues(ctx, func() {})
		}, poke: func(t *testing.T, h *harness) {
			if _, _, err := h.c.SetQueueLimit(h.ctx(), "wl", 1); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "RunReaper", start: func(h *harness, ctx context.Context, c *coordinator.Coordinator) error {
			return c.RunReaper(ctx, nil, watchLoopInterval, nil)
		}, ignore: watchLoopInterval, poke: func(t *testing.T, h *harness) { h.session(h.c) }},
		{name: "ElectionCandidate", start: func(h *harness, ctx context.Context, c *coordinator.Coordinator) error {
			// Another daemon leads: the candidate watches its key.
			if _, err := h.store.Txn(h.ctx(), kv.Txn{Then: []kv.Op{kv.Put(electionKey(h), []byte("other"), 0)}}); err != nil {
				return err
			}
			var started atomic.Int32
			return runElected(h, ctx, c, &started)
		}, poke: pokeElection},
		{name: "ElectionLeader", start: func(h *harness, ctx context.Context, c *coordinator.Coordinator) error {
			leaderStarts.Store(0)
			err := runElected(h, ctx, c, &leaderStarts)
			if n := leaderStarts.Load(); n != 1 {
				h.t.Errorf("the leader's work started %d times; want once: a watch that ended must not end the leadership while the key is still ours", n)
			}
			return err
		}, poke: pokeElection, busy: true},
	}
}

var errWatchRefused = errors.New("etcdserver: no leader")

// loopEvent is one call of a watch loop: a read ("read"), a watch
// ("watch"), or a timer ("after", for d).
type loopEvent struct {
	kind string
	d    time.Duration
}

// loopLog hands the calls of a watch loop to the test one at a time: the
// loop waits in each call until the test has taken it, so the test sees
// them in order and the loop cannot run ahead of it.
type loopLog struct {
	events chan loopEvent
	done   chan struct{}
	warns  atomic.Int32 // records the loop logged at warning level or above
}

// Handle counts the loop's warnings; it is the loop's slog handler.
func (l *loopLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		l.warns.Add(1)
	}
	return nil
}
func (l *loopLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *loopLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *loopLog) WithGroup(string) slog.Handler            { return l }

func newLoopLog() *loopLog {
	return &loopLog{events: make(chan loopEvent), done: make(chan struct{})}
}

func (l *loopLog) note(e loopEvent) {
	select {
	case l.events <- e:
	case <-l.done:
	}
}

// next returns the next call of the loop, skipping its timers of
// duration ignore.
func (l *loopLog) next(t *testing.T, ignore time.Duration) loopEvent {
	t.Helper()
	for {
		select {
		case e := <-l.events:
			if e.kind == "after" && ignore != 0 && e.d == ignore {
				continue
			}
			return e
		case <-time.After(failBound):
			t.Fatal("the watch loop made no further call")
			return loopEvent{}
		}
	}
}

// untilWatchPoking is untilWatch, calling poke at once and again every
// 20 ms meanwhile: for a watch that may begin only after its call was
// noted, and miss a change made before.
func (l *loopLog) untilWatchPoking(t *testing.T, ignore time.Duration, why string, poke func()) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(failBound)
	for poke(); ; {
		select {
		case e := <-l.events:
			switch {
			case e.kind == "watch":
				return
			case e.kind == "after" && (ignore == 0 || e.d != ignore):
				t.Fatalf("the loop paused %s before watching again: %s", e.d, why)
			}
		case <-tick.C:
			poke()
		case <-deadline:
			t.Fatal("the watch loop made no further call")
		}
	}
}

// untilPause reads the loop's calls until it waits on the clock, and
// returns how many reads and watches it made first and how long it waits.
func (l *loopLog) untilPause(t *testing.T, ignore time.Duration) (reads, watches int, pause time.Duration) {
	t.Helper()
	for {
		switch e := l.next(t, ignore); e.kind {
		case "read":
			reads++
		case "watch":
			watches++
			if watches > 10 {
				t.Fatalf("%d reads and %d watches, each watch ending at once, with the clock stopped: the loop spins", reads, watches)
			}
		case "after":
			return reads, watches, e.d
		}
	}
}

// untilWatch reads the loop's calls until its next watch; it fails if the
// loop waits on the clock first.
func (l *loopLog) untilWatch(t *testing.T, ignore time.Duration, why string) {
	t.Helper()
	for {
		switch e := l.next(t, ignore); e.kind {
		case "watch":
			return
		case "after":
			t.Fatalf("the loop paused %s before watching again: %s", e.d, why)
		}
	}
}

// loopClock is a Clock that notes each timer it hands out.
type loopClock struct {
	*Clock
	log *loopLog
}

func (c *loopClock) After(d time.Duration) <-chan time.Time {
	ch := c.Clock.After(d)
	c.log.note(loopEvent{kind: "after", d: d})
	return ch
}

// Modes of endingStore's watches.
const (
	watchEndAtOnce = iota // ends at once, as a refused watch does
	watchOnce             // real, ended after its first events or on cut; then watchReal
	watchReal
)

// endingStore notes the reads and watches of a watch loop; its watches end
// at once (with an error when withErr, else by closing) until told
// otherwise.
type endingStore struct {
	kv.Store
	log     *loopLog
	withErr bool
	busy    string // if set, a key written before each read
	mode    atomic.Int32
	cut     chan struct{}
}

func (s *endingStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	s.log.note(loopEvent{kind: "read"})
	if s.busy != "" {
		if _, err := s.Store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put(s.busy, []byte("x"), 0)}}); err != nil {
			return kv.RangeResult{}, err
		}
	}
	return s.Store.Range(ctx, r)
}

// Txn notes campaigns and resignations of an election as reads.
func (s *endingStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	s.log.note(loopEvent{kind: "read"})
	return s.Store.Txn(ctx, t)
}

func (s *endingStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	s.log.note(loopEvent{kind: "watch"})
	switch s.mode.Load() {
	case watchEndAtOnce:
		ch := make(chan kv.WatchResponse, 1)
		if s.withErr {
			ch <- kv.WatchResponse{Err: errWatchRefused}
		}
		close(ch)
		return ch
	case watchReal:
		return s.Store.Watch(ctx, prefix, fromRev)
	}
	s.mode.Store(watchReal)
	wctx, cancel := context.WithCancel(ctx)
	in := s.Store.Watch(wctx, prefix, fromRev)
	out := make(chan kv.WatchResponse)
	go func() {
		defer close(out)
		defer func() {
			cancel()
			for range in { // until the store closes it
			}
		}()
		send := func(r kv.WatchResponse) bool {
			select {
			case out <- r:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			select {
			case r, ok := <-in:
				if !ok || !send(r) {
					return
				}
				if len(r.Events) == 0 {
					continue
				}
			case <-s.cut:
			case <-ctx.Done():
				return
			}
			if s.withErr {
				send(kv.WatchResponse{Err: errWatchRefused})
			}
			return
		}
	}()
	return out
}

// startWatchLoop runs loop over an endingStore and a loopClock until the
// test ends.
func startWatchLoop(t *testing.T, h *harness, loop watchLoop, withErr bool) (*endingStore, *loopClock) {
	log := newLoopLog()
	clock := &loopClock{Clock: NewClock(h.clock.Now()), log: log}
	store := &endingStore{Store: h.store, log: log, withErr: withErr, cut: make(chan struct{})}
	if loop.busy {
		store.busy = h.keysRoot() + "busy"
	}
	c, err := coordinator.New(store, coordinator.Config{Namespace: h.ns, Clock: clock, Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.start(h, ctx, c) }()
	t.Cleanup(func() {
		close(log.done)
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v", loop.name, err)
		}
	})
	return store, clock
}

// testWatchLoopsBackOff: a loop whose watches end at once every time (a
// store refusing them, a "no leader" error while reads still succeed)
// must not read and watch again as fast as the store answers: the first
// retry is at once (a compaction), the next ones wait 100 ms, doubling,
// on the coordinator's clock; each pause lets exactly one retry through.
func testWatchLoopsBackOff(t *testing.T, h *harness) {
	for _, loop := range watchLoops() {
		for _, withErr := range []bool{true, false} {
			name := loop.name + "/closed"
			if withErr {
				name = loop.name + "/error"
			}
			t.Run(name, func(t *testing.T) {
				h := &harness{t: t, store: h.store, ns: h.ns + "-" + loop.name + map[bool]string{true: "e", false: "c"}[withErr], clock: h.clock}
				h.c = h.coordinator(h.store, coordinator.Config{})
				_, clock := startWatchLoop(t, h, loop, withErr)
				reads, watches, pause := clock.log.untilPause(t, loop.ignore)
				if watches != 2 || pause != 100*time.Millisecond {
					t.Fatalf("before the first pause: %d reads, %d watches, then a pause of %s; want 2 watches (the first retry at once), then 100ms", reads, watches, pause)
				}
				for _, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond} {
					clock.Advance(pause)
					var r, w int
					r, w, pause = clock.log.untilPause(t, loop.ignore)
					if w != 1 || r == 0 || pause != want {
						t.Fatalf("after the clock passed the pause: %d reads, %d watches, then a pause of %s; want a read, one watch, then %s", r, w, pause, want)
					}
				}
				// Logged before each pause is taken: every pause so far.
				if n := clock.log.warns.Load(); n != 1 {
					t.Errorf("%d warnings over three pauses; want one for the run of quick ends", n)
				}
			})
		}
	}
}

// testWatchLoopsResumeAtOnce: after such pauses, a watch that delivered
// events, or that lasted a while, is set up again at once when it ends,
// and the pauses start over.
func testWatchLoopsResumeAtOnce(t *testing.T, h *harness) {
	for _, loop := range watchLoops() {
		for _, byEvents := range []bool{true, false} {
			name := loop.name + "/lasted"
			if byEvents {
				name = loop.name + "/events"
			}
			t.Run(name, func(t *testing.T) {
				h := &harness{t: t, store: h.store, ns: h.ns + "-" + loop.name + map[bool]string{true: "v", false: "l"}[byEvents], clock: h.clock}
				h.c = h.coordinator(h.store, coordinator.Config{})
				store, clock := startWatchLoop(t, h, loop, byEvents)
				if _, _, pause := clock.log.untilPause(t, loop.ignore); pause != 100*time.Millisecond {
					t.Fatalf("first pause %s, want 100ms", pause)
				}
				store.mode.Store(watchOnce)
				clock.Advance(100 * time.Millisecond)
				clock.log.untilWatch(t, loop.ignore, "it was paused for already")
				// The real watch is set up; it ends after a change, or
				// once it lasted a second.
				const why = "the watch before ended normally"
				if byEvents {
					// A watch from "now" (the maintenance loop's) begins
					// only once the store has set it up, after its call
					// was noted: a change made before that is not in it.
					// Change until the loop watches again.
					clock.log.untilWatchPoking(t, loop.ignore, why, func() { loop.poke(t, h) })
					return
				}
				clock.Advance(time.Second)
				close(store.cut)
				clock.log.untilWatch(t, loop.ignore, why)
			})
		}
	}
}

// testMaintenancePromotesDuringWatchPause: while maintenance pauses before
// watching the timers again, a job that comes due is promoted at its time,
// not once the pause ends: the pause is no reason to skip passes.
func testMaintenancePromotesDuringWatchPause(t *testing.T, h *harness) {
	var loop watchLoop
	for _, l := range watchLoops() {
		if l.name == "RunMaintenance" {
			loop = l
		}
	}
	const due = 10 * time.Millisecond // well within the first pause
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k", ScheduledAt: h.clock.Now().Add(due)})
	_, clock := startWatchLoop(t, h, loop, true)
	// Each pass sets a timer for the job; the watch ends at once, the
	// first retry is at once, and the second waits 100 ms.
	for watches := 0; ; {
		e := clock.log.next(t, due)
		if e.kind == "watch" {
			if watches++; watches > 2 {
				t.Fatalf("%d watches without a pause", watches)
			}
		}
		if e.kind == "after" {
			if e.d != 100*time.Millisecond {
				t.Fatalf("pause %s, want 100ms", e.d)
			}
			break
		}
	}
	clock.Advance(due)
	// A pass, then the sleep until the next (an hour: nothing else is
	// due); the pause has not ended.
	for e := clock.log.next(t, 0); e.kind != "after" || e.d != watchLoopInterval; e = clock.log.next(t, 0) {
		if e.kind == "watch" {
			t.Fatalf("watched again before the pause ended")
		}
	}
	got, err := h.c.Get(h.ctx(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != coordinator.StateAvailable {
		t.Fatalf("job due %s into a 100ms pause is %s once that time passed; want available", due, got.State)
	}
}

// testCandidatePausesStartOverAfterLeading: a candidate that won after its
// watches kept ending at once, and lost the key later, retries its next
// watch that ends at once at once again: the pauses of its earlier run
// of quick ends are over.
func testCandidatePausesStartOver(t *testing.T, h *harness) {
	var loop watchLoop
	for _, l := range watchLoops() {
		if l.name == "ElectionCandidate" {
			loop = l
		}
	}
	key := h.keysRoot() + "e/wl"
	put := func() {
		if _, err := h.store.Txn(h.ctx(), kv.Txn{Then: []kv.Op{kv.Put(key, []byte("other"), 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	_, clock := startWatchLoop(t, h, loop, true)
	pause := 100 * time.Millisecond
	for _, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		if _, _, pause = clock.log.untilPause(t, loop.ignore); pause != want {
			t.Fatalf("candidate's pause %s, want %s", pause, want)
		}
		if want < 400*time.Millisecond {
			clock.Advance(pause)
		}
	}
	// The other leader leaves during the pause: the candidate wins once
	// it ends; its own watch ends at once too, and it re-reads its key.
	if _, err := h.store.Txn(h.ctx(), kv.Txn{Then: []kv.Op{kv.Delete(key)}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(pause)
	if _, _, p := clock.log.untilPause(t, loop.ignore); p != 100*time.Millisecond {
		t.Fatalf("leader's pause %s, want 100ms", p)
	}
	// It loses the key to another daemon, sees that at its next read,
	// and watches the new leader's key as a candidate.
	if _, err := h.store.Txn(h.ctx(), kv.Txn{Then: []kv.Op{kv.Delete(key)}}); err != nil {
		t.Fatal(err)
	}
	put()
	clock.Advance(100 * time.Millisecond)
	if _, w, p := clock.log.untilPause(t, loop.ignore); w != 2 || p != 100*time.Millisecond {
		t.Fatalf("after losing the key: %d watches, then a pause of %s; want 2 (the first retry at once), then 100ms", w, p)
	}
}

// downStore is a store whose watches can be taken down: after down, the
// watches up end, and every later one ends at once, refused (as etcd
// refuses watches with "no leader").
type downStore struct {
	kv.Store
	mu       sync.Mutex
	isDown   bool
	cancels  []context.CancelFunc
	refusals chan struct{} // one value per refused watch
}

func (s *downStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isDown {
		s.refusals <- struct{}{}
		ch := make(chan kv.WatchResponse, 1)
		ch <- kv.WatchResponse{Err: errWatchRefused}
		close(ch)
		return ch
	}
	wctx, cancel := context.WithCancel(ctx)
	s.cancels = append(s.cancels, cancel)
	return s.Store.Watch(wctx, prefix, fromRev)
}

func (s *downStore) down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.isDown = true
	for _, cancel := range s.cancels {
		cancel()
	}
}

// testClaimsWhileWatchDown: while the watch of a queue's available jobs is
// down (it ended, and its loop pauses before watching again), no put
// lowers the queue's floor, so claims must not trust it: a job enqueued
// then, after a claim found the queue empty, is claimed at once, not once
// the watch is back.
func testClaimsWhileWatchDown(t *testing.T, h *harness) {
	store := &downStore{Store: h.store, refusals: make(chan struct{}, 16)}
	c := h.coordinator(store, coordinator.Config{})
	s := h.session(c)
	claim := func() []*coordinator.Run {
		t.Helper()
		runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 8, false)
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		return runs
	}
	h.watchWith(c)
	h.enqueue(coordinator.EnqueueParams{Kind: "k", Priority: 4})
	if got := len(claim()); got != 1 {
		t.Fatalf("claimed %d jobs, want 1", got)
	}
	store.down()
	// The first watch after one that ended is set up at once, the second
	// after 100 ms of h's clock, which stands still: once both were
	// refused, the loop pauses, and the pause does not end in this test.
	for range 2 {
		select {
		case <-store.refusals:
		case <-time.After(failBound):
			t.Fatal("the available jobs' watch was not set up again after it ended")
		}
	}
	// A claim from the floor that finds nothing moves it to the queue's
	// end (known empty); only a watch event would move it back.
	if got := len(claim()); got != 0 {
		t.Fatalf("claimed %d jobs of an empty queue", got)
	}
	// One after the jobs claimed, one before them (a higher priority).
	for _, p := range []coordinator.EnqueueParams{{Kind: "k", Priority: 4}, {Kind: "k", Priority: 1}} {
		j := h.enqueue(p)
		runs := claim()
		if len(runs) != 1 || runs[0].Job().ID != j.ID {
			t.Fatalf("enqueued %s (priority %d) while the watch was down; a claim got %d runs, want that job: claims trusted a floor that nothing lowers", j.ID, p.Priority, len(runs))
		}
	}
}
