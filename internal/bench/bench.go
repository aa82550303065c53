package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/worker"
)

// Modes.
const (
	ModeEmbedded = "embedded"
	ModeShared   = "shared"
)

// Phases, in the order Run emits them.
const (
	PhaseCeiling = "ceiling"
	PhaseInsert  = "insert"
	PhaseDrain   = "drain"
	PhaseLatency = "latency"
)

// Defaults of Config.
const (
	DefaultJobs        = 20000
	DefaultConcurrency = 64
	DefaultLatencyJobs = 2000
	DefaultLatencyRate = 500
	// InsertBatch is how many jobs one EnqueueBatch call of the insert
	// phase carries.
	InsertBatch = 1000
)

// Kinds of the bench's jobs.
const (
	kindDrain   = "bench.noop"
	kindLatency = "bench.latency"
)

// Config says what to run. The zero value of each field means its default.
type Config struct {
	// Mode is ModeEmbedded or ModeShared. Default: shared if Etcd is set,
	// else embedded.
	Mode string
	// Data is the embedded store's directory. Default: a new temporary
	// directory, removed afterwards. A directory in use by a daemon is
	// locked: Run fails with an error naming it.
	Data string
	// Etcd are the endpoints of an etcd cluster for shared mode. Default:
	// one embedded etcd member that Run starts, in a temporary directory,
	// and stops.
	Etcd []string
	// Jobs is N, the jobs of the insert and drain phases (and the
	// operations of the ceiling loop). Default: DefaultJobs.
	Jobs int
	// Concurrency is the worker's slots. Default: DefaultConcurrency.
	Concurrency int
	// Daemons is how many workers drain the queue (shared mode only), each
	// with its own etcd client, session and Concurrency slots, as separate
	// daemons would: to compare the total drain of several daemons with
	// one's. Default: 1.
	Daemons int
	// LatencyJobs is the number of jobs of the latency phase. Default:
	// DefaultLatencyJobs; negative: no latency phase.
	LatencyJobs int
	// LatencyRate is the open-loop enqueue rate of the latency phase, in
	// jobs per second. Default: DefaultLatencyRate.
	LatencyRate float64
	// Ceiling also runs the raw-store loop (phase "ceiling") and adds
	// ceiling_ratio to the drain result.
	Ceiling bool
	// Logger receives the coordinator's and worker's logs and Run's own
	// notes. Default: discarded.
	Logger *slog.Logger
	// Progress, if set, is called about ten times a second during each
	// phase, and once at its end, from one goroutine at a time. For a
	// progress bar; it must not block.
	Progress func(phase string, done, total int)
}

