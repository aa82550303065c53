package workertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
)

// ErrWontRun is returned by Work for a job the worker would not run now:
// one scheduled for later, a live job's duplicate, or one of a kind that
// has no handler or a queue that the worker does not serve.
var ErrWontRun = errors.New("workertest: the job would not run now")

// stopTimeout bounds the worker's stop at the end of the test.
const stopTimeout = 30 * time.Second

// Config configures a test worker.
type Config struct {
	// Worker configures the worker: Concurrency, Queues, Middleware,
	// LeaseTTL and the rest. Its OnOutcome, if set, is called too. Its
	// Logger defaults to one that writes warnings and errors to the
	// test's log.
	Worker worker.Config
	// Coordinator configures the coordinator over Store. Its Logger
	// defaults as Worker's.
	Coordinator coordinator.Config
	// Store holds the jobs; nil opens a Pebble store in t.TempDir(),
	// closed when the test ends. A store given here is not closed.
	Store kv.Store
}

// Worker is a worker.Worker in a test, with the coordinator it runs on.
type Worker struct {
	t testing.TB
	c *coordinator.Coordinator
	w *worker.Worker

	startOnce sync.Once
	startErr  error
	running   atomic.Bool

	mu   sync.Mutex
	runs map[string]*runs // by job id, created by whichever side comes first
}

// runs are the outcomes of one job's runs, in order, and how many Wait
// has returned.
type runs struct {
	outcomes []worker.Outcome
	read     int
	more     chan struct{} // closed when an outcome is added
}

// New returns a test worker: register handlers with Worker().Handle (or
// HandleWith, worker.HandleArgs) before the first Work or Start. It fails
// t if the configuration is invalid.
func New(t testing.TB, cfg Config) *Worker {
	t.Helper()
	// t.Output, not t.Log: a log line is written as is, neither ended by a
	// blank line nor placed at slog's own source line.
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if cfg.Worker.Logger == nil {
		cfg.Worker.Logger = log
	}
	if cfg.Coordinator.Logger == nil {
		cfg.Coordinator.Logger = log
	}
	store := cfg.Store
	if store == nil {
		ls, err := localstore.Open(t.TempDir(), localstore.Options{Logger: cfg.Coordinator.Logger})
		if err != nil {
			t.Fatalf("workertest: open a store: %v", err)
		}
		t.Cleanup(func() { _ = ls.Close() }) // after the worker's stop: cleanups run last first
		store = ls
	}
	c, err := coordinator.New(store, cfg.Coordinator)
	if err != nil {
		t.Fatalf("workertest: %v", err)
	}
	tw := &Worker{t: t, c: c, runs: map[string]*runs{}}
	prev := cfg.Worker.OnOutcome
	cfg.Worker.OnOutcome = func(o worker.Outcome) {
		tw.add(o)
		if prev != nil {
			prev(o)
		}
	}
	tw.w, err = worker.New(c, cfg.Worker)
	if err != nil {
		t.Fatalf("workertest: %v", err)
	}
	t.Cleanup(func() {
		if !tw.running.Load() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := tw.w.Stop(ctx); err != nil {
			t.Errorf("workertest: stopping the worker: %v", err)
		}
	})
	return tw
}

// Worker returns the worker, to register handlers on before the first
// Work or Start.
func (tw *Worker) Worker() *worker.Worker { return tw.w }

// Coordinator returns the coordinator the worker runs on: to enqueue,
// get, list or cancel jobs, as the code under test does.
func (tw *Worker) Coordinator() *coordinator.Coordinator { return tw.c }

// Start starts the worker, once (Work and Wait start it too). Handlers
// registered after it panic, as on any worker.
func (tw *Worker) Start(ctx context.Context) error {
	tw.startOnce.Do(func() {
		tw.startErr = tw.w.Start(ctx)
		tw.running.Store(tw.startErr == nil)
	})
	return tw.startErr
}

// runsOf returns job id's runs; the caller holds tw.mu.
func (tw *Worker) runsOf(id string) *runs {
	r := tw.runs[id]
	if r == nil {
		r = &runs{more: make(chan struct{})}
		tw.runs[id] = r
	}
	return r
}

