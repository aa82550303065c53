package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/fence"
)

// Config configures a Worker. The zero value of each field means its
// default.
type Config struct {
	// AbandonGrace is how long a handler that ignores its cancelled
	// context keeps its slot before the slot is given back (its writes
	// are refused either way). Default: 10s.
	AbandonGrace time.Duration
	// Concurrency is the number of slots: jobs run at once. Default: 10.
	Concurrency int
	// DefaultTimeout bounds an attempt whose job sets no timeout.
	// Default: 0, none.
	DefaultTimeout time.Duration
	// LeaseMargin is subtracted from the session's validity deadline.
	// Default: LeaseTTL/5.
	LeaseMargin time.Duration
	// LeaseTTL is the session lease TTL, in whole seconds (etcd grants
	// whole seconds), at least coordinator.MinLeaseTTL (2s); New refuses
	// others. Default: 30s.
	LeaseTTL time.Duration
	// Logger receives structured logs. Default: the coordinator's.
	Logger *slog.Logger
	// Maintain makes this worker a candidate for running the maintenance
	// loop, which runs on one elected worker at a time: it makes
	// scheduled, retryable and snoozed jobs available when their time
	// comes, purges finished jobs past retention and enqueues Periodic.
	// Those jobs become available only while some worker on the store
	// maintains; with none, they stay scheduled or retryable for ever
	// (Start logs it when this worker does not maintain). In shared mode
	// one elected worker suffices; set it on several for failover. The
	// daemon always sets it. Default: false.
	Maintain bool
	// OnOutcome, if set, is called once per run after its outcome was
	// written, refused or abandoned: for metrics, tracing and the cluster
	// test's histories. It must not block for long. A panic in it is
	// recovered, logged with its stack and counted
	// (coordinator.Coordinator.CallUser): the outcome stands. So are
	// OnStart's and OnClaim's: the handler starts, the claimed jobs run.
	OnOutcome func(Outcome)
	// OnStart, if set, is called when a handler is about to start.
	OnStart func(j coordinator.Job, token fence.Token)
	// OnClaim, if set, is called after each claim request of the claim
	// loop with the queue, the number of jobs claimed and what the claim
	// saw (candidates tried, conflicts lost): for metrics. It must not
	// block.
	OnClaim func(queue string, claimed int, st coordinator.ClaimStats)
	// PollInterval is a backstop for the watch that wakes the claim loop.
	// Default: 5s.
	PollInterval time.Duration
	// Queues are served round-robin, each listed once (New refuses a
	// queue listed twice). Default: ["default"].
	Queues []string
	// Reap runs the reaper loop in this worker: it re-queues running jobs
	// whose daemon's lease expired or was revoked. In shared mode the jobs
	// of a daemon whose lease expired (it crashed, or was cut off) are
	// re-queued only by a worker with Reap; with none on the store they
	// stay running for ever. The daemon sets it in shared mode. In
	// embedded mode leases do not expire while the process lives, and
	// Start re-queues the jobs a crashed process left running, whatever
	// Reap says. Default: false.
	Reap bool
	// ReapInterval is the reaper's periodic scan. Default: 10s.
	ReapInterval time.Duration
	// Spread makes claims pick among the first jobs of a queue instead of
	// taking the very first ones, to avoid claim storms when several
	// daemons share a queue: first the jobs that rendezvous hashing over
	// the live daemons gives to this one, then others at random. It
	// applies only while claims meet contention: for spreadFor after a
	// claim lost jobs to another daemon; otherwise claims take the head of
	// the queue, which is cheaper. While claims spread, the worker keeps
	// one claim in flight rather than two. Default: false.
	Spread bool
	// WorkerID names this worker; it must be unique. Default:
	// coordinator.NewWorkerID().
	WorkerID string
	// Periodic are schedules this worker enqueues while it is the elected
	// maintenance leader (it needs Maintain). Declare the same ones on
	// every worker that may lead. See coordinator.PeriodicJob.
	Periodic []coordinator.PeriodicJob
	// Middleware wraps every handler, the first outermost (around each
	// kind's own KindOptions.Middleware): for tracing, logging, metrics.
	Middleware []Middleware
	// QueueConcurrency bounds, per queue, the jobs this worker runs at
	// once (within Concurrency). A limit across all daemons is set on the
	// queue itself (coordinator.SetQueueLimit).
	QueueConcurrency map[string]int
}

// Defaults of Config.
const (
	DefaultAbandonGrace = 10 * time.Second
	DefaultConcurrency  = 10
	DefaultPollInterval = 5 * time.Second
	DefaultReapInterval = 10 * time.Second
)

