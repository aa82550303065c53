package metrics

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/worker"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the instruments of one worker, its coordinator and its
// store, registered on one registry. Counters count what this process did
// or saw since it started; the job gauges (RegisterJobs) are read from the
// store at scrape time and are the same on every daemon of a namespace.
type Metrics struct {
	reg prometheus.Registerer

	enqueued      *prometheus.CounterVec
	claims        *prometheus.CounterVec
	conflicts     *prometheus.CounterVec
	completions   *prometheus.CounterVec
	failures      *prometheus.CounterVec
	retries       *prometheus.CounterVec
	discards      *prometheus.CounterVec
	cancellations *prometheus.CounterVec
	snoozes       *prometheus.CounterVec
	refused       *prometheus.CounterVec
	writeErrors   *prometheus.CounterVec
	handlerTime   *prometheus.HistogramVec
	queueLatency  *prometheus.HistogramVec
	reclaimDelay  prometheus.Histogram
	reaped        *prometheus.CounterVec
	renewals      prometheus.Counter
	renewalTime   prometheus.Histogram
	storeErrors   *prometheus.CounterVec

	// enqueueQueues are the queue labels leasehold_enqueued_total uses.
	enqueueQueues boundedLabels
	// kinds are the kind labels of every metric labelled by kind.
	kinds boundedLabels
}

// MaxQueueLabels bounds the queue labels of a metric: the first
// MaxQueueLabels queues a metric sees keep their names, later ones are
// counted as "other". Clients may enqueue to any queue name, and each
// would otherwise be a series for as long as the process lives.
const MaxQueueLabels = 100

// MaxKindLabels bounds the kind labels likewise: the kinds a registered
// worker has handlers for (RegisterWorker) and the first MaxKindLabels
// kinds seen keep their names, later ones are counted as "other". A
// worker claims jobs of any kind, and each kind it has no handler for
// would otherwise be some twenty series (its failures, retries, discards
// and handler time histogram) for as long as the process lives.
const MaxKindLabels = 100

// boundedLabels bounds a metric's queue or kind label values: the first
// max values seen (MaxQueueLabels if max is 0), besides those kept, keep
// their names. The zero value is ready to use.
type boundedLabels struct {
	max  int
	mu   sync.Mutex
	seen map[string]bool
	// kept counts the values of seen given their label by keep, which
	// the bound leaves out.
	kept int
}

// label returns q's label.
func (l *boundedLabels) label(q string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	limit := l.max
	if limit == 0 {
		limit = MaxQueueLabels
	}
	if !l.seen[q] && len(l.seen)-l.kept >= limit {
		return "other"
	}
	l.seen[q] = true
	return q
}

// keep gives q its own label, outside the bound.
func (l *boundedLabels) keep(q string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	if !l.seen[q] {
		l.seen[q] = true
		l.kept++
	}
}

// latencyBuckets suit queue latency and handler durations: 1 ms to ~25 h,
// so that jobs of hours (reports, encodes, migrations) are told apart;
// with buckets up to ~40 min they all fell in +Inf.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2.5, 21)

// outcomeOps are the Op values of worker.Outcome.
var outcomeOps = []string{"complete", "fail", "snooze", "cancel", "release", "abandon"}

