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
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/worker"
)

func TestMiddlewareOrderAndMetadata(t *testing.T) {
	e := newEnv(t, nil)
	var mu sync.Mutex
	var trace []string
	mark := func(name string) worker.Middleware {
		return func(next worker.Handler) worker.Handler {
			return func(ctx context.Context, j *worker.Job) error {
				mu.Lock()
				trace = append(trace, name+">")
				mu.Unlock()
				err := next(ctx, j)
				mu.Lock()
				trace = append(trace, "<"+name)
				mu.Unlock()
				return err
			}
		}
	}
	// A tenancy middleware reads the metadata an enqueue hook wrote and
	// refuses jobs without a tenant.
	tenancy := func(next worker.Handler) worker.Handler {
		return func(ctx context.Context, j *worker.Job) error {
			var md struct {
				Tenant string `json:"tenant"`
			}
			if err := json.Unmarshal(j.Metadata, &md); err != nil || md.Tenant == "" {
				return worker.JobCancel(errors.New("no tenant"))
			}
			return next(ctx, j)
		}
	}
	w, err := worker.New(e.c, worker.Config{Middleware: []worker.Middleware{mark("outer"), tenancy, mark("inner")}})
	if err != nil {
		t.Fatal(err)
	}
	w.HandleWith("k", func(ctx context.Context, j *worker.Job) error {
		mu.Lock()
		trace = append(trace, "handler")
		mu.Unlock()
		return nil
	}, worker.KindOptions{Middleware: []worker.Middleware{mark("kind")}})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	ok := e.enqueue(coordinator.EnqueueParams{Kind: "k", Metadata: json.RawMessage(`{"tenant":"acme"}`)})
	if j := e.wait(ok); j.State != coordinator.StateCompleted {
		t.Fatalf("job with a tenant: %s %+v", j.State, j.Errors)
	}
	mu.Lock()
	got := strings.Join(trace, " ")
	mu.Unlock()
	if want := "outer> inner> kind> handler <kind <inner <outer"; got != want {
		t.Fatalf("middleware order %q, want %q", got, want)
	}
	bad := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	if j := e.wait(bad); j.State != coordinator.StateCancelled || !strings.Contains(j.Errors[0].Error, "no tenant") {
		t.Fatalf("job without a tenant: %s %+v", j.State, j.Errors)
	}
}

func TestKindOptions(t *testing.T) {
	e := newEnv(t, nil)
	var attempts atomic.Int32
	w2, err := worker.New(e.c, worker.Config{Queues: []string{"kinds"}})
	if err != nil {
		t.Fatal(err)
	}
	// flaky: at most 2 attempts, retried at once by its own policy.
	w2.HandleWith("flaky", func(ctx context.Context, j *worker.Job) error {
		attempts.Add(1)
		return errors.New("down")
	}, worker.KindOptions{MaxAttempts: 2, RetryPolicy: func(int, *coordinator.Job) time.Duration { return 0 }})
	// slow: 50ms per attempt unless the job says otherwise.
	w2.HandleWith("slow", func(ctx context.Context, j *worker.Job) error {
		<-ctx.Done()
		return ctx.Err()
	}, worker.KindOptions{Timeout: 50 * time.Millisecond, MaxAttempts: 1})
	if err := w2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w2.Stop(context.Background()) })
	// Retries are promoted by the maintenance leader.
	e.worker(worker.Config{Maintain: true, Queues: []string{"none"}}, map[string]worker.Handler{"none": func(context.Context, *worker.Job) error { return nil }})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "flaky", Queue: "kinds"}) // max attempts 25 by default
	j := e.wait(id)
	if j.State != coordinator.StateDiscarded || j.Attempt != 2 || j.MaxAttempts != 2 || attempts.Load() != 2 {
		t.Fatalf("flaky: %s after %d attempts (max %d, ran %d)", j.State, j.Attempt, j.MaxAttempts, attempts.Load())
	}
	// A job's own max attempts win over the kind's: one enqueued to run
	// once was retried up to the kind's 2.
	attempts.Store(0)
	id = e.enqueue(coordinator.EnqueueParams{Kind: "flaky", Queue: "kinds", MaxAttempts: 1})
	if j = e.wait(id); j.State != coordinator.StateDiscarded || j.Attempt != 1 || j.MaxAttempts != 1 || attempts.Load() != 1 {
		t.Fatalf("flaky with max attempts 1: %s after %d attempts (max %d, ran %d)", j.State, j.Attempt, j.MaxAttempts, attempts.Load())
	}
	start := time.Now()
	id = e.enqueue(coordinator.EnqueueParams{Kind: "slow", Queue: "kinds"})
	j = e.wait(id)
	if j.State != coordinator.StateDiscarded || !strings.Contains(j.Errors[0].Error, "timed out") || time.Since(start) > 5*time.Second {
		t.Fatalf("slow: %s %+v", j.State, j.Errors)
	}
}

