package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/worker"
)

// failGrant makes opening a session fail.
type failGrant struct{ kv.Store }

func (failGrant) Grant(context.Context, time.Duration) (kv.LeaseID, error) {
	return 0, errors.New("store unreachable")
}

// TestStopAfterFailedStart: a Start that failed may be retried, and Stop
// after it (the usual deferred cleanup) returns quietly.
func TestStopAfterFailedStart(t *testing.T) {
	e := newEnv(t, func(s kv.Store) kv.Store { return failGrant{s} })
	w, err := worker.New(e.c, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(context.Context, *worker.Job) error { return nil })
	for range 2 {
		if err := w.Start(context.Background()); err == nil || errors.Is(err, worker.ErrStarted) {
			t.Fatalf("Start on a store that refuses sessions: %v", err)
		}
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after a failed Start: %v", err)
	}
	if err := w.Start(context.Background()); !errors.Is(err, worker.ErrStopped) {
		t.Fatalf("Start after Stop: %v, want ErrStopped", err)
	}
}

// TestStopAfterStopReturnsNil: a Stop called once the worker has stopped
// returns nil, whatever its ctx: there is nothing left to drain, even with
// a ctx that has ended. It chose at random between the stop and its ended
// ctx, and half the time said the drain missed its deadline.
func TestStopAfterStopReturnsNil(t *testing.T) {
	e := newEnv(t, nil)
	w := e.worker(worker.Config{}, map[string]worker.Handler{
		"k": func(context.Context, *worker.Job) error { return nil },
	})
	if err := w.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 64 {
		if err := w.Stop(ctx); err != nil {
			t.Fatalf("Stop number %d after the worker stopped, with an ended ctx: %v, want nil", i+2, err)
		}
	}
}

// TestStartTwice: a second Start of a started worker is ErrStarted, a
// sentinel (it was a bare error), with one line saying what to do, and
// leaves the worker running.
func TestStartTwice(t *testing.T) {
	e := newEnv(t, nil)
	w := e.worker(worker.Config{}, map[string]worker.Handler{
		"k": func(context.Context, *worker.Job) error { return nil },
	})
	err := w.Start(context.Background())
	if !errors.Is(err, worker.ErrStarted) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "once per Worker") {
		t.Fatalf("second Start: %v, want ErrStarted saying what to do", err)
	}
	if j := e.wait(e.enqueue(coordinator.EnqueueParams{Kind: "k"})); j.State != coordinator.StateCompleted {
		t.Fatalf("job after a refused second Start: %s, want completed", j.State)
	}
}

// TestStartWithoutHandlers: Start on a worker with no handler says what to
// do, and on a stopped one is ErrStopped, handlers or not (as ErrStopped's
// doc says), rather than the missing handlers.
func TestStartWithoutHandlers(t *testing.T) {
	e := newEnv(t, nil)
	w, err := worker.New(e.c, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Start(context.Background())
	if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "register them with Handle") {
		t.Fatalf("Start without handlers: %v", err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); !errors.Is(err, worker.ErrStopped) {
		t.Fatalf("Start of a stopped worker without handlers: %v, want ErrStopped", err)
	}
}

// TestCancelRequestJustAfterClaim: a cancel request written after the
// claim committed but delivered before the worker registered the run (the
// window a batch claim's start-up widens) still cancels it.
func TestCancelRequestJustAfterClaim(t *testing.T) {
	e := newEnv(t, nil)
	id := e.enqueue(coordinator.EnqueueParams{Kind: "long", MaxAttempts: 1})
	seen := make(chan struct{})
	var once sync.Once
	e.worker(worker.Config{
		OnClaim: func(_ string, n int, _ coordinator.ClaimStats) {
			if n == 0 {
				return
			}
			once.Do(func() {
				// Runs after the claim committed, before its runs start.
				j, err := e.c.Cancel(context.Background(), id)
				if err != nil || !j.CancelRequested {
					t.Errorf("cancel: %v %+v", err, j)
				}
				<-seen // the watch delivered the request meanwhile
			})
		},
	}, map[string]worker.Handler{
		"long": func(ctx context.Context, j *worker.Job) error {
			<-ctx.Done()
			return context.Cause(ctx)
		},
	})
	go func() {
		// Another watcher of the same requests: once it has the request,
		// the worker's watch (established earlier) has it too, or will
		// within moments; the worker then looks it up as the run starts.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_ = e.c.WatchCancelRequests(ctx, func(got string, _ int64) {
			if got == id {
				time.Sleep(50 * time.Millisecond)
				cancel()
			}
		})
		close(seen)
	}()
	if j := e.wait(id); j.State != coordinator.StateCancelled {
		t.Fatalf("job %s, errors %+v: the cancel request was lost", j.State, j.Errors)
	}
}

