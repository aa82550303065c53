package coordtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// Tests from a review of many daemons on one store (2026-12-06): what
// every daemon's reaper does when one daemon dies. Run adds them to the
// suite.
var reapersReviewTests = []suiteTest{
	{"ADeathIsReapedByOneDaemonNotAll", testADeathIsReapedByOne},
	{"ABackupReapsADeathTheFirstLeaves", testABackupReapsADeath},
	{"WorkersThatDoNotReapAreNotRankedForADeath", testWorkersThatDoNotReapAreNotRanked},
	{"WorkersThatRegisterWithoutReapingLaterAreNotRanked", testWorkersRegisteredLaterAreNotRanked},
}

// storeCounts counts the requests made through a requestCounter.
type storeCounts struct {
	ranges atomic.Int64 // Range and Scan requests
	reads  atomic.Int64 // keys read by transactions of gets
	writes atomic.Int64 // transactions that write
}

func (c *storeCounts) reset() { c.ranges.Store(0); c.reads.Store(0); c.writes.Store(0) }

func (c *storeCounts) String() string {
	return fmt.Sprintf("%d ranges, %d keys read, %d write transactions", c.ranges.Load(), c.reads.Load(), c.writes.Load())
}

type requestCounter struct {
	kv.Store
	n *storeCounts
}

func (s requestCounter) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	write := false
	for _, op := range append(append([]kv.Op(nil), t.Then...), t.Else...) {
		if op.Type == kv.OpGet {
			s.n.reads.Add(1)
		} else {
			write = true
		}
	}
	if write {
		s.n.writes.Add(1)
	}
	return s.Store.Txn(ctx, t)
}

func (s requestCounter) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	s.n.ranges.Add(1)
	return s.Store.Range(ctx, r)
}

type requestCounterScanner struct {
	requestCounter
	sc kv.Scanner
}

func (s requestCounterScanner) Scan(ctx context.Context, r kv.RangeRequest, visit func(kv.KeyValue) error) (int64, error) {
	s.n.ranges.Add(1)
	return s.sc.Scan(ctx, r, visit)
}

// counted returns store counting its requests in n.
func counted(store kv.Store, n *storeCounts) kv.Store {
	c := requestCounter{store, n}
	if sc, ok := store.(kv.Scanner); ok {
		return requestCounterScanner{c, sc}
	}
	return c
}

// deathLines sends the message of every line a reaper logs about a
// daemon's session ending (dropped when full).
type deathLines chan slog.Record

func (l deathLines) Enabled(context.Context, slog.Level) bool { return true }
func (l deathLines) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "daemon session ended") || strings.Contains(r.Message, "backup") {
		select {
		case l <- r.Clone():
		default:
		}
	}
	return nil
}
func (l deathLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l deathLines) WithGroup(string) slog.Handler      { return l }

// reaperSession opens a session whose registration says its daemon runs
// a reaper (as a worker with Config.Reap registers).
func reaperSession(h *harness) *coordinator.Session {
	h.t.Helper()
	id := fmt.Sprintf("w%d-%s", workerSeq.Add(1), coordinator.NewWorkerID())
	s, err := h.c.NewSession(h.ctx(), coordinator.SessionConfig{TTL: 60 * time.Second, Worker: coordinator.WorkerInfo{ID: id, Reaps: true}})
	if err != nil {
		h.t.Fatalf("NewSession: %v", err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// reaperSet is n daemons' reapers, each a coordinator of its own (its
// clock signals its timers) over one counting store, its self a session
// of its own that registers as a reaper's.
type reaperSet struct {
	counts storeCounts
	lines  deathLines
	sess   []*coordinator.Session
	clocks []*signalClock
	stop   func()
}

// startReapers starts the reapers of n daemons, of which those whose
// index silent holds register but run no reaper, and returns once each
// running one watches the registrations.
func startReapers(t *testing.T, h *harness, n int, silent map[int]bool) *reaperSet {
	t.Helper()
	rs := &reaperSet{lines: make(deathLines, 4096)}
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan struct{}
	for i := range n {
		s := reaperSession(h)
		rs.sess = append(rs.sess, s)
		if silent[i] {
			continue
		}
		clock := newSignalClock(h.clock)
		rs.clocks = append(rs.clocks, clock)
		c, err := coordinator.New(counted(h.store, &rs.counts), coordinator.Config{Namespace: h.ns, Clock: clock, Logger: slog.New(rs.lines)})
		if err != nil {
			t.Fatal(err)
		}
		d := make(chan struct{})
		done = append(done, d)
		go func() {
			defer close(d)
			_ = c.RunReaper(ctx, nil, time.Hour, s.WorkerID)
		}()
		clock.next(t) // it watches the registrations
	}
	rs.stop = func() {
		cancel()
		for _, d := range done {
			<-d
		}
		for _, s := range rs.sess {
			_ = s.Close(h.ctx())
		}
	}
	return rs
}

// next returns the next death line.
func (rs *reaperSet) next(t *testing.T) slog.Record {
	t.Helper()
	select {
	case r := <-rs.lines:
		return r
	case <-time.After(failBound):
		t.Fatal("a reaper logged nothing of the daemon's death")
		return slog.Record{}
	}
}

// dyingQueues names a queue of its own for each dying session.
var dyingQueues atomic.Int64

// dying opens a session that claims jobs new jobs, on a queue of their
// own, and returns it. Not a job reaped before: each reap counts a
// rescue, and a job reaped more than five times ends discarded.
func dying(t *testing.T, h *harness, jobs int) (*coordinator.Session, []string) {
	t.Helper()
	q := fmt.Sprintf("dying-%d", dyingQueues.Add(1))
	for range jobs {
		h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: q})
	}
	s := h.session(h.c)
	runs, _, err := h.c.Claim(h.ctx(), s, q, jobs, false)
	if err != nil || len(runs) != jobs {
		t.Fatalf("Claim = %d runs, %v; want %d", len(runs), err, jobs)
	}
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.Job().ID)
	}
	return s, ids
}

