package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"golang.org/x/sync/errgroup"
)

// Middleware wraps a handler: it runs code before and after the next one,
// may change the context (tracing spans, loggers, tenants read from
// Job.Metadata) and may change the error. It must call next at most once.
// See Config.Middleware and KindOptions.Middleware.
type Middleware func(next Handler) Handler

// KindOptions are per-kind settings of a worker (HandleWith).
type KindOptions struct {
	// MaxAttempts, if positive, replaces the default max attempts
	// (coordinator.DefaultMaxAttempts) of jobs of the kind: the handler's
	// owner knows best what it can survive. A job enqueued with max
	// attempts of its own keeps them, as a job's own Timeout wins over
	// the kind's: a job enqueued to run once (MaxAttempts 1) is not
	// retried. It is applied (and written to the job) when an attempt
	// fails. Since the default is not told apart from the same number
	// given, a job enqueued with MaxAttempts 25 takes the kind's too.
	MaxAttempts int
	// Timeout bounds each attempt of a job of the kind that sets no
	// timeout of its own (before Config.DefaultTimeout).
	Timeout time.Duration
	// RetryPolicy computes the wait before the next attempt (instead of
	// the coordinator's policy). A handler's JobRetryAt still wins. If it
	// panics, the attempt fails all the same and the coordinator's policy
	// gives the wait; the panic is logged with its stack and the kind,
	// and counted (coordinator.Coordinator.CallUser).
	RetryPolicy coordinator.RetryPolicy
	// Middleware wraps the kind's handler, inside Config.Middleware.
	Middleware []Middleware
}

// HandleWith registers h for kind with per-kind options. It panics if
// called after Start, twice for one kind, or with negative options, as all
// are programming errors.
func (w *Worker) HandleWith(kind string, h Handler, o KindOptions) {
	if o.MaxAttempts < 0 || o.Timeout < 0 {
		panic("worker: negative KindOptions for kind " + kind)
	}
	w.Handle(kind, h)
	w.kindOpts[kind] = o
}

// HandleArgs registers a handler of typed arguments: the kind is
// T.Kind() (called on T's zero value, so it must not depend on the value,
// as River's JobArgs), and the payload is decoded into a T first; a payload
// that does not decode cancels the job. o, if given, are the kind's
// options: at most one. It panics as HandleWith does, and if given more
// than one KindOptions, as all are programming errors.
func HandleArgs[T interface{ Kind() string }](w *Worker, fn func(ctx context.Context, j *Job, args T) error, o ...KindOptions) {
	var zero T
	kind := func() string {
		defer func() {
			if p := recover(); p != nil {
				// A pointer T whose Kind has a value receiver: the
				// runtime's words would not say what to change.
				panic(fmt.Sprintf("worker: HandleArgs: %T.Kind() panicked on the zero %T (%v): use a value type whose Kind does not depend on the value, as River's JobArgs", zero, zero, p))
			}
		}()
		return zero.Kind()
	}()
	if len(o) > 1 {
		// Which one was meant cannot be told: merging or picking one
		// would silently drop settings.
		panic(fmt.Sprintf("worker: HandleArgs for kind %s given %d KindOptions: pass at most one", kind, len(o)))
	}
	var opts KindOptions
	if len(o) > 0 {
		opts = o[0]
	}
	w.HandleWith(kind, Typed(fn), opts)
}

// chain wraps h in mws, the first outermost.
func chain(h Handler, mws []Middleware) Handler {
	for i := len(mws) - 1; i >= 0 && h != nil; i-- {
		if mws[i] == nil {
			return nil
		}
		h = mws[i](h)
	}
	return h
}

// wrapHandlers builds every kind's handler with its middleware, once, at
// Start, before it opens a session. A nil handler, a nil middleware, one
// that returns a nil handler or one that panics while wrapping is an error
// naming the kind.
func (w *Worker) wrapHandlers() (err error) {
	var kind string
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: middleware of kind %s panicked while wrapping its handler: %v", coordinator.ErrInvalid, kind, p)
		}
	}()
	wrapped := make(map[string]Handler, len(w.handlers))
	for k, h := range w.handlers {
		kind = k
		if h == nil {
			return fmt.Errorf("%w: nil handler for kind %s", coordinator.ErrInvalid, k)
		}
		for _, mws := range [][]Middleware{w.kindOpts[k].Middleware, w.cfg.Middleware} {
			if h = chain(h, mws); h == nil {
				return fmt.Errorf("%w: a middleware of kind %s is nil or returned a nil handler", coordinator.ErrInvalid, k)
			}
		}
		wrapped[k] = h
	}
	w.wrapped = wrapped
	return nil
}