func (cfg Config) withDefaults(c *coordinator.Coordinator) (Config, error) {
	if cfg.AbandonGrace == 0 {
		cfg.AbandonGrace = DefaultAbandonGrace
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = coordinator.DefaultLeaseTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = c.Logger()
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if len(cfg.Queues) == 0 {
		cfg.Queues = []string{coordinator.DefaultQueue}
	}
	if cfg.ReapInterval == 0 {
		cfg.ReapInterval = DefaultReapInterval
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID = coordinator.NewWorkerID()
	}
	for _, s := range []struct {
		name string
		v    int64
	}{
		{"Concurrency", int64(cfg.Concurrency)}, {"DefaultTimeout", int64(cfg.DefaultTimeout)},
		{"AbandonGrace", int64(cfg.AbandonGrace)}, {"PollInterval", int64(cfg.PollInterval)},
		{"ReapInterval", int64(cfg.ReapInterval)}, {"LeaseMargin", int64(cfg.LeaseMargin)},
	} {
		if s.v < 0 {
			return cfg, fmt.Errorf("%w: worker.Config.%s is negative: want 0 (the default) or more", coordinator.ErrInvalid, s.name)
		}
	}
	// Checked here as the session will at Start, so that New refuses
	// what Start would.
	if err := coordinator.ValidateLeaseTTL(cfg.LeaseTTL); err != nil {
		return cfg, err
	}
	if err := coordinator.ValidateLeaseMargin(cfg.LeaseTTL, cfg.LeaseMargin); err != nil {
		return cfg, err
	}
	for i, q := range cfg.Queues {
		if err := coordinator.ValidateQueue(q); err != nil {
			return cfg, err
		}
		if slices.Contains(cfg.Queues[:i], q) {
			// Served twice as often as the others, and registered twice.
			return cfg, fmt.Errorf("%w: queue %s is listed twice among the queues to serve: list each queue once", coordinator.ErrInvalid, q)
		}
	}
	return cfg, cfg.validateFeatures(c)
}

// Worker claims and runs jobs. Create it with New, register handlers, then
// Start; Stop drains it.
type Worker struct {
	c   *coordinator.Coordinator
	cfg Config
	log *slog.Logger

	handlers map[string]Handler
	lifeMu   sync.Mutex  // held by Start and Stop: one runs after the other
	started  atomic.Bool // a Start succeeded

	kindOpts     map[string]KindOptions   // HandleWith
	wrapped      map[string]Handler       // handlers with their middleware, from Start
	queueRunning map[string]*atomic.Int64 // runs holding a slot, per queue

	sess       atomic.Pointer[coordinator.Session]
	sessParent context.Context    // parent of every session: outlives the claim loop, ends at Stop
	sessCancel context.CancelFunc // ends sessParent
	// sessEnd ends the context of the current session when a later one
	// replaces it (nil for the first, whose context is sessParent):
	// else every replaced session's context would stay among
	// sessParent's children until Stop.
	sessEnd context.CancelFunc
	slots   chan struct{} // one token per running handler
	tickets chan struct{} // one token per run not yet recorded: bounds outcome writes in flight
	wake    chan struct{} // new work may be available, in any queue
	// wakeQueue wakes the claim loop for the queues whose count in
	// queueWakes grew: a job of theirs may have become available.
	wakeQueue  chan struct{}
	queueWakes map[string]*atomic.Uint64 // per queue served, fixed after New
	freed      chan struct{}             // slots the claim loop waits for are free
	needFree   atomic.Int64              // free slots the claim loop waits for; 0: none
	active     sync.Map                  // job id -> *active: its latest run here
	held       sync.Map                  // job id -> *coordinator.Run: claimed by this worker and not yet finished
	// Cancel requests seen lately, by job id: the newest request's
	// revision. A request may arrive before the run it is for is in
	// active (just after its claim commits); the run looks here as it
	// registers. Under cancelMu, with the registration in active.
	cancelMu    sync.Mutex
	cancelSeen  map[string]cancelSeen
	cancelPrune time.Time

	loopCtx    context.Context // claiming, watches, maintenance
	loopCancel context.CancelFunc
	runCtx     context.Context // parent of every handler's context
	runCancel  context.CancelCauseFunc
	cancelCtx  context.Context // the cancel-request watch; outlives loopCtx
	cancelStop context.CancelFunc
	loops      sync.WaitGroup
	handlersWG sync.WaitGroup
	// Finishers wait for handlers and record their outcomes (runFinisher).
	finishQ    chan func()
	finishQuit chan struct{}
	finishers  sync.WaitGroup
	stopBegun  atomic.Bool
	stopped    chan struct{}
	force      chan struct{} // closed by a Stop whose ctx ended while another drained
	forceOnce  sync.Once
	// drainCut is when Stop cut its drain short (its ctx, or a concurrent
	// Stop's, ended): outcome writes that keep failing, or that the store
	// holds, are given up AbandonGrace later (see record). giveUp ends
	// then, cutting short an attempt in flight; giveUpAt is its timer.
	drainCut     atomic.Pointer[time.Time]
	cutOnce      sync.Once
	giveUp       context.Context
	giveUpCancel context.CancelFunc
	giveUpAt     *time.Timer
	// startMu orders starting handlers before Stop's drain: once stopping
	// is set, runs of claims that land are given back, not started.
	startMu     sync.Mutex
	stopping    bool
	inFlight    atomic.Int64
	sessionLost atomic.Int64
	// fenceWatch counts the sessions whose end watchFence has yet to
	// look at (each session's context ends at the latest at Stop);
	// fenceSeen is closed once it has looked at the current session's
	// (set by Start, then by the claim loop only).
	fenceWatch sync.WaitGroup
	fenceSeen  <-chan struct{}
	abandoned  atomic.Int64
	// noSpace is set while the store refuses this worker's writes for
	// want of room (kv.ErrNoSpace: etcd's NOSPACE alarm): the state is
	// logged once as it begins and once as it ends (see storeFull), not
	// per refused claim or outcome.
	noSpace   atomic.Bool
	startedAt time.Time // of Start, registered by every session
}

// Outcome says how one run ended (see Config.OnOutcome).
type Outcome struct {
	// Job is the job as claimed, but for a fail's MaxAttempts, which is
	// the one the write applied (its kind's, KindOptions.MaxAttempts, for
	// a job enqueued with the default); Token the run's fencing token.
	Job   coordinator.Job
	Token fence.Token
	// Op is the write attempted: complete, fail, snooze, cancel, release;
	// or abandon when nothing was written because the session was lost.
	// A fail, snooze or release that found a cancel request pending
	// recorded the job as cancelled, and says cancel.
	Op string
	// Err is nil when the store accepted the write. An error wrapping
	// fence.ErrLeaseLost means it was refused: another run owns the job.
	Err error
	// State is the state the write left the job in (retryable or
	// discarded after a fail, say), when Err is nil.
	State coordinator.State
	// HandlerErr is what the handler returned.
	HandlerErr error
	// Started and Ended bound the handler's run.
	Started, Ended time.Time
}

type active struct {
	started         time.Time
	run             *coordinator.Run
	cancel          context.CancelCauseFunc
	cancelRequested atomic.Bool
}

// New returns a worker over c. It validates cfg.
func New(c *coordinator.Coordinator, cfg Config) (*Worker, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: worker.New without a coordinator: pass one from coordinator.New", coordinator.ErrInvalid)
	}
	cfg, err := cfg.withDefaults(c)
	if err != nil {
		return nil, err
	}
	w := &Worker{
		c:          c,
		cfg:        cfg,
		log:        cfg.Logger.With(slog.String("worker", cfg.WorkerID)),
		handlers:   map[string]Handler{},
		slots:      make(chan struct{}, cfg.Concurrency),
		tickets:    make(chan struct{}, 2*cfg.Concurrency),
		wake:       make(chan struct{}, 1),
		wakeQueue:  make(chan struct{}, 1),
		queueWakes: make(map[string]*atomic.Uint64, len(cfg.Queues)),
		freed:      make(chan struct{}, 1),
		stopped:    make(chan struct{}),
		force:      make(chan struct{}),
		finishQ:    make(chan func()),
		finishQuit: make(chan struct{}),

		cancelSeen: map[string]cancelSeen{},
	}
	w.giveUp, w.giveUpCancel = context.WithCancel(context.Background())
	for _, q := range cfg.Queues {
		w.queueWakes[q] = new(atomic.Uint64)
	}
	w.initFeatures()
	return w, nil
}

// Handle registers h for kind. It panics if called after Start or twice for
// one kind, as both are programming errors.
func (w *Worker) Handle(kind string, h Handler) {
	if w.started.Load() {
		panic("worker: Handle after Start")
	}
	if err := coordinator.ValidateKind(kind); err != nil {
		panic(err.Error())
	}
	if _, dup := w.handlers[kind]; dup {
		panic("worker: second handler for kind " + kind)
	}
	w.handlers[kind] = h
}