// TestRerunOfSameJobKeepsItsBookkeeping: a job snoozed for 0 is claimed
// again here while its first run is still being finished (a slow
// OnOutcome); the first run's end must not remove the second's entries,
// or the janitor would release the second run's job as an orphan while its
// handler runs (a third run; the second's outcome refused).
func TestRerunOfSameJobKeepsItsBookkeeping(t *testing.T) {
	e := newEnv(t, nil)
	var runs atomic.Int32
	secondStarted := make(chan struct{})
	firstOutcomeMayEnd := make(chan struct{})
	var mu sync.Mutex
	var outcomes []worker.Outcome
	e.worker(worker.Config{
		ReapInterval: 100 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, // the claim loop wakes for its janitor
		OnOutcome: func(o worker.Outcome) {
			mu.Lock()
			outcomes = append(outcomes, o)
			first := len(outcomes) == 1
			mu.Unlock()
			if first {
				<-firstOutcomeMayEnd // held until the next run has started
			}
		},
	}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error {
			switch runs.Add(1) {
			case 1:
				return worker.JobSnooze(0)
			case 2:
				close(secondStarted)
				// Outlive a few janitor passes after the first run ended.
				time.Sleep(500 * time.Millisecond)
				return ctx.Err()
			}
			return nil
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	<-secondStarted
	close(firstOutcomeMayEnd)
	e.waitState(id, coordinator.StateCompleted)
	mu.Lock()
	defer mu.Unlock()
	for _, o := range outcomes {
		if o.Err != nil {
			t.Errorf("run %d: %s refused: %v", o.Token, o.Op, o.Err)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (the second run was released as an orphan while it ran)", n)
	}
}

// isClaimCommit reports whether t puts a key on a lease (an ownership
// key): a claim's commit.
func isClaimCommit(t kv.Txn) bool {
	for _, op := range t.Then {
		if op.Type == kv.OpTxn && isClaimCommit(*op.Txn) {
			return true
		}
		if op.Type == kv.OpPut && op.Lease != 0 {
			return true
		}
	}
	return false
}

// TestStopGivesBackAClaimThatLandsLate: Stop while a claim is committing.
// The claim lands after the drain began: its job is given back, available
// and with no attempt used, and no handler starts after Stop returned.
func TestStopGivesBackAClaimThatLandsLate(t *testing.T) {
	var gate *kvtest.Gate
	var probe *stopProbe
	e := newEnv(t, func(s kv.Store) kv.Store {
		gate = kvtest.NewGate(s)
		gate.Match, gate.Land = isClaimCommit, true // the commit lands
		probe = &stopProbe{Store: gate, seen: make(chan struct{})}
		return probe
	})
	var started atomic.Int32
	w, err := worker.New(e.c, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(ctx context.Context, j *worker.Job) error {
		started.Add(1)
		return nil
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	gate.Arm()
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	<-gate.Held()
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- w.Stop(ctx)
	}()
	// The claim may land once Stop has set the worker to give claims
	// back: Stop cancels the claim loop's context (the held claim's), then
	// does so, then reads the store to see if it is still open.
	<-probe.seen
	gate.Open()
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if n := started.Load(); n != 0 || w.Running() != 0 {
		t.Fatalf("%d handlers started, %d running after Stop", n, w.Running())
	}
	j, err := e.c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != coordinator.StateAvailable || j.Attempt != 0 {
		t.Fatalf("job after Stop: %s, attempt %d; want available, attempt 0", j.State, j.Attempt)
	}
}

// stopProbe tells when Stop's drain has begun: the first read-only
// transaction after the context of the first claim commit ended. Stop
// cancels the claim loop's context first, then makes claims give their
// jobs back, then probes the store with such a read (its context may
// already be cancelled when it is sent: the drain need not wait for it);
// a claim reads with ranges, and no other loop of this worker reads then.
type stopProbe struct {
	kv.Store
	claimCtx atomic.Pointer[context.Context]
	once     sync.Once
	seen     chan struct{}
}

func (p *stopProbe) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if isClaimCommit(t) {
		p.claimCtx.CompareAndSwap(nil, &ctx)
	} else if cc := p.claimCtx.Load(); cc != nil && (*cc).Err() != nil && !kvtest.Writes(t) {
		p.once.Do(func() { close(p.seen) })
	}
	return p.Store.Txn(ctx, t)
}

// failClaims fails the next claim commits while n > 0, as a store that is
// briefly unreachable would.
type failClaims struct {
	kv.Store
	n atomic.Int32
}

func (f *failClaims) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if isClaimCommit(t) && f.n.Add(-1) >= 0 {
		return kv.TxnResult{}, errors.New("store briefly unreachable")
	}
	return f.Store.Txn(ctx, t)
}

// TestClaimFailureRetriedSoon: a claim that failed is retried after a short
// back-off, not left until the next poll (an hour here).
func TestClaimFailureRetriedSoon(t *testing.T) {
	fc := &failClaims{}
	e := newEnv(t, func(s kv.Store) kv.Store { fc.Store = s; return fc })
	e.worker(worker.Config{PollInterval: time.Hour}, map[string]worker.Handler{
		"k": func(context.Context, *worker.Job) error { return nil },
	})
	fc.n.Store(3) // the worker's registration is done
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	if j := e.wait(id); j.State != coordinator.StateCompleted {
		t.Fatalf("job %s", j.State)
	}
	if n := fc.n.Load(); n >= 0 {
		t.Fatalf("%d claim failures left to inject: the test did not exercise them", n+1)
	}
}

// A nil middleware, one that returns a nil handler and one that panics
// while wrapping are errors of Start, before any session is opened — not a
// panic with a live session, nor jobs of the kind failing as unknown.
func TestStartRefusesBrokenMiddleware(t *testing.T) {
	ok := func(ctx context.Context, j *worker.Job) error { return nil }
	for name, mw := range map[string]worker.Middleware{
		"nil":       nil,
		"nil-maker": func(worker.Handler) worker.Handler { return nil },
		"panicking": func(worker.Handler) worker.Handler { panic("boom") },
	} {
		for _, perKind := range []bool{false, true} {
			e := newEnv(t, nil)
			cfg := worker.Config{}
			if !perKind {
				cfg.Middleware = []worker.Middleware{mw}
			}
			w, err := worker.New(e.c, cfg)
			if errors.Is(err, coordinator.ErrInvalid) && !perKind && mw == nil {
				continue // New refuses a nil one in Config already
			}
			if err != nil {
				t.Fatal(err)
			}
			if perKind {
				w.HandleWith("k", ok, worker.KindOptions{Middleware: []worker.Middleware{mw}})
			} else {
				w.Handle("k", ok)
			}
			if err := w.Start(context.Background()); !errors.Is(err, coordinator.ErrInvalid) {
				t.Errorf("%s middleware (per kind %v): Start = %v, want ErrInvalid", name, perKind, err)
			}
			if err := w.Stop(context.Background()); err != nil {
				t.Errorf("%s middleware: Stop after the refused Start: %v", name, err)
			}
			if ws, err := e.c.Workers(context.Background()); err != nil || len(ws) != 0 {
				t.Errorf("%s middleware: %d workers registered after the refused Start (%v), want none", name, len(ws), err)
			}
		}
	}
}

// isOutcomeCommit reports whether t ends a run: it deletes an ownership
// key (o/ID), nested or not.
func isOutcomeCommit(t kv.Txn) bool {
	for _, op := range t.Then {
		if op.Type == kv.OpTxn && isOutcomeCommit(*op.Txn) {
			return true
		}
		if op.Type == kv.OpDelete && strings.Contains(op.Key, "/o/") {
			return true
		}
	}
	return false
}

// stallFirstOutcome holds the first outcome commit until its caller's
// context ends, as a store that lost its leader for a while would.
type stallFirstOutcome struct {
	kv.Store
	stalled atomic.Bool
}

func (s *stallFirstOutcome) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if isOutcomeCommit(t) && s.stalled.CompareAndSwap(false, true) {
		<-ctx.Done()
		return kv.TxnResult{}, ctx.Err()
	}
	return s.Store.Txn(ctx, t)
}

// TestOutcomeOutlivesTheDeadlineItStartedUnder: an outcome write is
// bounded by the session's validity deadline as it was when the write
// began; when that passes but the session was renewed meanwhile, the job
// is still this run's, and the write goes on under the new deadline. (It
// gave up, leaving the job to be released as an orphan by a write no
// outcome reported, and run again.)
func TestOutcomeOutlivesTheDeadlineItStartedUnder(t *testing.T) {
	e := newEnv(t, func(s kv.Store) kv.Store { return &stallFirstOutcome{Store: s} })
	outcomes := make(chan worker.Outcome, 4)
	var runs atomic.Int32
	e.worker(worker.Config{LeaseTTL: 2 * time.Second, OnOutcome: func(o worker.Outcome) { outcomes <- o }}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error {
			runs.Add(1)
			return nil
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	o := <-outcomes
	if o.Op != "complete" || o.Err != nil {
		t.Fatalf("first outcome: %s, %v; want complete, recorded", o.Op, o.Err)
	}
	if j := e.wait(id); j.State != coordinator.StateCompleted || runs.Load() != 1 {
		t.Fatalf("job %s after %d runs; want completed after 1", j.State, runs.Load())
	}
}

// failOutcomes fails the next outcome commits while n > 0, as a store
// that refuses requests for a while (a leader election, a member shedding
// load) would, at once.
type failOutcomes struct {
	kv.Store
	n atomic.Int32
}

func (f *failOutcomes) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if isOutcomeCommit(t) && f.n.Add(-1) >= 0 {
		return kv.TxnResult{}, errors.New("store briefly unreachable")
	}
	return f.Store.Txn(ctx, t)
}

// TestOutcomeRetriesLogOncePerRun: an outcome write the store fails at once
// is retried (every second at most, for as long as the session lives) and
// logged once for the run, not at each retry: with a store refusing
// requests and thousands of jobs finishing, a line per job per second
// buried the log. The outcome is recorded once the store takes it.
func TestOutcomeRetriesLogOncePerRun(t *testing.T) {
	fo := &failOutcomes{}
	fo.n.Store(4)
	e := newEnv(t, func(s kv.Store) kv.Store { fo.Store = s; return fo })
	var logged testutil.SyncBuffer
	outcomes := make(chan worker.Outcome, 1)
	e.worker(worker.Config{Logger: slog.New(slog.NewTextHandler(&logged, nil)), OnOutcome: func(o worker.Outcome) { outcomes <- o }},
		map[string]worker.Handler{"k": func(context.Context, *worker.Job) error { return nil }})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	if o := <-outcomes; o.Op != "complete" || o.Err != nil {
		t.Fatalf("outcome %s, %v; want complete, recorded", o.Op, o.Err)
	}
	if n := fo.n.Load(); n >= 0 {
		t.Fatalf("%d outcome failures left to inject: the test did not exercise them", n+1)
	}
	if j := e.wait(id); j.State != coordinator.StateCompleted {
		t.Fatalf("job %s, want completed", j.State)
	}
	out := logged.String()
	if n := strings.Count(out, `msg="recording outcome failed; retrying"`); n != 1 {
		t.Errorf("%d lines for one run's four failed outcome writes, want 1:\n%s", n, out)
	}
}