// peakHandler returns a handler that takes d, and the most of its calls
// ever running at once.
func peakHandler(d time.Duration) (worker.Handler, *atomic.Int32) {
	var cur, peak atomic.Int32
	return func(ctx context.Context, j *worker.Job) error {
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(d)
		cur.Add(-1)
		return nil
	}, &peak
}

func TestQueueConcurrencyPerWorker(t *testing.T) {
	e := newEnv(t, nil)
	h, peak := peakHandler(20 * time.Millisecond)
	e.worker(worker.Config{Concurrency: 10, Queues: []string{"default", "narrow"}, QueueConcurrency: map[string]int{"narrow": 2}},
		map[string]worker.Handler{"k": h})
	var ids []string
	for range 12 {
		ids = append(ids, e.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: "narrow"}))
	}
	for _, id := range ids {
		if j := e.wait(id); j.State != coordinator.StateCompleted {
			t.Fatalf("job %s: %s", id, j.State)
		}
	}
	if p := peak.Load(); p > 2 || p < 1 {
		t.Fatalf("peak %d jobs of queue narrow at once, want at most 2", p)
	}
	if _, err := worker.New(e.c, worker.Config{QueueConcurrency: map[string]int{"other": 1}}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("limit for a queue not served: %v", err)
	}
}

// TestConcurrencyBoundsRunsAcrossClaimsInFlight: slots are reserved before
// a claim, and two claims are in flight at once; the handlers running at
// once never exceed Concurrency, over jobs of two queues.
func TestConcurrencyBoundsRunsAcrossClaimsInFlight(t *testing.T) {
	e := newEnv(t, nil)
	h, peak := peakHandler(time.Millisecond)
	e.worker(worker.Config{Concurrency: 5, Queues: []string{"default", "other"}}, map[string]worker.Handler{"k": h})
	var ids []string
	for i := range 200 {
		q := []string{"default", "other"}[i%2]
		ids = append(ids, e.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: q}))
	}
	for _, id := range ids {
		if j := e.wait(id); j.State != coordinator.StateCompleted {
			t.Fatalf("job %s: %s", id, j.State)
		}
	}
	if p := peak.Load(); p > 5 || p < 2 {
		t.Fatalf("peak %d handlers at once, want 2 to 5", p)
	}
}