// Kinds returns the registered kinds, sorted.
func (w *Worker) Kinds() []string {
	out := make([]string, 0, len(w.handlers))
	for k := range w.handlers {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Queues returns the queues the worker serves, in the order it serves
// them.
func (w *Worker) Queues() []string { return slices.Clone(w.cfg.Queues) }

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// Coordinator returns the coordinator the worker claims through.
func (w *Worker) Coordinator() *coordinator.Coordinator { return w.c }

// Running returns the number of handlers running now.
func (w *Worker) Running() int { return int(w.inFlight.Load()) }

// Pending returns the number of runs whose outcome is not yet recorded:
// running handlers, outcome writes in flight, and the runs a claim in
// flight has reserved room for (given back if it finds fewer jobs). It is
// 0 only when the worker holds nothing.
func (w *Worker) Pending() int { return len(w.tickets) }

// Session returns the current session (nil before Start).
func (w *Worker) Session() *coordinator.Session { return w.sess.Load() }

// SessionsLost counts sessions that ended by losing their lease (cause
// coordinator.ErrSessionExpired): self-fencing. It counts each as it ends,
// not when the claim loop replaces it; sessions closed on purpose are not
// counted.
func (w *Worker) SessionsLost() int64 { return w.sessionLost.Load() }

// watchFence counts s in SessionsLost if it ends by losing its lease,
// and makes s the current session's: renewSession waits for the count
// before it replaces s, Stop for every session's (their contexts have
// all ended by then).
func (w *Worker) watchFence(s *coordinator.Session) {
	seen := make(chan struct{})
	w.fenceSeen = seen
	w.fenceWatch.Add(1)
	context.AfterFunc(s.Ctx(), func() {
		defer w.fenceWatch.Done()
		defer close(seen)
		if errors.Is(context.Cause(s.Ctx()), coordinator.ErrSessionExpired) {
			w.sessionLost.Add(1)
		}
	})
}

// Stopped is closed when Stop has finished.
func (w *Worker) Stopped() <-chan struct{} { return w.stopped }

// Start opens a session and starts claiming. It returns once work is
// running, or the error that prevented it (then Start may be called
// again). A second Start after one that succeeded is ErrStarted, and on a
// stopped worker ErrStopped. ctx bounds only the start; a Stop called
// meanwhile waits for it.
// Cancelling ctx after Start returned does not stop the worker (nor does
// the end of a signal.NotifyContext given to Start): Stop does.
func (w *Worker) Start(ctx context.Context) error {
	w.lifeMu.Lock()
	defer w.lifeMu.Unlock()
	select {
	case <-w.stopped:
		return ErrStopped
	default:
	}
	if len(w.handlers) == 0 {
		return fmt.Errorf("%w: worker has no handlers: register them with Handle, HandleWith or HandleArgs before Start", coordinator.ErrInvalid)
	}
	if w.started.Load() {
		return fmt.Errorf("%w: Start called twice: call it once per Worker (after Stop, make a new one with New)", ErrStarted)
	}
	if err := w.wrapHandlers(); err != nil {
		return fmt.Errorf("worker: start: %w", err)
	}
	if err := w.requeueLeftRunning(ctx); err != nil {
		return fmt.Errorf("worker: start: %w", err)
	}
	// Registered by every session: a new session after a lost one is
	// not a new start.
	w.startedAt = time.Now().UTC()
	// ctx bounds the start only: the session must outlive it.
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	stopBound := context.AfterFunc(ctx, scancel)
	sess, err := w.newSession(sctx)
	if !stopBound() || err != nil {
		if err == nil {
			// ctx ended as the session opened: close it, or its lease
			// and registration would stay until the TTL runs out.
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = sess.Close(cctx)
			cancel()
			err = fmt.Errorf("worker: start: %w", ctx.Err())
		}
		scancel()
		return err
	}
	w.sessParent, w.sessCancel = sctx, scancel
	w.watchFence(sess)
	w.sess.Store(sess)
	w.loopCtx, w.loopCancel = context.WithCancel(context.Background())
	w.runCtx, w.runCancel = context.WithCancelCause(context.Background())
	w.cancelCtx, w.cancelStop = context.WithCancel(context.Background())

	w.started.Store(true)
	w.goLoop(w.claimLoop)
	w.goLoop(func() {
		_ = w.c.WatchCancelRequests(w.cancelCtx, w.onCancelRequest)
	})
	// Queue pauses, limits and freed slots wake the claim loop.
	w.goLoop(func() { _ = w.c.WatchQueues(w.loopCtx, w.poke) })
	for q, wakes := range w.queueWakes {
		w.goLoop(func() { _ = w.c.WatchAvailable(w.loopCtx, q, func() { w.pokeQueue(wakes) }) })
	}
	if w.cfg.Maintain {
		w.goLoop(func() {
			_ = w.c.RunElected(w.loopCtx, coordinator.MaintenanceElection, w.Session, w.runMaintenance)
		})
	}
	if w.cfg.Reap {
		w.goLoop(func() {
			_ = w.c.RunReaper(w.loopCtx, w.isRunning, w.cfg.ReapInterval, func() string { return w.Session().WorkerID() })
		})
	}
	w.log.Info("worker started", slog.Int("concurrency", w.cfg.Concurrency), slog.Any("queues", w.cfg.Queues), slog.Any("kinds", w.Kinds()))
	if !w.c.Store().Limits().LeasesExpire {
		for _, pj := range w.cfg.Periodic {
			if _, ok := w.handlers[pj.Job.Kind]; !ok {
				// The daemon refuses this; a program may run the kind
				// on another worker of its own, so only warn.
				w.log.Warn("periodic job's kind has no handler on this worker: in embedded mode only this process's workers can run it", slog.String("periodic", pj.Name), slog.String("kind", pj.Job.Kind))
			}
		}
	}
	if !w.cfg.Maintain {
		// Silent otherwise: a library user who left it unset sees jobs
		// stay scheduled or retryable and nothing saying why.
		w.log.Info("worker does not maintain (Config.Maintain is false): scheduled, retryable and snoozed jobs become available only while another worker on the store maintains")
	}
	return nil
}

// requeueLeftRunning re-queues, on a store whose leases do not expire
// (embedded mode), the jobs left running by a process that is gone: the
// store deleted their ownership keys at its open (the directory lock
// proves that process gone), and nothing else would ever re-queue them.
// Jobs of this process's live workers keep their ownership keys and are
// not touched. It checks the cluster version first, so that a build too
// old for the namespace writes nothing.
func (w *Worker) requeueLeftRunning(ctx context.Context) error {
	if w.c.Store().Limits().LeasesExpire {
		return nil // shared mode: reapers (Config.Reap) take them
	}
	if err := w.c.CheckClusterVersion(ctx); err != nil {
		return err
	}
	n, err := w.c.Reap(ctx, nil, nil)
	if err != nil {
		return fmt.Errorf("re-queue the jobs left running: %w", err)
	}
	w.log.Info("re-queued the jobs left running", slog.Int("jobs", n))
	return nil
}

// periodicNames names the schedules this worker enqueues while it leads
// maintenance, for its registration.
func (w *Worker) periodicNames() []string {
	if !w.cfg.Maintain {
		return nil
	}
	var names []string
	for _, pj := range w.cfg.Periodic {
		names = append(names, pj.Name)
	}
	return names
}

func (w *Worker) goLoop(f func()) {
	w.loops.Add(1)
	go func() {
		defer w.loops.Done()
		f()
	}()
}

func (w *Worker) newSession(ctx context.Context) (*coordinator.Session, error) {
	host, _ := os.Hostname()
	return w.c.NewSession(ctx, coordinator.SessionConfig{
		TTL:    w.cfg.LeaseTTL,
		Margin: w.cfg.LeaseMargin,
		Worker: coordinator.WorkerInfo{
			ID: w.cfg.WorkerID, Host: host, PID: os.Getpid(), StartedAt: w.startedAt,
			Queues: w.cfg.Queues, Kinds: w.Kinds(), Concurrency: w.cfg.Concurrency,
			Periodic: w.periodicNames(), Reaps: w.cfg.Reap,
		},
	})
}

// isRunning reports whether this worker runs job id now under its current
// session. Runs of an ended session are fenced and abandoned: their jobs
// may be reaped, by this worker too.
func (w *Worker) isRunning(id string) bool {
	a, ok := w.active.Load(id)
	return ok && a.(*active).run.Session() == w.sess.Load()
}

// isHeld reports whether this worker claimed job id and has not finished
// its run.
func (w *Worker) isHeld(id string) bool {
	_, ok := w.held.Load(id)
	return ok
}

// free returns how many runs could start now: free slots, and tickets for
// their outcomes.
func (w *Worker) free() int {
	return min(cap(w.slots)-len(w.slots), cap(w.tickets)-len(w.tickets))
}

// released wakes the claim loop, after a slot or ticket was given back,
// if the loop waits for as many free as there are now. Handlers that end
// one after another would otherwise wake it once each.
func (w *Worker) released() {
	if n := w.needFree.Load(); n > 0 && int64(w.free()) >= n {
		select {
		case w.freed <- struct{}{}:
		default:
		}
	}
}

// poke wakes the claim loop without blocking, for every queue: each is
// claimed from again, even one a claim found empty.
func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// pokeQueue wakes the claim loop without blocking, for one queue (wakes is
// its count in queueWakes): a job of it may have become available. Only
// that queue is claimed from again, not every queue found empty: with many
// queues served, a wake for each would make every job cost a claim of
// each queue.
func (w *Worker) pokeQueue(wakes *atomic.Uint64) {
	wakes.Add(1) // before the wake-up, which reads it
	select {
	case w.wakeQueue <- struct{}{}:
	default:
	}
}

// cancelSeen is a cancel request the watch delivered: its revision, and
// when it came.
type cancelSeen struct {
	rev int64
	at  time.Time
}

// cancelSeenFor is how long a cancel request is remembered for a run that
// has not registered yet: far longer than a claim takes to start its runs.
const cancelSeenFor = time.Minute

// onCancelRequest takes a cancel request for job id at revision rev from
// the watch. It cancels the job's run here if the request is for it, and
// remembers the request for a run that registers later: one whose claim
// committed before the request was written, but that is not yet in
// active.
func (w *Worker) onCancelRequest(id string, rev int64) {
	now := time.Now()
	w.cancelMu.Lock()
	if now.Sub(w.cancelPrune) >= cancelSeenFor/4 {
		w.cancelPrune = now
		for k, c := range w.cancelSeen {
			if now.Sub(c.at) >= cancelSeenFor {
				delete(w.cancelSeen, k)
			}
		}
	}
	w.cancelSeen[id] = cancelSeen{rev: max(rev, w.cancelSeen[id].rev), at: now}
	a, ok := w.active.Load(id)
	w.cancelMu.Unlock()
	if ok {
		w.cancelFor(a.(*active), rev)
	}
}

// cancelFor cancels a's run for a cancel request at revision rev, unless
// the request is older than the run (it was for an earlier run).
func (w *Worker) cancelFor(a *active, rev int64) {
	if rev <= int64(a.run.Token()) {
		return
	}
	if a.cancelRequested.CompareAndSwap(false, true) {
		w.runLog(a.run).Info("cancel requested for running job")
		a.cancel(ErrCancelRequested)
	}
}

// spreadFor is how long claims spread (Config.Spread) after one met
// contention; peersEvery is how often spreading claims re-read which
// daemons are alive.
const (
	spreadFor  = 10 * time.Second
	peersEvery = 2 * time.Second
)

// claimsInFlight is how many claims the claim loop keeps in flight: while
// one waits for its commit (an fsync, a raft round), the next reads and
// prepares its candidates. Each takes at most its share of the slots.
const claimsInFlight = 2

// claimed is what one claim in flight reports back to the claim loop.
type claimed struct {
	queue string
	sess  *coordinator.Session // the session it claimed under
	wakes wakeMark             // the wake counts of its queue when the claim started
	runs  int
	st    coordinator.ClaimStats
	err   error
}

// claimState is the claim loop's memory between claims.
type claimState struct {
	backoff      time.Duration
	next         int       // the queue to try first, round robin
	lastJanitor  time.Time // last ReleaseOrphans
	lastConflict time.Time // last claim that lost jobs to another daemon
	peersRead    time.Time // last read of the live daemons, while spreading
	holdUntil    time.Time // no claim before: back-off after conflicts
	gatherUntil  time.Time // no claim before, unless half the slots are free
	wakes        uint64    // wake-ups for every queue received (queue changes, polls)
	// empty holds, per queue, the wake counts when a claim found it empty:
	// it is not claimed from again until the next wake-up for every
	// queue or for it.
	empty map[string]wakeMark
}

// wakeMark is when a claim began: the claim loop's count of wake-ups for
// every queue, and its queue's count of its own (Worker.queueWakes).
type wakeMark struct{ all, queue uint64 }

// mark returns the wake counts of queue q now.
func (w *Worker) mark(st *claimState, q string) wakeMark {
	return wakeMark{all: st.wakes, queue: w.queueWakes[q].Load()}
}

// claimLoop claims while slots are free, sleeping on the availability watch
// when there is nothing to claim. Up to claimsInFlight claims run at once,
// each in a goroutine of its own that starts the handlers of its runs;
// their slots are reserved before the claim. When the session ends it
// opens a new session at once, even while claims are in flight (a store
// out of reach may hold them for as long as the outage): those of the old
// session start nothing (see claim). The old session's handlers,
// cancelled, may still be returning (their runs are fenced, and a new run
// of the same job here is told apart from theirs). When it returns, no
// claim is in flight.
func (w *Worker) claimLoop() {
	ctx := w.loopCtx
	done := make(chan claimed, claimsInFlight)
	st := &claimState{lastJanitor: time.Now(), empty: map[string]wakeMark{}}
	inFlight := 0
	// stale counts the claims in flight of sessions replaced since they
	// began: a store out of reach may hold them for long, and nothing
	// waits for them but the loop's end.
	stale := 0
	report := func(c claimed) {
		if c.sess != w.sess.Load() {
			stale--
		}
		w.claimDone(c, st)
		inFlight--
	}
	defer func() {
		for ; inFlight > 0; inFlight-- {
			<-done
		}
	}()
	for ctx.Err() == nil {
		sess := w.sess.Load()
		if sess.Ctx().Err() != nil {
			if !w.renewSession(ctx, sess) {
				return
			}
			stale = inFlight
			continue
		}
		// Releasing orphans needs every claim of this session made so
		// far to be held: wait for those in flight first (those of
		// sessions replaced hang on other leases). The store may hold
		// them for as long as an outage: the session's end is not
		// waited out.
		if time.Since(st.lastJanitor) >= w.cfg.ReapInterval && inFlight > stale {
			select {
			case c := <-done:
				report(c)
			case <-sess.Ctx().Done():
			case <-ctx.Done():
			}
			continue
		}
		if time.Since(st.lastJanitor) >= w.cfg.ReapInterval {
			// Claims whose reply was lost and could not be resolved hang
			// on our lease with no handler: give them back. No claim of
			// this session is in flight, so every one it made is held.
			st.lastJanitor = time.Now()
			if _, err := w.c.ReleaseOrphans(ctx, sess, w.isHeld); err != nil && ctx.Err() == nil && sess.Ctx().Err() == nil {
				w.log.Warn("releasing orphaned claims failed", slog.Any("err", err))
			}
		}
		need := 0 // free slots that would let another claim start
		for inFlight < claimsInFlight && (inFlight == 0 || !w.spreading(st)) {
			q, want, n := w.nextClaim(st)
			if want == 0 {
				need = n
				break
			}
			spread := w.spreading(st)
			if spread && time.Since(st.peersRead) >= peersEvery {
				// Which daemons share the queue: spread claims prefer
				// the jobs that hashing gives to this one.
				// The read ends with the session: a store that holds
				// it must not keep the loop from replacing the session.
				st.peersRead = time.Now()
				pctx, cancel := context.WithCancel(ctx)
				stop := context.AfterFunc(sess.Ctx(), cancel)
				if ids, err := w.c.PeerIDs(pctx); err == nil {
					sess.SetPeers(ids)
				}
				stop()
				cancel()
			}
			w.reserve(q, want)
			inFlight++
			wakes := w.mark(st, q)
			go func() {
				c := w.claim(ctx, sess, q, want, spread)
				c.wakes = wakes
				done <- c
			}()
		}
		var timer, poll <-chan time.Time
		switch now := time.Now(); {
		case inFlight == claimsInFlight:
		case now.Before(st.holdUntil):
			timer = time.After(st.holdUntil.Sub(now))
		case now.Before(st.gatherUntil):
			timer = time.After(st.gatherUntil.Sub(now))
		case inFlight == 0:
			poll = time.After(w.cfg.PollInterval)
		}
		if inFlight < claimsInFlight && need > 0 {
			// Wait for that many free slots (released pokes when they
			// are), unless they freed up since they were counted.
			w.needFree.Store(int64(need))
			if w.free() >= need {
				w.needFree.Store(0)
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-sess.Ctx().Done():
		case c := <-done:
			report(c)
		case <-w.wake:
			st.wakes++
		case <-w.wakeQueue: // the queue's count says which
		case <-w.freed:
		case <-timer:
		case <-poll:
			st.wakes++
		}
		w.needFree.Store(0)
	}
}

// spreading reports whether claims spread now (Config.Spread, and a claim
// met contention within spreadFor). Contending daemons keep one claim in
// flight each: a second would race the others for the same jobs.
func (w *Worker) spreading(st *claimState) bool {
	return w.cfg.Spread && time.Since(st.lastConflict) < spreadFor
}

// nextClaim picks the queue and size of the next claim: the next queue,
// round robin, not found empty since the last wake-up and with room under
// this worker's limit for it, for up to a share of the free slots (claims
// in flight hold theirs). When no claim should start now, want is 0 and
// need is how many free slots would change that (0: slots are not what
// holds it back).
func (w *Worker) nextClaim(st *claimState) (q string, want, need int) {
	now := time.Now()
	if now.Before(st.holdUntil) {
		return "", 0, 0
	}
	// A slot is free once its handler returned; the outcome write goes on
	// (batched with others) under a ticket, so slow fsyncs do not hold
	// slots.
	free := w.free()
	if half := (cap(w.slots) + 1) / 2; now.Before(st.gatherUntil) && free < half {
		return "", 0, half
	}
	share := min(free, max(1, cap(w.slots)/claimsInFlight))
	waiting := false
	for i := range w.cfg.Queues {
		q = w.cfg.Queues[(st.next+i)%len(w.cfg.Queues)]
		if e, ok := st.empty[q]; ok && e == w.mark(st, q) {
			continue
		}
		if want = w.queueRoom(q, share); want > 0 {
			st.next++
			return q, want, 0
		}
		waiting = true // no free slot, or at this worker's limit for q
	}
	if waiting {
		return "", 0, free + 1
	}
	return "", 0, 0
}

// claim claims up to want jobs of queue q into slots reserved for them,
// starts their handlers, and gives back the reservations it did not use.
// A claim that lands after Stop began gives its jobs back instead.
func (w *Worker) claim(ctx context.Context, sess *coordinator.Session, q string, want int, spread bool) claimed {
	runs, st, err := w.c.Claim(ctx, sess, q, want, spread)
	if w.cfg.OnClaim != nil {
		_ = w.c.CallUser("worker.Config.OnClaim", func() *slog.Logger { return w.log.With(slog.String("queue", q)) }, func() { w.cfg.OnClaim(q, len(runs), st) })
	}
	if len(runs) > 0 && !sess.Valid() {
		// Landed after its session's validity deadline (the claim loop
		// may have replaced the session meanwhile): its runs can write
		// nothing, not even a release. Their jobs hang on the old lease:
		// the reap that follows its revoke, or its expiry, re-queues
		// them.
		w.log.Warn("claim landed after its session ended: its jobs are re-queued once the old lease is gone", slog.String("queue", q), slog.Int("jobs", len(runs)), slog.Int64("lease", int64(sess.Lease())))
		runs = runs[:0]
	}
	w.startMu.Lock()
	stopping := w.stopping
	if !stopping {
		w.handlersWG.Add(len(runs))
		// Counted running before Stop can look: see its drain.
		w.inFlight.Add(int64(len(runs)))
	}
	w.startMu.Unlock()
	if stopping {
		w.giveBack(runs)
		runs = runs[:0]
	}
	for _, r := range runs {
		w.start(sess, r)
	}
	w.unreserve(q, want-len(runs))
	if len(runs) > 0 {
		// Let the handlers just started run before the claim loop counts
		// free slots again.
		runtime.Gosched()
	}
	return claimed{queue: q, sess: sess, runs: len(runs), st: st, err: err}
}

// claimDone takes in the report of a claim: more claims follow one that
// found jobs (after gathering freed slots for up to gatherFor), a back-off
// follows conflicts, and a queue where a claim found nothing, with no
// wake-up since it started, is left until the next.
func (w *Worker) claimDone(c claimed, st *claimState) {
	if c.st.Conflicts > 0 {
		st.lastConflict = time.Now()
	}
	if c.runs < c.st.Candidates {
		// A candidate the claim did not get may still be available,
		// and no watch event says so: a unit refused because another
		// daemon took the global-limit slot it tried (ADR 0015), or one
		// whose transaction failed while another of the claim's landed
		// (resolved from the ownership keys, the claim reports runs and
		// no error). The coordinator lowered or reset the floor, but a
		// claim beside this one skipped these candidates while they
		// were tried and may have found the queue empty: count a
		// wake-up of the queue, which voids that finding (ADR 0045).
		w.queueWakes[c.queue].Add(1)
	}
	if c.sess.Ctx().Err() != nil {
		// Its session ended: what it found says nothing of the store
		// or the queue.
		return
	}
	// A claim fails as its session ends: not the store's failure.
	failed := c.err != nil && w.loopCtx.Err() == nil
	full := failed && w.storeFull(c.err)
	if failed && !full {
		w.log.Warn("claim failed", slog.String("queue", c.queue), slog.Any("err", c.err))
		// It may still land: look for orphans again soon.
		st.lastJanitor = time.Now().Add(time.Second - w.cfg.ReapInterval)
	}
	if c.runs > 0 {
		w.storeHasRoom()
	}
	switch {
	case full && c.runs == 0:
		// The store has no room (etcd's NOSPACE alarm, logged once by
		// storeFull): a claim it answered so was resolved as one whose
		// reply was lost, and room comes back when an operator makes
		// it, not in a second. Try again every few seconds, not every
		// second.
		st.backoff = min(max(2*st.backoff, time.Second), noSpaceRetry)
		st.holdUntil = time.Now().Add(st.backoff/2 + jitter(st.backoff/2))
		st.wakes++
	case failed && c.runs == 0:
		// The store failed, not the queue: try again after a pause that
		// grows while failures go on, rather than leaving the queue for
		// the next wake-up (up to a poll interval) or retrying at once.
		// Its candidates may still be there although a claim beside it,
		// which skipped them, found the queue empty: count the failure
		// as a wake-up, which voids that finding.
		st.backoff = min(max(2*st.backoff, 10*time.Millisecond), time.Second)
		st.holdUntil = time.Now().Add(st.backoff/2 + jitter(st.backoff/2))
		st.wakes++
	case c.runs > 0:
		st.backoff = 0
		// Quick handlers finishing one after another: make one claim of
		// them instead of many small ones.
		st.gatherUntil = time.Now().Add(gatherFor)
	case c.st.Conflicts > 0:
		// Others took what we wanted: back off briefly, at random, so
		// contending daemons spread out.
		st.backoff = min(max(2*st.backoff, time.Millisecond), 50*time.Millisecond)
		st.holdUntil = time.Now().Add(st.backoff/2 + jitter(st.backoff/2))
	case c.wakes == w.mark(st, c.queue):
		st.empty[c.queue] = c.wakes
	}
}

// gatherFor bounds how long the claim loop waits, after a claim, for half
// the slots to be free before the next claim.
const gatherFor = time.Millisecond

// noSpaceRetry bounds the pause between claims while the store has no
// room (kv.ErrNoSpace): claims resume at most this long after an operator
// made room.
const noSpaceRetry = 5 * time.Second

// storeFull reports whether err is the store's refusal for want of room
// (kv.ErrNoSpace: etcd over its backend quota, its NOSPACE alarm). The
// first of a spell logs one line for the worker; storeHasRoom ends it.
func (w *Worker) storeFull(err error) bool {
	if !errors.Is(err, kv.ErrNoSpace) {
		return false
	}
	if w.noSpace.CompareAndSwap(false, true) {
		w.log.Warn("the store is out of space: it refuses claims and outcomes; the jobs running go on, and what they cannot record is retried until there is room",
			slog.Any("err", err))
	}
	return true
}

// storeHasRoom ends a spell of storeFull after a write succeeded.
func (w *Worker) storeHasRoom() {
	if w.noSpace.Load() && w.noSpace.CompareAndSwap(true, false) {
		w.log.Info("the store has room again: claims and outcomes resume")
	}
}

// renewSession replaces an ended session. Handlers of the old session have
// been cancelled through its context; they record nothing.
func (w *Worker) renewSession(ctx context.Context, old *coordinator.Session) bool {
	cause := context.Cause(old.Ctx())
	w.log.Warn("session ended: running jobs were interrupted and fenced; starting a new session", slog.Any("cause", cause))
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	_ = old.Close(cctx) // stops its heartbeat; the lease is likely gone
	cancel()
	// Each attempt is bounded by NewSession (a store without quorum
	// answers nothing, and a lease granted later than TTL − margin after
	// the request would be past its validity deadline already).
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		// The session must outlive ctx (the claim loop's, which Stop
		// ends first, before draining): it derives from sessParent, and
		// ctx bounds only its creation.
		sctx, scancel := context.WithCancel(w.sessParent)
		stopBound := context.AfterFunc(ctx, scancel)
		sess, err := w.newSession(sctx)
		if !stopBound() {
			if err == nil {
				cctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = sess.Close(cctx)
				cancel()
			}
			scancel()
			return false
		}
		if err != nil {
			scancel()
		}
		if err == nil {
			<-w.fenceSeen // old's end is counted before a new session shows
			w.watchFence(sess)
			w.sess.Store(sess)
			w.log.Info("new session started", slog.Int64("lease", int64(sess.Lease())))
			// If the revoke above failed (the store was out of reach
			// then), the old lease may still be alive — the store
			// extends leases when it regains its quorum — and its jobs'
			// ownership keys with it, under a registration the new
			// session has replaced: no reaper's watch would see it end.
			// Revoke it now that the store answers (Close retries a
			// failed revoke).
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			if err := old.Close(cctx); err != nil {
				w.log.Warn("cannot revoke the lost session's lease: its jobs are re-queued once it expires", slog.Any("err", err))
			}
			cancel()
			if w.sessEnd != nil {
				w.sessEnd() // the old session's context; it ended already
			}
			w.sessEnd = scancel
			// The old lease's jobs are orphans now (its revoke, or its
			// expiry, removed their ownership keys): give them back at
			// once rather than waiting for a reaper.
			if n, err := w.c.Reap(ctx, nil, w.isRunning); err != nil {
				w.log.Warn("reaping after session loss failed", slog.Any("err", err))
			} else if n > 0 {
				w.log.Info("re-queued jobs of the lost session", slog.Int("jobs", n))
			}
			return true
		}
		w.log.Warn("cannot start a new session; retrying", slog.Any("err", err), slog.Duration("in", delay))
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
	return false
}

// reserve takes n slots, their outcome tickets and n of queue q's share
// of them for a claim; the claim loop has counted them free.
func (w *Worker) reserve(q string, n int) {
	for range n {
		w.slots <- struct{}{}
		w.tickets <- struct{}{}
	}
	w.queueAdd(q, int64(n))
}

// unreserve gives back n reservations that a claim did not use. It does
// not wake the claim loop, which learns of them from the claim's report
// (a wake-up would make a claim that found nothing try again at once).
func (w *Worker) unreserve(q string, n int) {
	if n == 0 {
		return
	}
	for range n {
		<-w.slots
		<-w.tickets
	}
	w.queueAdd(q, -int64(n))
}

// giveBack releases runs claimed as the worker stops, without starting
// them: their jobs are available again at once, no attempt used. One whose
// release fails is left to the session's end (its lease is revoked as the
// worker stops: the reaper, or in embedded mode the next open, re-queues
// it).
func (w *Worker) giveBack(runs []*coordinator.Run) {
	for _, r := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := r.Release(ctx); err != nil {
			w.runLog(r).Warn("giving back a job claimed as the worker stopped failed", slog.Any("err", err))
		}
		cancel()
	}
}

// start runs r (counted in handlersWG and inFlight by its claim) in a
// slot reserved for it: its handler in a goroutine of its own, and the
// wait for it and the outcome write in another.
func (w *Worker) start(sess *coordinator.Session, r *coordinator.Run) {
	id := r.Job().ID
	w.held.Store(id, r)
	finish := w.execute(sess, r)
	w.runFinisher(func() {
		defer w.handlersWG.Done()
		// Not a later run of the same job (its job may be claimed again
		// here as soon as this run's outcome is written).
		defer w.held.CompareAndDelete(id, r)
		finish()
	})
}

// finisherIdle is how long a finisher waits for another run before it
// exits.
const finisherIdle = 10 * time.Second

// runFinisher runs f, which waits for a handler and records its outcome,
// on an idle finisher goroutine, or on a new one if none is idle. A
// finisher is kept for the next run: recording an outcome encodes the job
// deep in the JSON encoder, and a fresh goroutine grew (copied) its stack
// there for every job — 9 to 13 % of a drain's CPU in profiles
// (docs/performance.md, section 27). Finishers exit after finisherIdle
// without work, and at Stop once the handlers are drained.
func (w *Worker) runFinisher(f func()) {
	select {
	case w.finishQ <- f:
		return
	default:
	}
	w.finishers.Add(1)
	go func() {
		defer w.finishers.Done()
		idle := time.NewTimer(finisherIdle)
		defer idle.Stop()
		for {
			f()
			// Idle, it must not keep the run it recorded (its job,
			// payload, result) alive until the next.
			f = nil
			idle.Reset(finisherIdle)
			select {
			case f = <-w.finishQ:
			case <-idle.C:
				return
			case <-w.finishQuit:
				return
			}
		}
	}()
}

// execute sets up r's run and starts its handler. The function it returns
// waits for the handler (or abandons it) and records the outcome. The
// handler's goroutine gives the slot back itself as it returns, so a
// freed slot does not wait for another goroutine to be scheduled.
func (w *Worker) execute(sess *coordinator.Session, r *coordinator.Run) (finish func()) {
	jc := r.Job()
	ctx, cancel := context.WithCancelCause(w.runCtx)
	stopOnLoss := context.AfterFunc(sess.Ctx(), func() { cancel(context.Cause(sess.Ctx())) })
	tcancel := context.CancelFunc(func() {})
	if d := w.timeoutOf(&jc); d > 0 {
		ctx, tcancel = context.WithTimeout(ctx, d)
	}
	a := &active{run: r, cancel: cancel, started: time.Now()}
	if w.cfg.OnStart != nil {
		_ = w.c.CallUser("worker.Config.OnStart", func() *slog.Logger { return w.runLog(r) }, func() { w.cfg.OnStart(jc, r.Token()) })
	}
	w.cancelMu.Lock()
	w.active.Store(jc.ID, a)
	req, requested := w.cancelSeen[jc.ID]
	w.cancelMu.Unlock()
	if requested {
		w.cancelFor(a, req.rev)
	}

	job := &Job{Job: jc, run: r}
	releaseSlot := sync.OnceFunc(func() {
		<-w.slots
		w.queueAdd(jc.Queue, -1)
		w.inFlight.Add(-1)
		w.released()
	})
	done := make(chan struct{})
	var herr, cause error
	var trace string
	go func() {
		returned := false
		defer func() {
			if !returned {
				// runtime.Goexit (t.FailNow, say) ended the handler's
				// goroutine: the attempt failed.
				herr = errors.New("handler exited its goroutine without returning (runtime.Goexit)")
			}
			// The outcome is what the handler left as it returned: a
			// goroutine it left behind sets no result and checkpoints
			// nothing from here on.
			job.end()
			// What had ended the context when the handler returned
			// decides the outcome, not what ends it meanwhile (Stop's
			// drain deadline, say, which would release a failed
			// attempt's job without counting it).
			cause = context.Cause(ctx)
			releaseSlot()
			close(done)
		}()
		trace, herr = w.call(ctx, job)
		returned = true
	}()
	return func() {
		defer cancel(nil)
		defer stopOnLoss()
		defer tcancel()
		defer w.active.CompareAndDelete(jc.ID, a)
		defer func() {
			<-w.tickets
			w.released()
		}()
		select {
		case <-done:
		case <-ctx.Done():
			select {
			case <-done:
			case <-time.After(w.cfg.AbandonGrace):
				// The handler ignores its cancelled context. Its goroutine
				// cannot be stopped: record the outcome for it now, which
				// ends the run, so that its later writes are refused.
				w.abandoned.Add(1)
				releaseSlot()
				w.runLog(r).Error("handler ignores its cancelled context: ending its run without it", slog.Any("cause", context.Cause(ctx)), slog.Duration("grace", w.cfg.AbandonGrace))
				// Not cause: the handler's goroutine may still set it.
				ended := context.Cause(ctx)
				w.record(sess, r, job, ended, fmt.Errorf("handler did not return within %s of its context's cancellation (%v)", w.cfg.AbandonGrace, ended), "", a)
				return
			}
		}
		w.record(sess, r, job, cause, herr, trace, a)
	}
}

// call runs the handler, turning a panic into an error with its stack.
func (w *Worker) call(ctx context.Context, j *Job) (trace string, err error) {
	h := w.handler(j.Kind)
	if h == nil {
		return "", fmt.Errorf("%w %q on worker %s (it runs %v)", ErrUnknownKind, j.Kind, w.cfg.WorkerID, w.Kinds())
	}
	defer func() {
		if p := recover(); p != nil {
			trace, err = string(debug.Stack()), fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return "", checkError(h(ctx, j))
}

// checkError returns err, or if its Error method panics (a typed nil
// pointer, say) an error saying so: err would panic as its outcome is
// recorded, outside any recover.
func checkError(err error) (checked error) {
	if err == nil {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			checked = fmt.Errorf("handler returned an error (%T) whose Error method panicked: %v", err, p)
		}
	}()
	_ = err.Error()
	return err
}

// runLog is the logger of r's run, built only when there is something to
// say (most runs say nothing).
func (w *Worker) runLog(r *coordinator.Run) *slog.Logger {
	return w.jobLog(r.Job(), r.Token())
}

// outcomeLog is the logger of r's run once its outcome is recorded: with
// the attempt of the run (j's), not the record's, which a run given back
// leaves one lower.
func (w *Worker) outcomeLog(r *coordinator.Run, j *Job) *slog.Logger {
	return w.jobLog(j.Job, r.Token())
}

func (w *Worker) jobLog(j coordinator.Job, token fence.Token) *slog.Logger {
	return w.log.With(slog.String("job", j.ID), slog.String("kind", j.Kind), slog.String("queue", j.Queue), slog.Int("attempt", j.Attempt), slog.Int64("token", int64(token)))
}

// record writes the outcome of a run under its fence. cause is what had
// ended the run's context when its handler returned (nil if nothing had).
func (w *Worker) record(sess *coordinator.Session, r *coordinator.Run, j *Job, cause error, herr error, trace string, a *active) {
	j.end()
	out := Outcome{Job: j.Job, Token: r.Token(), HandlerErr: herr, Started: a.started, Ended: time.Now()}
	defer func() {
		if w.cfg.OnOutcome != nil {
			_ = w.c.CallUser("worker.Config.OnOutcome", func() *slog.Logger { return w.runLog(r) }, func() { w.cfg.OnOutcome(out) })
		}
	}()
	if lost := r.Lost(); lost != nil || errors.Is(cause, coordinator.ErrSessionExpired) || !sess.Valid() {
		// Why, when the handler returned on its own meanwhile (cause
		// nil): its session's end, or its deadline passing.
		why := cause
		if why == nil {
			why = context.Cause(sess.Ctx())
		}
		if why == nil {
			why = fmt.Errorf("%w: its validity deadline passed without a renewal", coordinator.ErrSessionExpired)
		}
		out.Op, out.Err = "abandon", lost
		if lost == nil {
			out.Err = fmt.Errorf("%w: session ended (%v)", fence.ErrLeaseLost, why)
		}
		w.runLog(r).Warn("run abandoned: the session's lease was lost; recording nothing", slog.Any("cause", why))
		return
	}
	// Outcome writes are bounded by the session's validity deadline:
	// after it, the store may already have given the job to another run.
	// The deadline moves with each renewal: an attempt that outlived the
	// one it started under is tried again under the next, while the
	// session lives (the job is ours until then; given up, it would be
	// released as an orphan by a write no outcome reports).
	// Once Stop cut its drain, the write is given up AbandonGrace after
	// the cut, or after it began if it began later (the outcome of a
	// handler abandoned at Stop): an attempt the store holds must not
	// hold Stop (ADR 0046).
	began := time.Now()
	gaveUp := func() (at time.Time, ok bool) {
		cut := w.drainCut.Load()
		if cut == nil {
			return time.Time{}, false
		}
		if began.After(*cut) {
			return began.Add(w.cfg.AbandonGrace), true
		}
		return cut.Add(w.cfg.AbandonGrace), true
	}
	var stopDeadline context.CancelFunc
	underDeadline := func() context.Context {
		if stopDeadline != nil {
			stopDeadline()
		}
		d := sess.ValidUntil()
		parent := w.giveUp // ends AbandonGrace after a cut still to come
		if at, ok := gaveUp(); ok {
			parent = context.Background()
			if at.Before(d) {
				d = at
			}
		}
		ctx, cancel := context.WithDeadline(parent, d)
		stopDeadline = cancel
		return ctx
	}
	wctx := underDeadline()
	defer func() { stopDeadline() }()
	var snooze *snoozeError
	var cancelled *cancelError
	var retryAt *retryAtError
	var op func(context.Context) error
	switch {
	case herr == nil:
		out.Op = "complete"
		op = func(ctx context.Context) error { return r.Complete(ctx, j.getResult()) }
	case errors.As(herr, &snooze):
		out.Op = "snooze"
		// A snooze until a time just past (time.Until of it) runs the
		// job again at once; the store refuses a negative one.
		op = func(ctx context.Context) error { return r.Snooze(ctx, max(snooze.d, 0)) }
	case errors.As(herr, &cancelled):
		out.Op = "cancel"
		cerr := cancelled.err
		if herr != error(cancelled) {
			// Wrapped or joined: what the handler said around it (its
			// context, a sibling error) is recorded too.
			cerr = herr
		}
		op = func(ctx context.Context) error { return r.Cancel(ctx, cerr) }
	case a.cancelRequested.Load():
		out.Op = "cancel"
		// What the handler said on its way out (a partial upload, a
		// command's stderr, a panic) is kept: as it is if it names the
		// cancel already, else beside it. Its context's bare error would
		// only repeat the cancel.
		cerr := ErrCancelRequested
		switch {
		case herr == nil || herr == context.Canceled || herr == ErrCancelRequested:
		case errors.Is(herr, ErrCancelRequested):
			cerr = herr
		default:
			cerr = fmt.Errorf("%w (the handler returned: %w)", ErrCancelRequested, herr)
		}
		op = func(ctx context.Context) error { return r.Cancel(ctx, cerr) }
	case errors.Is(cause, ErrShutdown):
		out.Op = "release"
		op = r.Release
	case errors.As(herr, &retryAt):
		out.Op = "fail"
		op = func(ctx context.Context) error {
			return r.Fail(ctx, herr, w.failOpts(&j.Job, coordinator.FailOpts{RetryAt: retryAt.at}))
		}
	default:
		if errors.Is(cause, context.DeadlineExceeded) {
			herr = fmt.Errorf("attempt timed out: %w", herr)
		}
		out.Op = "fail"
		op = func(ctx context.Context) error {
			return r.Fail(ctx, herr, w.failOpts(&j.Job, coordinator.FailOpts{Trace: trace}))
		}
	}
	delay := 50 * time.Millisecond
	discarding := false
	waitedForRoom := false
	retried := false
	for {
		err := op(wctx)
		out.Err = err
		switch {
		case err == nil:
			w.storeHasRoom()
			out.State = r.Job().State
			if out.Op != "cancel" && out.State == coordinator.StateCancelled {
				// A cancel request was pending: the store recorded the
				// job as cancelled instead of running it again.
				out.Op = "cancel"
			}
			if out.Op == "fail" {
				out.Job.MaxAttempts = r.Job().MaxAttempts
				// A discarded job runs no more: an operator has to look.
				level := slog.LevelInfo
				if out.State == coordinator.StateDiscarded {
					level = slog.LevelWarn
				}
				w.outcomeLog(r, j).Log(context.Background(), level, "attempt failed", slog.String("state", string(out.State)), slog.Any("err", herr))
			}
			if out.Op == "release" {
				// The job's record keeps no trace of a run given back
				// (no attempt used, no error): this line says which
				// jobs a stop interrupted, and how much work each lost.
				w.outcomeLog(r, j).Info("run interrupted by the stop: job re-queued", slog.Duration("ran", out.Ended.Sub(out.Started)))
			}
			return
		case errors.Is(err, fence.ErrLeaseLost):
			w.runLog(r).Warn("outcome refused: the run no longer owns the job (its lease ended, or another run took it); recording nothing", slog.Any("err", err))
			return
		case out.Op == "complete" && errors.Is(err, coordinator.ErrInvalid):
			// The result cannot be stored (too large, say): the attempt
			// failed, and says why.
			herr, out.Op = err, "fail"
			op = func(ctx context.Context) error {
				return r.Fail(ctx, herr, w.failOpts(&j.Job, coordinator.FailOpts{}))
			}
			continue
		case errors.Is(err, coordinator.ErrInvalid) && !discarding:
			// The job cannot run again as it is (its record, with this
			// outcome, would be too large to make available): it ends
			// discarded, saying why, rather than staying running until
			// this daemon's session ends. A cancel (whose record, with
			// the handler's error, is too large) ends cancelled all the
			// same, saying why that error is not there.
			discarding = true
			if out.Op == "cancel" {
				cause := fmt.Errorf("the handler's error could not be recorded with the cancel: %v", err)
				op = func(ctx context.Context) error { return r.Cancel(ctx, cause) }
				continue
			}
			cause := fmt.Errorf("%s could not be recorded, so the job was discarded: %v", out.Op, err)
			herr, out.Op = cause, "fail"
			op = func(ctx context.Context) error { return r.Fail(ctx, cause, coordinator.FailOpts{Discard: true}) }
			continue
		case errors.Is(err, kv.ErrClosed):
			// No retry can succeed: the store was closed under the worker.
			w.runLog(r).Error("cannot record outcome: the store is closed (stop workers before closing it); the job stays running until it is re-queued", slog.Any("err", err))
			return
		case errors.Is(err, kv.ErrFailed):
			// No retry can succeed either: the store refuses every call
			// until it is opened again, which re-queues the job.
			w.runLog(r).Error("cannot record outcome: the store failed; the job stays running until the store is opened again, which re-queues it", slog.Any("err", err))
			return
		case errors.Is(err, coordinator.ErrUnknownOutcome):
			w.runLog(r).Warn("outcome unknown: an earlier attempt's reply was lost, and the store no longer shows whether it landed; the job's record says what happened", slog.Any("err", err))
			return
		case w.pastGiveUp(gaveUp):
			// The worker stops, its drain deadline AbandonGrace past. A
			// store that refuses writes while it renews the lease (etcd
			// out of space, say), or that holds them to their deadline
			// (which each renewal moves on), would otherwise hold Stop
			// for ever: the job stays running until Stop closes the
			// session, whose revoke leaves it to be re-queued (by a
			// reaper, or in embedded mode at the next open). Looked at
			// before a renewal carries the write on (ADR 0046).
			w.runLog(r).Error("cannot record outcome before the worker stops; the job is re-queued once the session's lease is gone (shared: by a reaper; embedded: at the store's next open)", slog.Any("err", err))
			return
		case wctx.Err() != nil && sess.Valid() && sess.ValidUntil().After(time.Now()):
			// Renewed since this attempt began: go on under the new
			// deadline, at once.
			wctx = underDeadline()
			continue
		case wctx.Err() != nil || errors.Is(err, coordinator.ErrInvalid) || errors.Is(err, coordinator.ErrWrongState):
			w.runLog(r).Error("cannot record outcome; the job stays running until this daemon's session ends, then it is reaped and run again", slog.Any("err", err))
			return
		}
		switch {
		case !w.storeFull(err):
			// Once per run: retried every second until the session's
			// deadline, a line per retry of each run was a line per job
			// per second while the store refused writes.
			if !retried {
				w.runLog(r).Warn("recording outcome failed; retrying", slog.Any("err", err))
			}
			retried = true
		case !waitedForRoom:
			// Once per run: the store's want of room is logged once
			// for the worker (storeFull), and may last for hours.
			w.runLog(r).Warn("recording outcome waits for room in the store; retrying until there is", slog.String("op", out.Op))
		}
		waitedForRoom = waitedForRoom || errors.Is(err, kv.ErrNoSpace)
		select {
		case <-wctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// Stop stops claiming and waits for running handlers until ctx ends; then
// it cancels them (cause ErrShutdown) and releases their jobs, which become
// available again without using an attempt. A claim that lands after Stop
// began gives its jobs back the same way, starting no handler. Finally it
// closes the session, which removes the worker's registration. It returns
// ctx's error if the drain did not finish in time. A handler that ignores
// its cancelled context is waited for up to Config.AbandonGrace more, then
// abandoned (its outcome recorded without it), so Stop may return that
// long after ctx ends; an outcome write that keeps failing, or that the
// store holds, is retried as long (from ctx's end, or from when the write
// began if later: twice AbandonGrace for an abandoned handler's), then
// given up (its job is re-queued once the session's lease is revoked). A Stop called while another runs waits for it, but cuts the
// drain short as its own ctx ends.
//
// Do not call Stop from a handler: it waits for that handler too, until
// ctx ends and AbandonGrace more.
//
// ctx is the drain's deadline: with one that never ends
// (context.Background()), Stop waits as long as a handler runs, for ever
// for one that waits on its own context. Pass one with a deadline, such
// as context.WithTimeout(context.Background(), 30*time.Second).
//
// Stop the worker before closing the store. A Stop that finds the store
// closed cuts the drain at once (nothing can be recorded any more) and
// returns an error wrapping kv.ErrClosed; the jobs it was running stay
// running until they are re-queued (by a worker's Start after the next
// open, or by a reaper once the lease expires).
func (w *Worker) Stop(ctx context.Context) error {
	if !w.stopBegun.CompareAndSwap(false, true) {
		select {
		case <-w.stopped:
			// Stopped already: nothing to drain, whatever ctx says (a
			// select of both would pick one at random).
			return nil
		default:
		}
		select {
		case <-w.stopped:
			return nil
		case <-ctx.Done():
			w.forceOnce.Do(func() { close(w.force) })
			<-w.stopped
			return fmt.Errorf("worker: drain: %w", ctx.Err())
		}
	}
	var err error
	func() {
		w.lifeMu.Lock()
		defer w.lifeMu.Unlock()
		defer close(w.stopped)
		if !w.started.Load() {
			return
		}
		w.loopCancel()
		// A claim in flight may still land: from here on it gives its
		// jobs back rather than start handlers the drain would miss.
		w.startMu.Lock()
		w.stopping = true
		w.startMu.Unlock()
		drained := make(chan struct{})
		go func() {
			w.handlersWG.Wait()
			close(drained)
		}()
		// Is the store still open? Closed before Stop, it refuses every
		// outcome: draining would only wait out ctx. The probe is a read
		// in the namespace (not a lease renewal, which would keep alive
		// a lease this worker may have stopped trusting).
		probe := make(chan error, 1)
		pctx, pcancel := context.WithCancel(context.Background())
		go func() {
			_, perr := w.c.QueueConfig(pctx, w.cfg.Queues[0])
			probe <- perr
		}()
		storeClosed := false
	drain:
		for {
			select {
			case <-drained:
				break drain
			case perr := <-probe:
				probe = nil // answered: a nil channel is never ready
				if !errors.Is(perr, kv.ErrClosed) {
					continue
				}
				storeClosed = true
				w.log.Warn("the store was closed before the worker stopped: cancelling running handlers, whose outcomes cannot be recorded", slog.Int("running", w.Running()))
				w.cutDrain()
				<-drained
				break drain
			case <-ctx.Done():
				// Running handlers are interrupted. With none running
				// (and none to start: claims give their jobs back now),
				// only outcome writes remain, which finish on their own:
				// the drain did not miss its deadline.
				if n := w.Running(); n > 0 {
					err = fmt.Errorf("worker: drain: %w", ctx.Err())
					w.log.Warn("drain deadline passed: cancelling running handlers", slog.Int("running", n))
				}
				w.cutDrain()
				<-drained
				break drain
			case <-w.force:
				w.log.Warn("drain deadline of a concurrent Stop passed: cancelling running handlers", slog.Int("running", w.Running()))
				w.cutDrain()
				<-drained
				break drain
			}
		}
		pcancel()
		if probe != nil {
			<-probe
		}
		w.runCancel(ErrShutdown)
		// Drained: no run starts any more, and every finisher is idle.
		close(w.finishQuit)
		w.finishers.Wait()
		w.cancelStop()
		w.loops.Wait()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if cerr := w.sess.Load().Close(cctx); cerr != nil {
			w.log.Warn("closing session", slog.Any("err", cerr))
			storeClosed = storeClosed || errors.Is(cerr, kv.ErrClosed)
		}
		if storeClosed {
			err = fmt.Errorf("worker: stop: %w: close the store only after Stop returns; any jobs the worker was running stay running until re-queued (by the next worker's Start on the reopened store in embedded mode, or by a reaper once the lease expires)", kv.ErrClosed)
		}
		w.sessCancel()
		if w.giveUpAt != nil {
			w.giveUpAt.Stop()
		}
		w.giveUpCancel()
		w.fenceWatch.Wait()
		w.log.Info("worker stopped")
	}()
	return err
}

// cutDrain ends Stop's drain early: running handlers are cancelled (cause
// ErrShutdown), and outcome writes that keep failing give up AbandonGrace
// from now.
func (w *Worker) cutDrain() {
	w.cutOnce.Do(func() {
		now := time.Now()
		w.drainCut.Store(&now)
		w.giveUpAt = time.AfterFunc(w.cfg.AbandonGrace, w.giveUpCancel)
	})
	w.runCancel(ErrShutdown)
}

// pastGiveUp reports whether an outcome write is given up: Stop cut its
// drain, and the time gaveUp gives for the write has come.
func (w *Worker) pastGiveUp(gaveUp func() (time.Time, bool)) bool {
	at, ok := gaveUp()
	return ok && !time.Now().Before(at)
}