// New registers the instruments on reg (prometheus.DefaultRegisterer, or
// a registry of the program's own) and returns them. It panics if reg
// already has them, as prometheus.MustRegister does: use one Metrics per
// registry. Nothing is counted until they are wired in (HookWorker,
// HookCoordinator, WrapStore).
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{reg: reg, kinds: boundedLabels{max: MaxKindLabels}}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		reg.MustRegister(h)
		return h
	}
	m.enqueued = counter("leasehold_enqueued_total", "Jobs inserted through this daemon's API (not those that matched a live unique key).", "queue", "kind")
	m.claims = counter("leasehold_claims_total", "Jobs claimed by this daemon.", "queue")
	m.conflicts = counter("leasehold_claim_conflicts_total", "Claims lost to another daemon that took the job first.", "queue")
	m.completions = counter("leasehold_job_completions_total", "Runs recorded as completed.", "kind")
	m.failures = counter("leasehold_job_failures_total", "Failed attempts recorded (retried or discarded).", "kind")
	m.retries = counter("leasehold_job_retries_total", "Failed attempts after which the job will run again (retryable).", "kind")
	m.discards = counter("leasehold_job_discards_total", "Jobs discarded: reason attempts (max attempts used), rescues (lost its run too often) or outcome (its outcome, or its re-queue after a lost run, could not be recorded: too large to run again).", "kind", "reason")
	m.cancellations = counter("leasehold_job_cancellations_total", "Runs recorded as cancelled (a cancel request honoured, or the handler cancelled itself).", "kind")
	m.snoozes = counter("leasehold_job_snoozes_total", "Runs snoozed by their handler.", "kind")
	m.refused = counter("leasehold_fenced_writes_refused_total", "Outcome writes refused or not attempted because the run had lost its lease (fence.ErrLeaseLost): op is the write, or abandon.", "op")
	m.writeErrors = counter("leasehold_outcome_write_errors_total", "Outcome writes that failed for another reason (the job will be reaped and run again).", "op")
	m.handlerTime = histogram("leasehold_handler_duration_seconds", "Time handlers ran, by kind.", latencyBuckets, "kind")
	m.queueLatency = histogram("leasehold_queue_latency_seconds", "Time from when a job was due (enqueue, delay or retry time) to the start of its run, by queue.", latencyBuckets, "queue")
	m.reclaimDelay = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "leasehold_reclaim_delay_seconds", Help: "Time from the re-queueing of a job whose run was lost with its daemon to the start of its next run.", Buckets: latencyBuckets})
	m.reaped = counter("leasehold_reaped_jobs_total", "Running jobs whose owner lost its lease, moved by this daemon's reaper: to available (re-queued), cancelled or discarded.", "state")
	m.renewals = prometheus.NewCounter(prometheus.CounterOpts{Name: "leasehold_lease_renewals_total", Help: "Acknowledged renewals of this daemon's session lease."})
	m.renewalTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "leasehold_lease_renewal_seconds", Help: "Round trip of session lease renewals, failed ones included.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	reg.MustRegister(m.reclaimDelay, m.renewals, m.renewalTime)
	m.storeErrors = counter("leasehold_store_errors_total", "Failed store requests (etcd or Pebble), by operation, timeouts included; requests cancelled by their caller are not counted.", "backend", "op")

	// Series that exist whatever the worker serves start at zero, so
	// that rates and alerts have a series before the first event.
	for _, op := range outcomeOps {
		m.refused.WithLabelValues(op)
		m.writeErrors.WithLabelValues(op)
	}
	for _, st := range []coordinator.State{coordinator.StateAvailable, coordinator.StateCancelled, coordinator.StateDiscarded} {
		m.reaped.WithLabelValues(string(st))
	}
	return m
}

// Registerer returns the registerer the instruments were registered on.
func (m *Metrics) Registerer() prometheus.Registerer { return m.reg }

// CountEnqueued counts a job inserted (leasehold_enqueued_total). The
// daemon's API calls it for the jobs it inserts; a program that enqueues
// through coordinator.Enqueue calls it for those it wants counted.
func (m *Metrics) CountEnqueued(j *coordinator.Job) {
	m.enqueued.WithLabelValues(m.enqueueQueues.label(j.Queue), m.kinds.label(j.Kind)).Inc()
}

// HookWorker sets cfg's OnClaim, OnStart and OnOutcome to count claims,
// queue latency, handler time and outcomes, calling any hooks cfg had
// before. Call it before worker.New.
func (m *Metrics) HookWorker(cfg *worker.Config) {
	prevStart, prevOutcome, prevClaim := cfg.OnStart, cfg.OnOutcome, cfg.OnClaim
	cfg.OnClaim = func(queue string, claimed int, st coordinator.ClaimStats) {
		m.onClaim(queue, claimed, st)
		if prevClaim != nil {
			prevClaim(queue, claimed, st)
		}
	}
	cfg.OnStart = func(j coordinator.Job, token fence.Token) {
		m.onStart(j, time.Now())
		if prevStart != nil {
			prevStart(j, token)
		}
	}
	cfg.OnOutcome = func(o worker.Outcome) {
		m.onOutcome(o)
		if prevOutcome != nil {
			prevOutcome(o)
		}
	}
}

// HookCoordinator sets cfg.OnReap to count the jobs its reaper moves,
// calling any hook cfg had before. Call it before coordinator.New.
func (m *Metrics) HookCoordinator(cfg *coordinator.Config) {
	prev := cfg.OnReap
	cfg.OnReap = func(j *coordinator.Job) {
		m.onReap(j)
		if prev != nil {
			prev(j)
		}
	}
}

func (m *Metrics) onClaim(queue string, claimed int, st coordinator.ClaimStats) {
	if claimed > 0 {
		m.claims.WithLabelValues(queue).Add(float64(claimed))
	}
	if st.Conflicts > 0 {
		m.conflicts.WithLabelValues(queue).Add(float64(st.Conflicts))
	}
}

// runLostPrefix starts the error a reap records for a lost run
// (coordinator.Reap).
const runLostPrefix = "run lost:"