// add records an outcome (worker.Config.OnOutcome). It never waits for a
// reader: a test need not wait for every run.
func (tw *Worker) add(o worker.Outcome) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	r := tw.runsOf(o.Job.ID)
	r.outcomes = append(r.outcomes, o)
	close(r.more)
	r.more = make(chan struct{})
}

// next returns job id's next outcome not yet returned, once there is one.
func (tw *Worker) next(ctx context.Context, id string) (worker.Outcome, error) {
	for {
		tw.mu.Lock()
		r := tw.runsOf(id)
		if r.read < len(r.outcomes) {
			o := r.outcomes[r.read]
			r.read++
			tw.mu.Unlock()
			return o, nil
		}
		more := r.more
		tw.mu.Unlock()
		select {
		case <-more:
		case <-ctx.Done():
			return worker.Outcome{}, context.Cause(ctx)
		}
	}
}

// Result is one run of a job.
type Result struct {
	// Outcome is what the worker wrote (Op: complete, fail, snooze,
	// cancel, ...) and what the handler returned (HandlerErr). Err is
	// set if the write was refused or failed.
	Outcome worker.Outcome
	// Job is the job's record once the outcome was written: its state,
	// result, checkpoint, errors and attempt.
	Job *coordinator.Job
}

// Work enqueues p and runs the job once: it returns when the worker has
// recorded the run's outcome, or with ctx's error. A job that would not
// run now (delayed, a live job's duplicate, no handler for its kind, a
// queue not served) is ErrWontRun, and is left in the store.
func (tw *Worker) Work(ctx context.Context, p coordinator.EnqueueParams) (*Result, error) {
	if !slices.Contains(tw.w.Kinds(), p.Kind) {
		return nil, fmt.Errorf("%w: no handler for kind %q: register one with Worker().Handle before Work", ErrWontRun, p.Kind)
	}
	if err := tw.Start(ctx); err != nil {
		return nil, err
	}
	res, err := tw.c.Enqueue(ctx, p)
	if err != nil {
		return nil, err
	}
	j := res.Job
	switch {
	case res.Existed:
		return nil, fmt.Errorf("%w: a live job with unique key %q exists (job %s, %s)", ErrWontRun, j.UniqueKey, j.ID, j.State)
	case j.State != coordinator.StateAvailable:
		return nil, fmt.Errorf("%w: job %s is %s until %s", ErrWontRun, j.ID, j.State, j.ScheduledAt.Format(time.RFC3339Nano))
	case !slices.Contains(tw.w.Queues(), j.Queue):
		return nil, fmt.Errorf("%w: job %s is in queue %q, which the worker does not serve (Config.Worker.Queues)", ErrWontRun, j.ID, j.Queue)
	}
	return tw.Wait(ctx, j.ID)
}

// Wait waits for the next outcome of job id, enqueued by the code under
// test (Work's ErrWontRun cases are not checked: a delayed job runs once
// due, if the worker maintains), starting the worker if need be.
func (tw *Worker) Wait(ctx context.Context, id string) (*Result, error) {
	if err := tw.Start(ctx); err != nil {
		return nil, err
	}
	o, err := tw.next(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("workertest: waiting for a run of job %s: %w", id, err)
	}
	j, err := tw.c.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("workertest: read job %s after its run: %w", id, err)
	}
	return &Result{Outcome: o, Job: j}, nil
}

// RequireEnqueued fails t unless c holds a job of kind that match accepts
// (nil accepts any), and returns the newest such job.
func RequireEnqueued(t testing.TB, c *coordinator.Coordinator, kind string, match func(*coordinator.Job) bool) *coordinator.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var found *coordinator.Job
	n := 0
	for after := ""; ; {
		page, err := c.List(ctx, coordinator.ListParams{Kind: kind, Limit: coordinator.MaxListLimit, After: after})
		if err != nil {
			t.Fatalf("workertest: list jobs of kind %q: %v", kind, err)
		}
		for _, j := range page.Jobs {
			n++
			if match == nil || match(j) {
				found = j // in id order, which is enqueue order: the last is the newest
			}
		}
		if after = page.Next; after == "" {
			break
		}
	}
	if found == nil {
		t.Fatalf("workertest: no job of kind %q enqueued that matches (%d of the kind)", kind, n)
	}
	return found
}