// handler returns the handler of kind with its middleware, or nil.
func (w *Worker) handler(kind string) Handler {
	if h, ok := w.wrapped[kind]; ok {
		return h
	}
	return w.handlers[kind]
}

// timeoutOf returns the bound on an attempt of j: its own timeout, else
// its kind's, else the worker's default; 0 for none.
func (w *Worker) timeoutOf(j *coordinator.Job) time.Duration {
	if d := j.Timeout(); d > 0 {
		return d
	}
	if d := w.kindOpts[j.Kind].Timeout; d > 0 {
		return d
	}
	return w.cfg.DefaultTimeout
}

// failOpts returns the options of a failed attempt of j: its kind's max
// attempts, if j has the default ones, and, unless the handler chose a
// retry time, its kind's retry policy.
func (w *Worker) failOpts(j *coordinator.Job, o coordinator.FailOpts) coordinator.FailOpts {
	ko := w.kindOpts[j.Kind]
	if j.MaxAttempts == coordinator.DefaultMaxAttempts {
		o.MaxAttempts = ko.MaxAttempts
	}
	if o.RetryAt.IsZero() && ko.RetryPolicy != nil {
		// A policy that panics leaves the retry to the coordinator's.
		var d time.Duration
		log := func() *slog.Logger {
			return w.log.With(slog.String("job", j.ID), slog.String("kind", j.Kind), slog.Int("attempt", j.Attempt))
		}
		if w.c.CallUser("worker.KindOptions.RetryPolicy", log, func() { d = ko.RetryPolicy(j.Attempt, j) }) == nil {
			o.RetryAt = w.c.Clock().Now().Add(d)
		}
	}
	return o
}

// validateFeatures checks the settings of periodic jobs, middleware and
// queue limits.
func (cfg Config) validateFeatures(c *coordinator.Coordinator) error {
	if len(cfg.Periodic) > 0 && !cfg.Maintain {
		return fmt.Errorf("%w: periodic jobs are enqueued by the maintenance leader: set Maintain", coordinator.ErrInvalid)
	}
	if err := c.ValidatePeriodic(cfg.Periodic); err != nil {
		return err
	}
	for q, n := range cfg.QueueConcurrency {
		if err := coordinator.ValidateQueue(q); err != nil {
			return err
		}
		served := false
		for _, s := range cfg.Queues {
			served = served || s == q
		}
		if !served {
			return fmt.Errorf("%w: concurrency limit for queue %s, which the worker does not serve (it serves %v)", coordinator.ErrInvalid, q, cfg.Queues)
		}
		if n < 1 {
			return fmt.Errorf("%w: concurrency limit %d for queue %s: want 1 or more", coordinator.ErrInvalid, n, q)
		}
	}
	for _, m := range cfg.Middleware {
		if m == nil {
			return fmt.Errorf("%w: nil middleware", coordinator.ErrInvalid)
		}
	}
	return nil
}

// initFeatures sets up the per-kind options and per-queue counters.
func (w *Worker) initFeatures() {
	w.kindOpts = map[string]KindOptions{}
	w.queueRunning = map[string]*atomic.Int64{}
	for _, q := range w.cfg.Queues {
		w.queueRunning[q] = new(atomic.Int64)
	}
}

// queueRoom bounds a claim of queue q of up to n jobs by q's local
// concurrency limit.
func (w *Worker) queueRoom(q string, n int) int {
	limit, ok := w.cfg.QueueConcurrency[q]
	if !ok {
		return n
	}
	return max(0, min(n, limit-int(w.queueRunning[q].Load())))
}

// queueAdd counts a run of queue q starting (+1) or giving its slot back
// (-1).
func (w *Worker) queueAdd(q string, d int64) {
	if c := w.queueRunning[q]; c != nil {
		c.Add(d)
	}
}

// runMaintenance is the elected maintenance work: promotion and retention,
// and the periodic jobs.
func (w *Worker) runMaintenance(ctx context.Context) error {
	if len(w.cfg.Periodic) == 0 {
		return w.c.RunMaintenance(ctx, coordinator.MaintainConfig{})
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.c.RunMaintenance(gctx, coordinator.MaintainConfig{}) })
	g.Go(func() error { return w.c.RunPeriodic(gctx, w.cfg.Periodic) })
	return g.Wait()
}