// testADeathIsReapedByOne: when a daemon holding J jobs dies, the daemon
// that rendezvous hashing of its worker id over the live daemons ranks
// first reaps its jobs at once; the others do not read the J records nor
// send J moves that all but one would lose: that was N reads of every
// record and N transactions of moves per death for N daemons (and as many
// again for the refused moves' second reads), at the moment the store is
// under stress. The counts are logged for N = 1, 4, 16, 64.
func testADeathIsReapedByOne(t *testing.T, h *harness) {
	const jobs = 10
	for _, n := range []int{1, 4, 16, 64} {
		s, ids := dying(t, h, jobs)
		rs := startReapers(t, h, n, nil)
		rs.counts.reset()
		if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
			t.Fatal(err)
		}
		for range n {
			rs.next(t)
		}
		t.Logf("%d daemons, one dies holding %d jobs: the reapers made %v", n, jobs, &rs.counts)
		reads, writes := rs.counts.reads.Load(), rs.counts.writes.Load()
		for _, id := range ids {
			if j := h.get(id); j.State != coordinator.StateAvailable {
				t.Errorf("%d daemons: job %s is %s after the reapers saw its daemon die, want available", n, id, j.State)
			}
		}
		rs.stop()
		if reads != jobs || writes != 1 {
			t.Fatalf("%d daemons: the reapers read %d keys and sent %d write transactions for a death with %d jobs; want %d and 1 (one daemon reaps)", n, reads, writes, jobs, jobs)
		}
	}
}

// testABackupReapsADeath: the daemon ranked first for a death may be the
// one that cannot reap it (hung, or dying too): the one ranked second
// reaps it a moment later, not at its periodic scan.
func testABackupReapsADeath(t *testing.T, h *harness) {
	// Daemon 0 runs no reaper; daemon 1 does. A death whose first is
	// daemon 1 is reaped at once; try again until daemon 0 is first.
	rs := startReapers(t, h, 2, map[int]bool{0: true})
	defer rs.stop()
	for try := 0; ; try++ {
		if try == 40 {
			t.Fatal("daemon 1 ranked first for 40 deaths in a row")
		}
		s, ids := dying(t, h, 1)
		if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
			t.Fatal(err)
		}
		r := rs.next(t)
		if r.Message == "daemon session ended; reaped its jobs" {
			continue
		}
		due := rs.clocks[0].next(t)
		if j := h.get(ids[0]); j.State != coordinator.StateRunning {
			t.Fatalf("job %s is %s before the backup's time, want running (the first is to reap it)", ids[0], j.State)
		}
		h.clock.Advance(due.Sub(h.clock.Now()))
		if r := rs.next(t); !strings.Contains(r.Message, "backup") {
			t.Fatalf("reaper logged %q, want its reap as a backup", r.Message)
		}
		if j := h.get(ids[0]); j.State != coordinator.StateAvailable {
			t.Fatalf("job %s is %s after the backup's reap, want available", ids[0], j.State)
		}
		return
	}
}

// testWorkersThatDoNotReapAreNotRanked: workers without Config.Reap (the
// default) register too, and run no reaper. A death whose rendezvous
// ranking put three of them before the one daemon that reaps was left to
// its periodic scan (--reap-interval, 10 s), past the TTL + 1 s promised
// for a killed daemon's jobs, and one of them ranked first delayed it by a
// backup's 0.5 or 1 s: only the registrations of reapers are ranked.
func testWorkersThatDoNotReapAreNotRanked(t *testing.T, h *harness) {
	for range 3 {
		h.session(h.c) // a worker that does not reap
	}
	rs := startReapers(t, h, 1, nil)
	defer rs.stop()
	reapsEveryDeathAtOnce(t, h, rs)
}

// testWorkersRegisteredLaterAreNotRanked: the workers that do not reap
// and register once the reaper has read the registrations (a deployment
// of Go workers started after the daemons) are seen by its watch, whose
// events carry their registrations: they are not ranked either, where a
// reaper that took every registration it watched for one's left the
// deaths to them until its next scan.
func testWorkersRegisteredLaterAreNotRanked(t *testing.T, h *harness) {
	rs := startReapers(t, h, 1, nil)
	defer rs.stop()
	for range 3 {
		h.session(h.c) // a worker that does not reap, seen by the watch
	}
	reapsEveryDeathAtOnce(t, h, rs)
}

// reapsEveryDeathAtOnce checks that the one running reaper of rs reaps at
// once each of 12 deaths: each ranks it anew among the registrations.
func reapsEveryDeathAtOnce(t *testing.T, h *harness, rs *reaperSet) {
	t.Helper()
	for range 12 {
		s, ids := dying(t, h, 1)
		if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
			t.Fatal(err)
		}
		if r := rs.next(t); r.Message != "daemon session ended; reaped its jobs" {
			r.Attrs(func(a slog.Attr) bool {
				t.Logf("%s=%v", a.Key, a.Value)
				return true
			})
			t.Fatalf("the only daemon that reaps logged %q: it left the death to workers that run no reaper", r.Message)
		}
		// Available, or discarded: a job reaped before is claimed
		// again, and one that loses more than 5 runs is discarded.
		if j := h.get(ids[0]); j.State == coordinator.StateRunning {
			t.Fatalf("job %s is still running after the reaper saw its daemon die", ids[0])
		}
	}
}
