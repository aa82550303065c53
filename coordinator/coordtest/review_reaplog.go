package coordtest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
)

// Tests from a review of the reaper's logs (2026-12-04): an operator asks
// "why was job X re-queued". Run adds them to the suite.
var reapLogReviewTests = []suiteTest{
	{"ReapLogNamesLostOwnerAndToken", testReapLogOwnerToken},
	{"ReaperQuietWhenADaemonEndsWithNoJobs", testReaperQuietOnEmptyDeath},
}

// logCapture is a slog.Handler that keeps every record, at every level,
// and sends each on records (dropped when full).
type logCapture struct {
	mu      sync.Mutex
	all     []slog.Record
	records chan slog.Record
}

func newLogCapture() *logCapture { return &logCapture{records: make(chan slog.Record, 256)} }

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.all = append(l.all, r.Clone())
	l.mu.Unlock()
	select {
	case l.records <- r.Clone():
	default:
	}
	return nil
}

func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCapture) WithGroup(string) slog.Handler      { return l }

// withMessage returns the records with message msg.
func (l *logCapture) withMessage(msg string) []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []slog.Record
	for _, r := range l.all {
		if r.Message == msg {
			out = append(out, r)
		}
	}
	return out
}

// attrs returns r's attributes by key, as strings.
func attrs(r slog.Record) map[string]string {
	out := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		out[a.Key] = a.Value.String()
		return true
	})
	return out
}

// testReapLogOwnerToken: the line logged per reaped job names the run it
// ended (its owner and fencing token), which the re-queued job's record no
// longer holds: it is what ties the re-queue to the daemon that lost it.
func testReapLogOwnerToken(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	s := h.session(h.c)
	r := h.claimOne(s)
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	logs := newLogCapture()
	reaper := h.coordinator(h.store, coordinator.Config{Logger: slog.New(logs)})
	if n, err := reaper.Reap(h.ctx(), nil, nil); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v; want 1", n, err)
	}
	lines := logs.withMessage("reaped job after its owner's lease was lost")
	if len(lines) != 1 {
		t.Fatalf("%d per-job reap lines, want 1", len(lines))
	}
	got := attrs(lines[0])
	want := map[string]string{"job": j.ID, "queue": j.Queue, "owner": s.WorkerID(), "token": r.Token().String()}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("reap line's %s = %q, want %q (line: %v)", k, got[k], v, got)
		}
	}
}

// testReaperQuietOnEmptyDeath: a daemon that ends its session holding no
// job (every graceful stop) makes no reaper log at Info: one line per
// peer per stop saying it reaped nothing is noise for whoever looks for why
// a job was re-queued.
func testReaperQuietOnEmptyDeath(t *testing.T, h *harness) {
	s := h.session(h.c)
	logs := newLogCapture()
	clock := newSignalClock(NewClock(h.clock.Now()))
	reaper, err := coordinator.New(h.store, coordinator.Config{Namespace: h.ns, Clock: clock, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = reaper.RunReaper(ctx, nil, time.Hour, nil)
	}()
	defer func() { cancel(); <-done }()
	clock.next(t) // it watches registrations: it sees the Close below
	if err := s.Close(h.ctx()); err != nil {
		t.Fatal(err)
	}
	const msg = "daemon session ended; reaped its jobs"
	bound := time.After(failBound)
	for {
		select {
		case r := <-logs.records:
			if r.Message != msg {
				continue
			}
			if r.Level > slog.LevelDebug {
				t.Fatalf("reaper logged %q at %v for a daemon that held no job (%v)", msg, r.Level, attrs(r))
			}
			return
		case <-bound:
			t.Fatal("the reaper did not see the daemon's session end")
		}
	}
}
