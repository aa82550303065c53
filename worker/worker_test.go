package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	t     *testing.T
	store kv.Store
	c     *coordinator.Coordinator
}

func newEnv(t *testing.T, wrap func(kv.Store) kv.Store) *env {
	t.Helper()
	s, err := localstore.Open(t.TempDir(), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var store kv.Store = s
	if wrap != nil {
		store = wrap(s)
	}
	c, err := coordinator.New(store, coordinator.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, store: store, c: c}
}

func (e *env) worker(cfg worker.Config, handlers map[string]worker.Handler) *worker.Worker {
	e.t.Helper()
	w, err := worker.New(e.c, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, h := range handlers {
		w.Handle(k, h)
	}
	if err := w.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

func (e *env) enqueue(p coordinator.EnqueueParams) string {
	e.t.Helper()
	r, err := e.c.Enqueue(context.Background(), p)
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Job.ID
}

// wait blocks until job id is final (or its state is one of also).
func (e *env) wait(id string) *coordinator.Job {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	j, err := e.c.Wait(ctx, id)
	if err != nil {
		e.t.Fatalf("wait for %s: %v", id, err)
	}
	return j
}

func (e *env) waitState(id string, want coordinator.State) *coordinator.Job {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, err := e.c.Get(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		if j.State == want {
			return j
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job %s is %s, want %s", id, j.State, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCompletesWithResultAndCheckpoint(t *testing.T) {
	e := newEnv(t, nil)
	e.worker(worker.Config{}, map[string]worker.Handler{
		"add": worker.Typed(func(ctx context.Context, j *worker.Job, args struct{ A, B int }) error {
			if j.Token.IsZero() || j.IdempotencyKey() != j.ID+"-1" {
				return errors.New("missing token or idempotency key")
			}
			if err := j.Checkpoint(ctx, map[string]int{"half": args.A}); err != nil {
				return err
			}
			return j.SetResult(args.A + args.B)
		}),
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "add", Payload: json.RawMessage(`{"A":2,"B":3}`)})
	j := e.wait(id)
	if j.State != coordinator.StateCompleted || string(j.Result) != "5" || string(j.Checkpoint) != `{"half":2}` {
		t.Fatalf("job = %s result %s checkpoint %s errors %+v", j.State, j.Result, j.Checkpoint, j.Errors)
	}
}

// TestSetResultAfterTheRunEndedIsRefused: a result set once the handler
// returned (by a goroutine it left behind) is not recorded, and SetResult
// says so with fence.ErrLeaseLost, as Checkpoint does; it returned nil
// and the result was silently lost.
func TestSetResultAfterTheRunEndedIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	kept := make(chan *worker.Job, 1)
	e.worker(worker.Config{}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error {
			kept <- j
			return j.SetResult("in time")
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	if j := e.wait(id); j.State != coordinator.StateCompleted || string(j.Result) != `"in time"` {
		t.Fatalf("job = %s result %s", j.State, j.Result)
	}
	if err := (<-kept).SetResult("late"); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("SetResult after the run ended: %v, want fence.ErrLeaseLost", err)
	}
}

func TestPanicBecomesAttemptErrorWithStack(t *testing.T) {
	e := newEnv(t, nil)
	e.worker(worker.Config{}, map[string]worker.Handler{
		"boom": func(ctx context.Context, j *worker.Job) error { panic("kaboom") },
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "boom", MaxAttempts: 1})
	j := e.wait(id)
	if j.State != coordinator.StateDiscarded || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "kaboom") ||
		!strings.Contains(j.Errors[0].Trace, "worker_test.go") {
		t.Fatalf("job = %s errors %+v", j.State, j.Errors)
	}
}

func TestTimeoutFailsAttempt(t *testing.T) {
	e := newEnv(t, nil)
	e.worker(worker.Config{}, map[string]worker.Handler{
		"slow": func(ctx context.Context, j *worker.Job) error {
			<-ctx.Done()
			return ctx.Err()
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "slow", MaxAttempts: 1, Timeout: 50 * time.Millisecond})
	j := e.wait(id)
	if j.State != coordinator.StateDiscarded || !strings.Contains(j.Errors[0].Error, "timed out") {
		t.Fatalf("job = %s errors %+v", j.State, j.Errors)
	}
}

func TestCancelRequestCancelsHandler(t *testing.T) {
	e := newEnv(t, nil)
	started := make(chan struct{})
	causes := make(chan error, 1)
	e.worker(worker.Config{}, map[string]worker.Handler{
		"long": func(ctx context.Context, j *worker.Job) error {
			close(started)
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "long"})
	<-started
	if _, err := e.c.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	j := e.wait(id)
	if j.State != coordinator.StateCancelled {
		t.Fatalf("state %s", j.State)
	}
	if cause := <-causes; !errors.Is(cause, worker.ErrCancelRequested) {
		t.Fatalf("handler's context cause = %v", cause)
	}
}

// TestRetriedJobNotCancelledByEarlierRequest: a cancel request is for the
// run it was made during (promise 4: what another party writes applies to
// what it was written for). A job cancelled on request, then retried by an
// operator, runs again on the same worker within the minute the worker
// remembers requests for runs that have not started yet: the old request,
// older than the new run's token, must not cancel the new run.
func TestRetriedJobNotCancelledByEarlierRequest(t *testing.T) {
	e := newEnv(t, nil)
	var runs atomic.Int32
	started := make(chan struct{}, 2)
	e.worker(worker.Config{}, map[string]worker.Handler{
		"long": func(ctx context.Context, j *worker.Job) error {
			first := runs.Add(1) == 1
			started <- struct{}{}
			if first {
				<-ctx.Done()
				return ctx.Err()
			}
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(500 * time.Millisecond):
				return nil
			}
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "long"})
	<-started
	if _, err := e.c.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if j := e.wait(id); j.State != coordinator.StateCancelled {
		t.Fatalf("after the cancel request: %s, want cancelled", j.State)
	}
	if _, err := e.c.Retry(context.Background(), id); err != nil {
		t.Fatalf("retry: %v", err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the retried job did not run again")
	}
	if j := e.wait(id); j.State != coordinator.StateCompleted {
		t.Fatalf("retried job ended %s (errors %+v), want completed: the cancel request of its earlier run cancelled the new run (token %d)", j.State, j.Errors, j.Token)
	}
}

func TestControlFlowErrors(t *testing.T) {
	e := newEnv(t, nil)
	var snoozes atomic.Int32
	e.worker(worker.Config{Maintain: true}, map[string]worker.Handler{
		"snoozer": func(ctx context.Context, j *worker.Job) error {
			if snoozes.Add(1) <= 2 {
				return worker.JobSnooze(10 * time.Millisecond)
			}
			return j.SetResult(j.Attempt)
		},
		"quitter": func(ctx context.Context, j *worker.Job) error { return worker.JobCancel(errors.New("no point")) },
	})
	sn := e.enqueue(coordinator.EnqueueParams{Kind: "snoozer", MaxAttempts: 1})
	q := e.enqueue(coordinator.EnqueueParams{Kind: "quitter"})
	if j := e.wait(sn); j.State != coordinator.StateCompleted || string(j.Result) != "1" {
		t.Fatalf("snoozed job: %s result %s (a snooze must not use an attempt)", j.State, j.Result)
	}
	if j := e.wait(q); j.State != coordinator.StateCancelled || j.Attempt != 1 || !strings.Contains(j.Errors[0].Error, "no point") {
		t.Fatalf("cancelled job: %+v", j)
	}
}

func TestRetryThenSucceed(t *testing.T) {
	e := newEnv(t, nil)
	var calls atomic.Int32
	e.worker(worker.Config{Maintain: true}, map[string]worker.Handler{
		"flaky": func(ctx context.Context, j *worker.Job) error {
			if calls.Add(1) == 1 {
				return worker.JobRetryAt(time.Now().Add(20*time.Millisecond), errors.New("transient"))
			}
			return nil
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "flaky"})
	j := e.wait(id)
	if j.State != coordinator.StateCompleted || j.Attempt != 2 || len(j.Errors) != 1 {
		t.Fatalf("job: %s attempt %d errors %+v", j.State, j.Attempt, j.Errors)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	e := newEnv(t, nil)
	var cur, peak atomic.Int32
	release := make(chan struct{})
	e.worker(worker.Config{Concurrency: 3}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error {
			n := cur.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			<-release
			cur.Add(-1)
			return nil
		},
	})
	var ids []string
	for range 10 {
		ids = append(ids, e.enqueue(coordinator.EnqueueParams{Kind: "k"}))
	}
	deadline := time.Now().Add(10 * time.Second)
	for cur.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	for _, id := range ids {
		e.wait(id)
	}
	if peak.Load() != 3 {
		t.Fatalf("peak concurrency %d, want 3", peak.Load())
	}
}

// stuckRenewals makes every lease renewal hang until its deadline, as a
// daemon cut off from its store would see.
type stuckRenewals struct {
	kv.Store
	stuck atomic.Bool
}

func (s *stuckRenewals) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	if s.stuck.Load() {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return s.Store.KeepAliveOnce(ctx, id)
}

// TestSelfFencesBeforeTTL: a worker that cannot renew cancels its handlers
// before the lease could expire, records nothing for them, and goes on
// with a new session.
func TestSelfFencesBeforeTTL(t *testing.T) {
	var sr *stuckRenewals
	e := newEnv(t, func(s kv.Store) kv.Store { sr = &stuckRenewals{Store: s}; return sr })
	const ttl = 2 * time.Second
	started := make(chan time.Time, 4)
	cancelled := make(chan error, 4)
	var runs atomic.Int32
	w := e.worker(worker.Config{LeaseTTL: ttl}, map[string]worker.Handler{
		"long": func(ctx context.Context, j *worker.Job) error {
			if runs.Add(1) > 1 {
				return nil // the run after the new session completes
			}
			started <- time.Now()
			<-ctx.Done()
			cancelled <- context.Cause(ctx)
			return ctx.Err()
		},
	})
	first := w.Session()
	sr.stuck.Store(true)
	id := e.enqueue(coordinator.EnqueueParams{Kind: "long"})
	t0 := <-started
	// The lease was last renewed before t0 (or granted before it), so the
	// server cannot expire it before lastSend+TTL; the handler must be
	// cancelled before t0+TTL at the latest.
	select {
	case cause := <-cancelled:
		if !errors.Is(cause, coordinator.ErrSessionExpired) {
			t.Fatalf("handler cancelled with %v, want ErrSessionExpired", cause)
		}
		if el := time.Since(t0); el >= ttl {
			t.Fatalf("handler cancelled %s after start, not before the %s TTL", el, ttl)
		}
	case <-time.After(2 * ttl):
		t.Fatal("handler not cancelled after its session could not renew")
	}
	sr.stuck.Store(false)
	// The run recorded nothing; the worker's new session takes the job
	// again and completes it.
	j := e.wait(id)
	if j.State != coordinator.StateCompleted || j.Attempt != 1 || j.Rescues != 1 {
		t.Fatalf("job: %s attempt %d rescues %d errors %+v", j.State, j.Attempt, j.Rescues, j.Errors)
	}
	if w.Session() == first || w.SessionsLost() != 1 {
		t.Fatalf("worker did not start a new session (lost %d)", w.SessionsLost())
	}
}

func TestGracefulStopDrainsThenReleases(t *testing.T) {
	e := newEnv(t, nil)
	block := make(chan struct{})
	var startedN sync.WaitGroup
	startedN.Add(2)
	w, err := worker.New(e.c, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("quick", func(ctx context.Context, j *worker.Job) error { startedN.Done(); <-block; return nil })
	w.Handle("stubborn", func(ctx context.Context, j *worker.Job) error { startedN.Done(); <-ctx.Done(); return ctx.Err() })
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	quick := e.enqueue(coordinator.EnqueueParams{Kind: "quick"})
	stubborn := e.enqueue(coordinator.EnqueueParams{Kind: "stubborn", MaxAttempts: 1})
	startedN.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	go func() { time.Sleep(50 * time.Millisecond); close(block) }()
	if err := w.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want a drain deadline error", err)
	}
	if j, _ := e.c.Get(context.Background(), quick); j.State != coordinator.StateCompleted {
		t.Fatalf("quick job %s: draining did not let it finish", j.State)
	}
	j, _ := e.c.Get(context.Background(), stubborn)
	if j.State != coordinator.StateAvailable || j.Attempt != 0 {
		t.Fatalf("stubborn job %s attempt %d: want released, attempt not used", j.State, j.Attempt)
	}
	if ws, _ := e.c.Workers(context.Background()); len(ws) != 0 {
		t.Fatalf("worker still registered after Stop: %+v", ws)
	}
}

// TestStaleWriteFromHandlerRefused: a handler whose job was taken over
// gets ErrLeaseLost from its checkpoint, and the worker records nothing.
func TestStaleWriteFromHandlerRefused(t *testing.T) {
	e := newEnv(t, nil)
	started := make(chan *worker.Job, 1)
	proceed := make(chan struct{})
	got := make(chan error, 1)
	w := e.worker(worker.Config{}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error {
			started <- j
			<-proceed
			err := j.Checkpoint(context.Background(), 1)
			got <- err
			return err
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k", MaxAttempts: 1})
	<-started
	// Another party revokes the worker's lease (as an expiry would) and
	// reaps the job before the handler writes.
	if err := e.store.Revoke(context.Background(), w.Session().Lease()); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	if err := <-got; !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("checkpoint after lease loss: %v, want ErrLeaseLost", err)
	}
	j := e.waitState(id, coordinator.StateCompleted)
	if j.Attempt != 1 || len(j.Errors) != 1 {
		// One lost run (recorded by the reaper), then a clean run that
		// completed: the lost run recorded no failure of its own.
		t.Fatalf("job attempt %d errors %+v", j.Attempt, j.Errors)
	}
}

// TestGracefulStopAfterSessionRenewal: a worker whose first session was
// lost and replaced still drains at Stop: the renewed session outlives the
// claim loop, so running handlers finish and are recorded.
func TestGracefulStopAfterSessionRenewal(t *testing.T) {
	var sr *stuckRenewals
	e := newEnv(t, func(s kv.Store) kv.Store { sr = &stuckRenewals{Store: s}; return sr })
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	w, err := worker.New(e.c, worker.Config{LeaseTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(ctx context.Context, j *worker.Job) error {
		started <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := w.Session()
	sr.stuck.Store(true)
	<-first.Ctx().Done() // the first session fenced itself
	sr.stuck.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for w.Session() == first && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	<-started
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- w.Stop(ctx)
	}()
	time.Sleep(100 * time.Millisecond) // Stop is draining; the handler still runs
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if j, _ := e.c.Get(context.Background(), id); j.State != coordinator.StateCompleted || j.Rescues != 0 {
		t.Fatalf("job %s rescues %d: the drain did not let it finish", j.State, j.Rescues)
	}
}

// A handler cancelled by an operator that returns an error of its own has
// that error recorded with the cancel; one that returns its context's
// error has the cancel alone.
func TestCancelRequestKeepsHandlerError(t *testing.T) {
	e := newEnv(t, nil)
	started := make(chan string, 4)
	e.worker(worker.Config{}, map[string]worker.Handler{
		"long": func(ctx context.Context, j *worker.Job) error {
			started <- j.ID
			<-ctx.Done()
			switch string(j.Payload) {
			case `"own"`:
				return errors.New("partial upload of 3 files")
			case `"cause"`: // as an --exec command's error names it
				return fmt.Errorf("command stopped (%w): killed", context.Cause(ctx))
			case `"wrapped"`:
				return fmt.Errorf("upload part 3: %w", ctx.Err())
			}
			return ctx.Err()
		},
	})
	for _, payload := range []string{`"own"`, `"ctx"`, `"cause"`, `"wrapped"`} {
		id := e.enqueue(coordinator.EnqueueParams{Kind: "long", Payload: json.RawMessage(payload)})
		if got := <-started; got != id {
			t.Fatalf("started %s, want %s", got, id)
		}
		if _, err := e.c.Cancel(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		j := e.wait(id)
		if j.State != coordinator.StateCancelled || len(j.Errors) != 1 {
			t.Fatalf("%s: job %s errors %+v", payload, j.State, j.Errors)
		}
		want := worker.ErrCancelRequested.Error()
		switch payload {
		case `"own"`:
			want += " (the handler returned: partial upload of 3 files)"
		case `"cause"`:
			want = "command stopped (" + want + "): killed"
		case `"wrapped"`:
			want += " (the handler returned: upload part 3: context canceled)"
		}
		if got := j.Errors[0].Error; got != want {
			t.Fatalf("%s: recorded error %q, want %q", payload, got, want)
		}
	}
}

// deafToCancels is a store whose watches of cancel requests deliver
// nothing: a worker learns of a request only from its outcome's write.
type deafToCancels struct{ kv.Store }

func (s deafToCancels) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	if !strings.HasSuffix(prefix, "/c/") {
		return s.Store.Watch(ctx, prefix, fromRev)
	}
	ch := make(chan kv.WatchResponse)
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch
}

// TestOutcomeFindingACancelRequestSaysCancel: a failed or snoozed run
// whose outcome write finds a cancel request its worker had not seen
// records the job cancelled, keeping a failure's error, and OnOutcome
// says cancel with that state, as Outcome documents (metrics count it a
// cancellation, not a retry). With the op left as the handler asked, no
// test failed, and OnOutcome said fail, or snooze, of a cancelled job.
func TestOutcomeFindingACancelRequestSaysCancel(t *testing.T) {
	e := newEnv(t, func(s kv.Store) kv.Store { return deafToCancels{s} })
	outcomes := make(chan worker.Outcome, 2)
	handler := func(ret error) worker.Handler {
		return func(ctx context.Context, j *worker.Job) error {
			if _, err := e.c.Cancel(ctx, j.ID); err != nil {
				return fmt.Errorf("cancel: %w", err)
			}
			return ret
		}
	}
	e.worker(worker.Config{OnOutcome: func(o worker.Outcome) { outcomes <- o }}, map[string]worker.Handler{
		"fails":   handler(errors.New("boom")),
		"snoozes": handler(worker.JobSnooze(time.Hour)),
	})
	for _, kind := range []string{"fails", "snoozes"} {
		id := e.enqueue(coordinator.EnqueueParams{Kind: kind})
		var o worker.Outcome
		select {
		case o = <-outcomes:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no outcome within 20s", kind)
		}
		if o.Op != "cancel" || o.Err != nil || o.State != coordinator.StateCancelled {
			t.Errorf("%s: outcome %s (state %s, err %v, handler's %v), want cancel with state cancelled", kind, o.Op, o.State, o.Err, o.HandlerErr)
		}
		j := e.wait(id)
		if j.State != coordinator.StateCancelled {
			t.Errorf("%s: job %s, want cancelled", kind, j.State)
		}
		if kept := len(j.Errors) == 1 && j.Errors[0].Error == "boom"; kept != (kind == "fails") {
			t.Errorf("%s: job's errors %+v", kind, j.Errors)
		}
	}
}