func TestPausedQueueRunsAfterResume(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, _, err := e.c.PauseQueue(ctx, coordinator.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	e.worker(worker.Config{PollInterval: time.Hour}, map[string]worker.Handler{"k": func(context.Context, *worker.Job) error { return nil }})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	time.Sleep(200 * time.Millisecond)
	if j, _ := e.c.Get(ctx, id); j.State != coordinator.StateAvailable {
		t.Fatalf("job of a paused queue is %s", j.State)
	}
	if _, _, err := e.c.ResumeQueue(ctx, coordinator.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	// The resume wakes the worker (no poll for an hour).
	if j := e.wait(id); j.State != coordinator.StateCompleted {
		t.Fatalf("after resume: %s", j.State)
	}
}

type reportArgs struct {
	Day string `json:"day"`
}

func (reportArgs) Kind() string { return "report" }

func TestPeriodicAndTypedArgs(t *testing.T) {
	e := newEnv(t, nil)
	got := make(chan string, 8)
	w, err := worker.New(e.c, worker.Config{Maintain: true, Periodic: []coordinator.PeriodicJob{
		{Name: "reports", Spec: "@every 1s", Job: coordinator.EnqueueParams{Kind: "report", Payload: json.RawMessage(`{"day":"today"}`)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	worker.HandleArgs(w, func(ctx context.Context, j *worker.Job, a reportArgs) error {
		got <- a.Day
		return nil
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	select {
	case day := <-got:
		if day != "today" {
			t.Fatalf("typed args: %q", day)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no periodic job ran within 10s")
	}
	for _, cfg := range []worker.Config{
		{Periodic: []coordinator.PeriodicJob{{Name: "x", Spec: "@hourly", Job: coordinator.EnqueueParams{Kind: "k"}}}},
		{Maintain: true, Periodic: []coordinator.PeriodicJob{{Name: "x", Spec: "every hour", Job: coordinator.EnqueueParams{Kind: "k"}}}},
	} {
		if _, err := worker.New(e.c, cfg); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("worker.New(%+v): %v, want ErrInvalid", cfg, err)
		}
	}
}

// TestPeriodicKindWithoutHandlerWarnsEmbedded: in embedded mode, a
// periodic job whose kind this worker has no handler for is warned about
// at Start, naming it (its jobs would fail every attempt unless another
// worker of the process runs the kind); one with a handler is not.
func TestPeriodicKindWithoutHandlerWarnsEmbedded(t *testing.T) {
	e := newEnv(t, nil)
	var logged testutil.SyncBuffer
	e.worker(worker.Config{Maintain: true, Logger: slog.New(slog.NewTextHandler(&logged, nil)), Periodic: []coordinator.PeriodicJob{
		{Name: "nightly", Spec: "@daily", Job: coordinator.EnqueueParams{Kind: "report"}},
		{Name: "hourly", Spec: "@hourly", Job: coordinator.EnqueueParams{Kind: "k"}},
	}}, map[string]worker.Handler{"k": func(context.Context, *worker.Job) error { return nil }})
	out := logged.String()
	if !strings.Contains(out, "periodic job's kind has no handler on this worker") || !strings.Contains(out, "periodic=nightly kind=report") {
		t.Fatalf("no warning naming the periodic job without a handler:\n%s", out)
	}
	if strings.Contains(out, "periodic=hourly") {
		t.Fatalf("warned about a periodic job whose kind has a handler:\n%s", out)
	}
}

// TestMiddlewareTellsSnoozeAndCancel: a middleware tells a snooze and a
// JobCancel from a failure with IsSnooze and IsCancel, wrapped or not
// (a metrics middleware counted snoozes as errors: nothing said which
// they were).
func TestMiddlewareTellsSnoozeAndCancel(t *testing.T) {
	if d, ok := worker.IsSnooze(fmt.Errorf("later: %w", worker.JobSnooze(time.Minute))); !ok || d != time.Minute {
		t.Fatalf("IsSnooze of a wrapped JobSnooze(1m) = %s, %v", d, ok)
	}
	if !worker.IsCancel(errors.Join(errors.New("x"), worker.JobCancel(nil))) {
		t.Fatal("IsCancel of a joined JobCancel = false")
	}
	for _, err := range []error{nil, errors.New("down"), worker.JobRetryAt(time.Now(), nil)} {
		if _, ok := worker.IsSnooze(err); ok || worker.IsCancel(err) {
			t.Fatalf("%v read as a snooze or a cancel", err)
		}
	}
	e := newEnv(t, nil)
	seen := make(chan string, 2)
	classify := func(next worker.Handler) worker.Handler {
		return func(ctx context.Context, j *worker.Job) error {
			err := next(ctx, j)
			_, snoozed := worker.IsSnooze(err)
			seen <- fmt.Sprintf("%s snooze=%v cancel=%v", j.Kind, snoozed, worker.IsCancel(err))
			return err
		}
	}
	e.worker(worker.Config{Middleware: []worker.Middleware{classify}}, map[string]worker.Handler{
		"s": func(context.Context, *worker.Job) error { return worker.JobSnooze(time.Hour) },
		"c": func(context.Context, *worker.Job) error { return worker.JobCancel(errors.New("bad input")) },
	})
	e.wait(e.enqueue(coordinator.EnqueueParams{Kind: "c"}))
	if got := <-seen; got != "c snooze=false cancel=true" {
		t.Fatalf("middleware saw %q", got)
	}
	e.enqueue(coordinator.EnqueueParams{Kind: "s"})
	if got := <-seen; got != "s snooze=true cancel=false" {
		t.Fatalf("middleware saw %q", got)
	}
}

// TestPayloadThatDoesNotDecodeCancels: a job whose payload does not decode
// into its HandleArgs type ends cancelled at its first attempt, the decode
// error recorded, without its handler being called, even with max
// attempts left (its kind's and its own), as HandleArgs and Typed say:
// retrying cannot fix it. With the decode error returned as a failure,
// no test failed, and such a job was retried to its last attempt (25 by
// default, over days).
func TestPayloadThatDoesNotDecodeCancels(t *testing.T) {
	e := newEnv(t, nil)
	outcomes := make(chan worker.Outcome, 1)
	w, err := worker.New(e.c, worker.Config{OnOutcome: func(o worker.Outcome) { outcomes <- o }})
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan reportArgs, 1)
	worker.HandleArgs(w, func(_ context.Context, _ *worker.Job, a reportArgs) error {
		called <- a
		return nil
	}, worker.KindOptions{MaxAttempts: 5})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	id := e.enqueue(coordinator.EnqueueParams{Kind: "report", Payload: json.RawMessage(`{"day":5}`)})
	var o worker.Outcome
	select {
	case o = <-outcomes:
	case <-time.After(20 * time.Second):
		t.Fatal("no outcome within 20s")
	}
	if o.Op != "cancel" || o.Err != nil || o.State != coordinator.StateCancelled || !worker.IsCancel(o.HandlerErr) {
		t.Fatalf("outcome %s (state %s, err %v, handler's %v), want cancel recorded", o.Op, o.State, o.Err, o.HandlerErr)
	}
	j, err := e.c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != coordinator.StateCancelled || j.Attempt != 1 || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "decode payload of report job") {
		t.Fatalf("job %s attempt %d errors %+v, want cancelled at attempt 1 with the decode error", j.State, j.Attempt, j.Errors)
	}
	select {
	case a := <-called:
		t.Fatalf("handler called with %+v", a)
	default:
	}
}