func (m *Metrics) onStart(j coordinator.Job, now time.Time) {
	wait := max(now.Sub(j.ScheduledAt), 0).Seconds()
	m.queueLatency.WithLabelValues(j.Queue).Observe(wait)
	// A job re-queued by a reap starts again under the attempt number of
	// the lost run, whose error says so; it became available at the reap,
	// the error's time. A snooze or a release since (no attempt used, no
	// error) made it due again later: that run is not the re-queue's.
	if n := len(j.Errors); n > 0 && j.Rescues > 0 {
		e := j.Errors[n-1]
		if e.Attempt == j.Attempt && e.At.Equal(j.ScheduledAt) && strings.HasPrefix(e.Error, runLostPrefix) {
			m.reclaimDelay.Observe(wait)
		}
	}
}

func (m *Metrics) onOutcome(o worker.Outcome) {
	kind := m.kinds.label(o.Job.Kind)
	m.handlerTime.WithLabelValues(kind).Observe(o.Ended.Sub(o.Started).Seconds())
	switch {
	case errors.Is(o.Err, fence.ErrLeaseLost):
		m.refused.WithLabelValues(o.Op).Inc()
		return
	case o.Err != nil:
		m.writeErrors.WithLabelValues(o.Op).Inc()
		return
	}
	switch o.Op {
	case "complete":
		m.completions.WithLabelValues(kind).Inc()
	case "fail":
		m.failures.WithLabelValues(kind).Inc()
		switch {
		case o.State != coordinator.StateDiscarded:
			m.retries.WithLabelValues(kind).Inc()
		case o.Job.Attempt >= o.Job.MaxAttempts:
			m.discards.WithLabelValues(kind, "attempts").Inc()
		default:
			// The outcome could not be recorded as it was (too large to
			// run again): the worker discarded the job, saying why.
			m.discards.WithLabelValues(kind, "outcome").Inc()
		}
	case "cancel":
		m.cancellations.WithLabelValues(kind).Inc()
	case "snooze":
		m.snoozes.WithLabelValues(kind).Inc()
	}
}

// onReap counts a job moved by a reap.
func (m *Metrics) onReap(j *coordinator.Job) {
	m.reaped.WithLabelValues(string(j.State)).Inc()
	if j.State == coordinator.StateDiscarded {
		// Discarded for its lost runs, its last error is the reap's;
		// one too large to run again says so after it.
		reason := "outcome"
		if n := len(j.Errors); n > 0 && strings.HasPrefix(j.Errors[n-1].Error, runLostPrefix) {
			reason = "rescues"
		}
		m.discards.WithLabelValues(m.kinds.label(j.Kind), reason).Inc()
	}
}

// RegisterWorker registers the gauges read from w at scrape time (jobs
// running, self-fencing events, callbacks' panics recovered, how long its session's lease is still
// known to be valid), and starts the series of w's queues and of the
// kinds it has handlers for at zero; those kinds keep their label past
// MaxKindLabels. Call it once w's handlers are registered.
func (m *Metrics) RegisterWorker(w *worker.Worker) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_worker_running_jobs", Help: "Handlers running on this daemon now."},
			func() float64 { return float64(w.Running()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "leasehold_self_fencing_total", Help: "Sessions this daemon ended because it could not renew its lease (self-fencing: it interrupted its jobs and starts a new session), counted as they end; sessions closed on purpose are not counted."},
			func() float64 { return float64(w.SessionsLost()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "leasehold_callback_panics_total", Help: "Panics of the program's callbacks other than handlers (retry policies, hooks, enqueue hooks) recovered by this process's coordinator: each is logged with its stack."},
			func() float64 { return float64(w.Coordinator().CallbackPanics()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_lease_valid_seconds", Help: "How long this daemon's session lease is still known to be valid (0 when it is not)."},
			func() float64 {
				s := w.Session()
				if s == nil || !s.Valid() {
					return 0
				}
				return max(time.Until(s.ValidUntil()).Seconds(), 0)
			}),
	)
	for _, q := range w.Queues() {
		m.claims.WithLabelValues(q)
		m.conflicts.WithLabelValues(q)
	}
	for _, k := range w.Kinds() {
		m.kinds.keep(k)
		m.completions.WithLabelValues(k)
		m.failures.WithLabelValues(k)
		m.retries.WithLabelValues(k)
		for _, reason := range []string{"attempts", "rescues", "outcome"} {
			m.discards.WithLabelValues(k, reason)
		}
		m.cancellations.WithLabelValues(k)
		m.snoozes.WithLabelValues(k)
	}
}