// Result is one phase's numbers: one JSON object of `leasehold bench
// --json`.
type Result struct {
	Mode  string `json:"mode"`
	Phase string `json:"phase"`
	// Jobs is the number of jobs (the ceiling: operations) measured.
	Jobs int `json:"jobs"`
	// Seconds is the phase's wall time on the monotonic clock.
	Seconds float64 `json:"seconds"`
	// JobsPerSec is Jobs/Seconds (the ceiling: operations per second).
	JobsPerSec float64 `json:"jobs_per_sec"`
	// Percentiles (nearest rank) and maximum of the phase's per-item
	// latency, in milliseconds: see the package doc for what is timed in
	// each phase.
	P50MS float64 `json:"p50_ms"`
	P90MS float64 `json:"p90_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
	// MaxRSSMB is the process's peak resident set so far, in MiB
	// (getrusage; 0 where unsupported). It includes an embedded etcd
	// member when Run started one.
	MaxRSSMB float64 `json:"max_rss_mb"`
	// Concurrency is the worker's slots (drain, latency), the concurrent
	// callers (insert: 1) or the concurrent writers (ceiling).
	Concurrency int `json:"concurrency"`
	// Daemons is the number of workers (drain, latency), when more than
	// one; Concurrency is then each one's.
	Daemons int `json:"daemons,omitempty"`
	// FirstTenthJobsPerSec and LastTenthJobsPerSec are the rates of the
	// first and the last tenth of the jobs (insert, drain): how the cost
	// changes as the queue fills or empties. Insert's are over whole calls
	// (the fewest that hold a tenth of the jobs).
	FirstTenthJobsPerSec float64 `json:"first_tenth_jobs_per_sec,omitempty"`
	LastTenthJobsPerSec  float64 `json:"last_tenth_jobs_per_sec,omitempty"`
	// EnqueueP50MS and EnqueueP99MS are percentiles of the latency
	// phase's Enqueue calls alone (a durable write each): the part of the
	// pickup latency spent before the job is in the store.
	EnqueueP50MS float64 `json:"enqueue_p50_ms,omitempty"`
	EnqueueP99MS float64 `json:"enqueue_p99_ms,omitempty"`
	// CPUMicrosPerJob is the process's CPU time (user and system, all
	// threads: an embedded etcd member's too) over the phase, per job (the
	// ceiling: per operation), in microseconds; CPUCores is that CPU time
	// over the phase's wall time: how many cores were busy. Unlike the
	// rates, CPU per job carries over between machines of one speed of
	// core, and shows what a change saves when the drain waits on the
	// disk. 0 where unmeasured.
	CPUMicrosPerJob float64 `json:"cpu_us_per_job,omitempty"`
	CPUCores        float64 `json:"cpu_cores,omitempty"`
	// CeilingRatio is drain jobs/s divided by ceiling operations/s, on the
	// drain result when both ran.
	CeilingRatio float64 `json:"ceiling_ratio,omitempty"`
	// Store says what the phase ran on: "pebble DIR", "etcd URL,..." or
	// "etcd (embedded member)", followed by " (memory-backed: not
	// durable)" when the store's directory is on tmpfs.
	Store string `json:"store"`
	// Detail describes what one operation of the ceiling loop is.
	Detail    string `json:"detail,omitempty"`
	GoVersion string `json:"go_version"`
	CPUs      int    `json:"cpus"`
	// Date is when the phase ended, RFC 3339, UTC.
	Date string `json:"date"`
}

// Run runs the phases of cfg in order (ceiling if asked, insert, drain,
// latency) on a fresh namespace of the store, and calls emit with each
// phase's result as soon as it is known. It returns the first error, after
// stopping everything it started. It asserts nothing about timing: it
// reports numbers.
func Run(ctx context.Context, cfg Config, emit func(Result)) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	log := cfg.Logger
	env, err := openEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.close()

	ns := newNamespace()
	c, err := coordinator.New(env.store, coordinator.Config{Namespace: ns, Logger: log})
	if err != nil {
		return err
	}
	r := &runner{cfg: cfg, env: env, c: c, ns: ns, log: log, emit: emit}
	log.Info("bench starting", slog.String("mode", cfg.Mode), slog.String("store", env.label), slog.String("namespace", ns),
		slog.Int("jobs", cfg.Jobs), slog.Int("concurrency", cfg.Concurrency))
	err = r.run(ctx)
	if env.persistent {
		// Leave a reused store as it was: delete the bench's jobs
		// (untimed). After a failure unfinished jobs may remain in the
		// namespace; say which.
		if perr := r.purge(context.WithoutCancel(ctx)); perr != nil {
			log.Warn("bench: could not delete the bench's jobs", slog.String("namespace", ns), slog.Any("err", perr))
		}
		if err != nil {
			log.Warn("bench failed; its namespace may keep unfinished jobs", slog.String("namespace", ns))
		}
	}
	return err
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Mode == "" {
		cfg.Mode = ModeEmbedded
		if len(cfg.Etcd) > 0 {
			cfg.Mode = ModeShared
		}
	}
	switch cfg.Mode {
	case ModeEmbedded:
		if len(cfg.Etcd) > 0 {
			return cfg, errors.New("bench: etcd endpoints given in embedded mode; use shared mode, or drop the endpoints")
		}
	case ModeShared:
		if cfg.Data != "" {
			return cfg, errors.New("bench: a data directory is for embedded mode; shared mode runs on etcd (give endpoints, or none to start an embedded member)")
		}
	default:
		return cfg, fmt.Errorf("bench: unknown mode %q: want %s or %s", cfg.Mode, ModeEmbedded, ModeShared)
	}
	if cfg.Jobs == 0 {
		cfg.Jobs = DefaultJobs
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Daemons == 0 {
		cfg.Daemons = 1
	}
	if cfg.Daemons < 0 {
		return cfg, errors.New("bench: daemons must be positive")
	}
	if cfg.Daemons > 1 && cfg.Mode != ModeShared {
		return cfg, errors.New("bench: several daemons need shared mode (one embedded store has one daemon)")
	}
	if cfg.LatencyJobs == 0 {
		cfg.LatencyJobs = DefaultLatencyJobs
	}
	if cfg.LatencyRate == 0 {
		cfg.LatencyRate = DefaultLatencyRate
	}
	if cfg.Jobs < 0 || cfg.Concurrency < 0 || cfg.LatencyRate < 0 || math.IsNaN(cfg.LatencyRate) || math.IsInf(cfg.LatencyRate, 0) {
		return cfg, errors.New("bench: jobs, concurrency and latency rate must be positive")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// newNamespace returns a namespace no earlier run used, so a reused store
// is fine.
func newNamespace() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "bench-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

type runner struct {
	cfg  Config
	env  *env
	c    *coordinator.Coordinator
	ns   string
	log  *slog.Logger
	emit func(Result)
}

func (r *runner) run(ctx context.Context) error {
	var ceiling *Result
	if r.cfg.Ceiling {
		res, err := r.ceiling(ctx)
		if err != nil {
			return err
		}
		ceiling = &res
		r.emit(res)
	}

	res, err := r.insert(ctx)
	if err != nil {
		return err
	}
	r.emit(res)

	// One worker for both remaining phases: drain starts it, latency
	// reuses it, so that the latency phase measures a running worker.
	h := newHandlers(r.cfg.Jobs, max(r.cfg.LatencyJobs, 0))
	var ws []*worker.Worker
	defer func() {
		for _, w := range ws {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			if err := w.Stop(sctx); err != nil {
				r.log.Warn("bench: stopping a worker", slog.Any("err", err))
			}
			cancel()
		}
	}()
	for i := range r.cfg.Daemons {
		c := r.c
		if i > 0 {
			store, err := r.env.another(ctx)
			if err != nil {
				return err
			}
			if c, err = coordinator.New(store, coordinator.Config{Namespace: r.ns, Logger: r.log}); err != nil {
				return err
			}
		}
		// As the daemon does: in shared mode, claims pick at random among
		// the first jobs, so that daemons do not all race for the same.
		w, err := worker.New(c, worker.Config{Concurrency: r.cfg.Concurrency, Logger: r.log, Spread: r.cfg.Mode == ModeShared})
		if err != nil {
			return err
		}
		w.Handle(kindDrain, h.drain)
		w.Handle(kindLatency, h.latency)
		ws = append(ws, w)
	}

	res, err = r.drain(ctx, ws, h)
	if err != nil {
		return err
	}
	if ceiling != nil && ceiling.JobsPerSec > 0 {
		res.CeilingRatio = round(res.JobsPerSec/ceiling.JobsPerSec, 3)
	}
	r.emit(res)
	if r.cfg.LatencyJobs < 0 {
		return nil
	}

	res, err = r.latency(ctx, ws, h)
	if err != nil {
		return err
	}
	r.emit(res)
	return nil
}

// result fills the fields every phase has.
func (r *runner) result(phase string, jobs, concurrency int, elapsed time.Duration, lat []time.Duration) Result {
	res := Result{
		Mode:        r.cfg.Mode,
		Phase:       phase,
		Jobs:        jobs,
		Seconds:     round(elapsed.Seconds(), 6),
		Concurrency: concurrency,
		Daemons:     r.cfg.Daemons,
		MaxRSSMB:    round(maxRSSMB(), 1),
		Store:       r.env.label,
		GoVersion:   runtime.Version(),
		CPUs:        runtime.NumCPU(),
		Date:        time.Now().UTC().Format(time.RFC3339),
	}
	if elapsed > 0 {
		res.JobsPerSec = round(float64(jobs)/elapsed.Seconds(), 1)
	}
	if res.Daemons == 1 || phase == PhaseInsert || phase == PhaseCeiling {
		res.Daemons = 0
	}
	r.fillLatency(&res, lat)
	return res
}

// fillLatency sets the percentiles of lat, which it sorts.
func (r *runner) fillLatency(res *Result, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	res.P50MS = ms(percentile(lat, 50))
	res.P90MS = ms(percentile(lat, 90))
	res.P99MS = ms(percentile(lat, 99))
	res.MaxMS = ms(lat[len(lat)-1])
}

// tenths returns the rates of the first and the last tenth of n jobs
// done in elapsed, given when the k-th job (1-based) was done; zero for
// fewer than 10 jobs.
func tenths(n int, elapsed time.Duration, doneAt func(k int) time.Duration) (first, last float64) {
	tenth := n / 10
	if tenth == 0 {
		return 0, 0
	}
	if d := doneAt(tenth); d > 0 {
		first = round(float64(tenth)/d.Seconds(), 1)
	}
	if d := elapsed - doneAt(n-tenth); d > 0 {
		last = round(float64(tenth)/d.Seconds(), 1)
	}
	return first, last
}

// insert enqueues N jobs, InsertBatch per EnqueueBatch call, one call at a
// time, with no worker running. Its latencies are those of the calls.
func (r *runner) insert(ctx context.Context) (Result, error) {
	n := r.cfg.Jobs
	var done atomic.Int64
	stop := r.progress(PhaseInsert, n, done.Load)
	defer stop()
	lat := make([]time.Duration, 0, (n+InsertBatch-1)/InsertBatch)
	at := make([]time.Duration, 0, cap(lat)) // since start, after each call
	params := make([]coordinator.EnqueueParams, 0, min(n, InsertBatch))
	cpu := markCPU()
	start := time.Now()
	for i := 0; i < n; i += InsertBatch {
		params = params[:0]
		for k := i; k < min(i+InsertBatch, n); k++ {
			params = append(params, coordinator.EnqueueParams{Kind: kindDrain, Payload: payload(time.Now(), k)})
		}
		t0 := time.Now()
		if _, err := r.c.EnqueueBatch(ctx, params); err != nil {
			return Result{}, fmt.Errorf("bench: insert: %w", err)
		}
		lat = append(lat, time.Since(t0))
		at = append(at, time.Since(start))
		done.Add(int64(len(params)))
	}
	elapsed := time.Since(start)
	stop()
	res := r.result(PhaseInsert, n, 1, elapsed, lat)
	cpu.fill(&res, n, elapsed)
	res.FirstTenthJobsPerSec, res.LastTenthJobsPerSec = insertTenths(n, elapsed, at)
	return res, nil
}

// insertTenths returns the rates of the first and the last tenth of n jobs
// enqueued InsertBatch per call in elapsed, given at[c], the time since
// the start after call c. A call's jobs are done together, so each rate is
// over the fewest whole calls that hold a tenth of the jobs; zero for fewer
// than 10 jobs.
func insertTenths(n int, elapsed time.Duration, at []time.Duration) (first, last float64) {
	tenth := n / 10
	if tenth == 0 || len(at) == 0 {
		return 0, 0
	}
	doneAfter := func(c int) int { return min((c+1)*InsertBatch, n) } // jobs done after call c
	c := min(len(at)-1, (tenth+InsertBatch-1)/InsertBatch-1)          // the call that completes the first tenth
	if d := at[c]; d > 0 {
		first = round(float64(doneAfter(c))/d.Seconds(), 1)
	}
	// The last call after which a tenth or more remain (none: all calls).
	from, jobs := time.Duration(0), n
	if c := (n-tenth)/InsertBatch - 1; c >= 0 {
		from, jobs = at[c], n-doneAfter(c)
	}
	if d := elapsed - from; d > 0 {
		last = round(float64(jobs)/d.Seconds(), 1)
	}
	return first, last
}

// drain starts the worker and times until all N jobs are durably recorded
// completed. Its latencies are, per job, the time from the worker's start
// to its handler's start (their spread shows whether the drain ran at an
// even pace).
//
// End detection polls no store. The handlers count their starts; once all
// N have started, Run polls Worker.Pending (every 200 µs), which drops
// for a job only after the worker's write of its outcome (Run.Complete, a
// durable transaction) has returned (Worker.Running drops as the handler
// returns, before that write). Counts then confirms, untimed, that N jobs
// are completed; should it find fewer (an outcome that failed to record, a
// worker whose accounting changed), Run polls Counts every 20 ms until
// they are and times the drain up to then.
func (r *runner) drain(ctx context.Context, ws []*worker.Worker, h *handlers) (Result, error) {
	n := r.cfg.Jobs
	stop := r.progress(PhaseDrain, n, h.drainStarted.Load)
	defer stop()
	cpu := markCPU()
	start := time.Now()
	h.drainStart.Store(&start)
	for _, w := range ws {
		if err := w.Start(ctx); err != nil {
			return Result{}, fmt.Errorf("bench: start worker: %w", err)
		}
	}
	select {
	case <-h.drainDone:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	for _, w := range ws {
		if err := waitIdle(ctx, w); err != nil {
			return Result{}, err
		}
	}
	end := time.Now()
	stop()
	confirmedAt, err := r.waitCompleted(ctx, n)
	if err != nil {
		return Result{}, err
	}
	if !confirmedAt.IsZero() {
		end = confirmedAt
	}
	lat := make([]time.Duration, n)
	for i := range lat {
		lat[i] = time.Duration(h.drainOffsets[i].Load())
	}
	res := r.result(PhaseDrain, n, r.cfg.Concurrency, end.Sub(start), nil)
	cpu.fill(&res, n, end.Sub(start))
	res.FirstTenthJobsPerSec, res.LastTenthJobsPerSec = tenths(n, end.Sub(start), func(k int) time.Duration { return lat[k-1] })
	r.fillLatency(&res, lat)
	return res, nil
}

// waitIdle waits until no handler of w runs and no outcome is being
// written.
func waitIdle(ctx context.Context, w *worker.Worker) error {
	if w.Pending() == 0 {
		return nil
	}
	t := time.NewTicker(200 * time.Microsecond)
	defer t.Stop()
	for w.Pending() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// waitCompleted checks that at least n jobs of the namespace are completed.
// It returns the zero time if they were at once, else the time they were.
func (r *runner) waitCompleted(ctx context.Context, n int) (time.Time, error) {
	var late time.Time
	for {
		counts, err := r.c.Counts(ctx)
		if err != nil {
			return time.Time{}, fmt.Errorf("bench: count completed jobs: %w", err)
		}
		if counts[coordinator.StateCompleted] >= n {
			return late, nil
		}
		if counts[coordinator.StateAvailable]+counts[coordinator.StateRunning]+counts[coordinator.StateRetryable]+counts[coordinator.StateScheduled] == 0 {
			return time.Time{}, fmt.Errorf("bench: only %d of %d jobs completed, none left to run (discarded %d, cancelled %d)",
				counts[coordinator.StateCompleted], n, counts[coordinator.StateDiscarded], counts[coordinator.StateCancelled])
		}
		if late.IsZero() {
			r.log.Warn("bench: the worker went idle before every job was recorded completed; waiting on Counts",
				slog.Int("completed", counts[coordinator.StateCompleted]), slog.Int("want", n))
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		late = time.Now()
	}
}

// latency enqueues LatencyJobs jobs one per call, open loop at
// LatencyRate, each call in its own goroutine, with the worker running.
// Its latencies are, per job, from the start of its Enqueue call to the
// start of its handler, both on the monotonic clock. Its jobs/s is the
// rate achieved: jobs over the time from the first enqueue to the last
// handler start.
func (r *runner) latency(ctx context.Context, ws []*worker.Worker, h *handlers) (Result, error) {
	n := r.cfg.LatencyJobs
	stop := r.progress(PhaseLatency, n, h.latStarted.Load)
	defer stop()
	interval := time.Duration(float64(time.Second) / r.cfg.LatencyRate)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A failed enqueue cancels ctx; failed says why ctx ended.
	errc := make(chan error, 1)
	failed := func() error {
		select {
		case err := <-errc:
			return err
		default:
			return ctx.Err()
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	base := h.base
	enq := make([]time.Duration, n) // each Enqueue call's duration
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			// Open loop: the schedule does not wait for earlier calls.
			select {
			case <-ctx.Done():
				return Result{}, failed()
			case <-time.After(d):
			}
		}
		wg.Go(func() {
			t0 := time.Now()
			h.latEnqueued[i].Store(int64(t0.Sub(base)))
			_, err := r.c.Enqueue(ctx, coordinator.EnqueueParams{Kind: kindLatency, Payload: payload(t0, i)})
			enq[i] = time.Since(t0)
			if err != nil {
				select {
				case errc <- fmt.Errorf("bench: latency: enqueue job %d: %w", i, err):
				default:
				}
				cancel()
			}
		})
	}
	select {
	case <-h.latDone:
	case <-ctx.Done():
		return Result{}, failed()
	}
	end := base.Add(time.Duration(h.latLast.Load()))
	stop()
	for _, w := range ws {
		if err := waitIdle(ctx, w); err != nil {
			return Result{}, err
		}
	}
	lat := make([]time.Duration, n)
	for i := range lat {
		lat[i] = time.Duration(h.latLatency[i].Load())
	}
	res := r.result(PhaseLatency, n, r.cfg.Concurrency, end.Sub(start), lat)
	wg.Wait() // a job can start before its Enqueue call returns
	slices.Sort(enq)
	res.EnqueueP50MS, res.EnqueueP99MS = ms(percentile(enq, 50)), ms(percentile(enq, 99))
	return res, nil
}

// progress calls cfg.Progress every 100 ms from one goroutine until the
// returned stop is called; stop makes a last call and is idempotent.
func (r *runner) progress(phase string, total int, done func() int64) (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	quit := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				r.cfg.Progress(phase, min(int(done()), total), total)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-exited
			r.cfg.Progress(phase, min(int(done()), total), total)
		})
	}
}

// purge deletes the namespace's finished jobs (all of them, after a
// successful run) through the coordinator's own retention purge.
func (r *runner) purge(ctx context.Context) error {
	c, err := coordinator.New(r.env.store, coordinator.Config{Namespace: r.ns, Logger: r.log, Retention: time.Nanosecond})
	if err != nil {
		return err
	}
	n, err := c.PurgeFinished(ctx)
	r.log.Info("bench: deleted the bench's finished jobs", slog.String("namespace", r.ns), slog.Int("jobs", n))
	return err
}

// handlers are the worker's two no-op handlers and what they record.
type handlers struct {
	base time.Time // origin of the monotonic offsets below

	nDrain       int
	drainStart   atomic.Pointer[time.Time]
	drainStarted atomic.Int64
	drainOffsets []atomic.Int64 // by start order: since drainStart
	drainDone    chan struct{}

	nLat        int
	latEnqueued []atomic.Int64 // by job index: enqueue call start, since base
	latLatency  []atomic.Int64 // by job index: handler start - enqueue call start
	latStarted  atomic.Int64
	latLast     atomic.Int64 // latest handler start, since base
	latDone     chan struct{}
}

func newHandlers(nDrain, nLat int) *handlers {
	return &handlers{
		base:         time.Now(),
		nDrain:       nDrain,
		drainOffsets: make([]atomic.Int64, nDrain),
		drainDone:    make(chan struct{}),
		nLat:         nLat,
		latEnqueued:  make([]atomic.Int64, nLat),
		latLatency:   make([]atomic.Int64, nLat),
		latDone:      make(chan struct{}),
	}
}

// drain is a no-op that notes when it started.
func (h *handlers) drain(context.Context, *worker.Job) error {
	k := int(h.drainStarted.Add(1))
	if k <= h.nDrain {
		h.drainOffsets[k-1].Store(int64(time.Since(*h.drainStart.Load())))
	}
	if k == h.nDrain {
		close(h.drainDone)
	}
	return nil
}

// latency reads the job's index from its payload and records the time
// since its enqueue call started.
func (h *handlers) latency(_ context.Context, j *worker.Job) error {
	now := int64(time.Since(h.base))
	var p struct {
		T int64 `json:"t"`
		I int   `json:"i"`
	}
	if err := j.Decode(&p); err != nil {
		return worker.JobCancel(err)
	}
	if p.I < 0 || p.I >= h.nLat {
		return worker.JobCancel(fmt.Errorf("bench: job index %d out of range", p.I))
	}
	if !h.latLatency[p.I].CompareAndSwap(0, now-h.latEnqueued[p.I].Load()) {
		return nil // a second run of the job: counted once, by its first
	}
	for {
		last := h.latLast.Load()
		if now <= last || h.latLast.CompareAndSwap(last, now) {
			break
		}
	}
	if int(h.latStarted.Add(1)) == h.nLat {
		close(h.latDone)
	}
	return nil
}

// payload is the job payload {"t":<unix ns>,"i":<n>}.
func payload(t time.Time, i int) []byte {
	b := make([]byte, 0, 40)
	b = append(b, `{"t":`...)
	b = strconv.AppendInt(b, t.UnixNano(), 10)
	b = append(b, `,"i":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	return append(b, '}')
}

// percentile is the nearest-rank percentile of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	k := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(k, 1), len(sorted))-1]
}

func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// cpuMark is the process's CPU time at the start of a phase.
type cpuMark time.Duration

func markCPU() cpuMark { return cpuMark(cpuTime()) }

// fill sets res's CPU figures for a phase of jobs over wall, begun at m.
func (m cpuMark) fill(res *Result, jobs int, wall time.Duration) {
	used := cpuTime() - time.Duration(m)
	if m == 0 || used <= 0 || jobs <= 0 || wall <= 0 {
		return
	}
	res.CPUMicrosPerJob = round(float64(used.Microseconds())/float64(jobs), 1)
	res.CPUCores = round(used.Seconds()/wall.Seconds(), 2)
}
