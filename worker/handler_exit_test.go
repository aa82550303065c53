package worker_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/worker"
)

// TestHandlerGoexitFailsAttempt: a handler that exits its goroutine
// without returning (runtime.Goexit, as t.FailNow does) fails its
// attempt and gives its slot back, rather than leaving its job running
// and its slot taken for good.
func TestHandlerGoexitFailsAttempt(t *testing.T) {
	e := newEnv(t, nil)
	w := e.worker(worker.Config{Concurrency: 1}, map[string]worker.Handler{
		"exit": func(ctx context.Context, j *worker.Job) error { runtime.Goexit(); return nil },
		"ok":   func(ctx context.Context, j *worker.Job) error { return nil },
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "exit", MaxAttempts: 1})
	j := e.wait(id)
	if j.State != coordinator.StateDiscarded || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "without returning") {
		t.Fatalf("job %s errors %+v", j.State, j.Errors)
	}
	// The only slot is free again.
	if j := e.wait(e.enqueue(coordinator.EnqueueParams{Kind: "ok"})); j.State != coordinator.StateCompleted {
		t.Fatalf("next job %s", j.State)
	}
	if n := w.Running(); n != 0 {
		t.Fatalf("Running = %d after the handlers ended", n)
	}
}

type nilPtrErr struct{ msg string }

func (e *nilPtrErr) Error() string { return e.msg } // panics on a nil *nilPtrErr

// TestHandlerErrorWhoseErrorMethodPanics: a handler that returns a typed
// nil error (whose Error method panics) fails its attempt, as a panic in
// the handler would, rather than crashing the process as the outcome is
// recorded.
func TestHandlerErrorWhoseErrorMethodPanics(t *testing.T) {
	e := newEnv(t, nil)
	e.worker(worker.Config{}, map[string]worker.Handler{
		"typednil": func(ctx context.Context, j *worker.Job) error {
			var err *nilPtrErr
			return err
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "typednil", MaxAttempts: 1})
	j := e.wait(id)
	if j.State != coordinator.StateDiscarded || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "Error method panicked") {
		t.Fatalf("job %s errors %+v", j.State, j.Errors)
	}
}

// TestCheckpointAfterRunEndedIsLeaseLost: a write through the Job after
// its run's outcome was recorded (a handler that outlived AbandonGrace, a
// goroutine it left behind) is refused with fence.ErrLeaseLost, as
// Job.Checkpoint documents for a run that is over.
func TestCheckpointAfterRunEndedIsLeaseLost(t *testing.T) {
	e := newEnv(t, nil)
	jobs := make(chan *worker.Job, 1)
	e.worker(worker.Config{}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error { jobs <- j; return nil },
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	if j := e.wait(id); j.State != coordinator.StateCompleted {
		t.Fatalf("job %s", j.State)
	}
	err := (<-jobs).Checkpoint(context.Background(), 1)
	if !errors.Is(err, fence.ErrLeaseLost) || !errors.Is(err, coordinator.ErrWrongState) {
		t.Fatalf("checkpoint after the run ended: %v, want fence.ErrLeaseLost (and coordinator.ErrWrongState)", err)
	}
}

// doneWatch is a context that says when its Done is first asked for: when
// Stop begins to wait on it.
type doneWatch struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func (c *doneWatch) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

// TestSecondStopInterruptsDrain: a Stop called while another drains
// without a deadline honours its own ctx: when it ends, running handlers
// are interrupted (cause ErrShutdown) and their jobs released, and both
// calls return.
func TestSecondStopInterruptsDrain(t *testing.T) {
	e := newEnv(t, nil)
	started := make(chan struct{})
	causes := make(chan error, 1)
	w, err := worker.New(e.c, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(ctx context.Context, j *worker.Job) error {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	<-started
	first := &doneWatch{Context: context.Background(), asked: make(chan struct{})}
	firstDone := make(chan error, 1)
	go func() { firstDone <- w.Stop(first) }()
	<-first.asked // the first Stop is draining, with no deadline
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	second := make(chan error, 1)
	go func() { second <- w.Stop(ctx) }()
	watchdog := time.NewTimer(20 * time.Second)
	defer watchdog.Stop()
	select {
	case err := <-second:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("second Stop = %v, want its ctx's error", err)
		}
	case <-watchdog.C:
		t.Fatal("a second Stop whose ctx ended waits for the first one's drain")
	}
	if err := <-firstDone; err != nil {
		t.Fatalf("first Stop = %v", err)
	}
	if cause := <-causes; !errors.Is(cause, worker.ErrShutdown) {
		t.Fatalf("handler's cause = %v, want ErrShutdown", cause)
	}
	if j, _ := e.c.Get(context.Background(), id); j.State != coordinator.StateAvailable || j.Attempt != 0 {
		t.Fatalf("job %s attempt %d: want released", j.State, j.Attempt)
	}
}

// TestStartRefusesNilHandler: a nil handler is refused at Start with an
// error that says so, not one that blames a middleware the kind lacks.
func TestStartRefusesNilHandler(t *testing.T) {
	e := newEnv(t, nil)
	w, err := worker.New(e.c, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", nil)
	err = w.Start(context.Background())
	if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "nil handler for kind k") {
		t.Fatalf("Start = %v, want ErrInvalid naming the nil handler", err)
	}
	_ = w.Stop(context.Background())
}

// TestNegativeSnoozeRunsAgainAtOnce: JobSnooze(time.Until(t)) for a t
// just past runs the job again at once, as a snooze to now would; it does
// not discard the job.
func TestNegativeSnoozeRunsAgainAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	var snoozed atomic.Bool
	e.worker(worker.Config{}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error {
			if snoozed.CompareAndSwap(false, true) {
				return worker.JobSnooze(time.Until(time.Now().Add(-time.Second)))
			}
			return nil
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k", MaxAttempts: 1})
	if j := e.wait(id); j.State != coordinator.StateCompleted || j.Attempt != 1 {
		t.Fatalf("job %s attempt %d errors %+v, want completed on its first attempt", j.State, j.Attempt, j.Errors)
	}
}

// TestStopIdleWithEndedContext: Stop of a worker with nothing to drain
// succeeds even if its ctx has already ended: the drain finished in time.
func TestStopIdleWithEndedContext(t *testing.T) {
	e := newEnv(t, nil)
	w, err := worker.New(e.c, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(ctx context.Context, j *worker.Job) error { return nil })
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("Stop of an idle worker = %v, want nil", err)
	}
}
