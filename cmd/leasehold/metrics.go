package main

// The daemon's Prometheus metrics, served at /metrics. Each daemon (and
// each in-process API of a CLI command) has a registry of its own, not
// prometheus.DefaultRegisterer, so that two daemons in one test process do
// not share counters. The library (coordinator, worker) has no metrics of
// its own: the daemon observes it through hooks (worker.Config.OnClaim,
// OnStart and OnOutcome, coordinator.Config.OnReap) and a kv.Store wrapper,
// all nil or absent by default, so a program that embeds the library pays
// nothing.
//
// Counters count what this daemon did or saw since it started; gauges of
// jobs are read from the store at scrape time and are the same on every
// daemon of a namespace.

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/worker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics holds one daemon's registry and instruments.
type metrics struct {
	reg *prometheus.Registry

	httpRequests *prometheus.CounterVec
	httpLatency  *prometheus.HistogramVec

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
	enqueueQueues queueLabels
}

// maxQueueLabels bounds the queue labels of a metric.
const maxQueueLabels = 100

// queueLabels bounds a metric's queue label values: the first
// maxQueueLabels queues it sees keep their names, later ones are "other".
// A client may enqueue to any queue name, and each would be a series
// forever. The zero value is ready to use.
type queueLabels struct {
	mu   sync.Mutex
	seen map[string]bool
}

// label returns q's label.
func (l *queueLabels) label(q string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	if !l.seen[q] && len(l.seen) >= maxQueueLabels {
		return "other"
	}
	l.seen[q] = true
	return q
}

// latencyBuckets suit queue latency and handler durations: 1 ms to ~30 min.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2.5, 17)

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		m.reg.MustRegister(h)
		return h
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	m.httpRequests = counter("leasehold_http_requests_total", "HTTP requests served, by route and status code.", "route", "code")
	m.httpLatency = histogram("leasehold_http_request_seconds", "HTTP request latency, by route.", prometheus.DefBuckets, "route")

	m.enqueued = counter("leasehold_enqueued_total", "Jobs inserted through this daemon's API (not those that matched a live unique key).", "queue", "kind")
	m.claims = counter("leasehold_claims_total", "Jobs claimed by this daemon.", "queue")
	m.conflicts = counter("leasehold_claim_conflicts_total", "Claims lost to another daemon that took the job first.", "queue")
	m.completions = counter("leasehold_job_completions_total", "Runs recorded as completed.", "kind")
	m.failures = counter("leasehold_job_failures_total", "Failed attempts recorded (retried or discarded).", "kind")
	m.retries = counter("leasehold_job_retries_total", "Failed attempts after which the job will run again (retryable).", "kind")
	m.discards = counter("leasehold_job_discards_total", "Jobs discarded: reason attempts (max attempts used), rescues (lost its run too often) or outcome (its outcome could not be recorded).", "kind", "reason")
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
	m.reg.MustRegister(m.reclaimDelay, m.renewals, m.renewalTime)
	m.storeErrors = counter("leasehold_store_errors_total", "Failed store requests (etcd or Pebble), by operation, timeouts included; requests cancelled by their caller are not counted.", "backend", "op")
	return m
}

// observeRequest counts one HTTP request.
func (m *metrics) observeRequest(route string, code int, took time.Duration) {
	m.httpRequests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.httpLatency.WithLabelValues(route).Observe(took.Seconds())
}

// onEnqueued counts jobs inserted through the API.
func (m *metrics) onEnqueued(j *coordinator.Job) {
	m.enqueued.WithLabelValues(m.enqueueQueues.label(j.Queue), j.Kind).Inc()
}

// workerHooks sets cfg's metric hooks, calling any that were set before.
func (m *metrics) workerHooks(cfg *worker.Config) {
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

func (m *metrics) onClaim(queue string, claimed int, st coordinator.ClaimStats) {
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

func (m *metrics) onStart(j coordinator.Job, now time.Time) {
	wait := max(now.Sub(j.ScheduledAt), 0).Seconds()
	m.queueLatency.WithLabelValues(j.Queue).Observe(wait)
	// A job re-queued by a reap starts again under the attempt number of
	// the lost run, whose error says so; it became available at the reap.
	if n := len(j.Errors); n > 0 && j.Rescues > 0 {
		e := j.Errors[n-1]
		if e.Attempt == j.Attempt && strings.HasPrefix(e.Error, runLostPrefix) {
			m.reclaimDelay.Observe(wait)
		}
	}
}

func (m *metrics) onOutcome(o worker.Outcome) {
	kind := o.Job.Kind
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

// onReap counts a job moved by a reap (coordinator.Config.OnReap).
func (m *metrics) onReap(j *coordinator.Job) {
	m.reaped.WithLabelValues(string(j.State)).Inc()
	if j.State == coordinator.StateDiscarded {
		m.discards.WithLabelValues(j.Kind, "rescues").Inc()
	}
}

// registerDaemon adds the gauges read at scrape time from the daemon's
// worker: jobs running here, self-fencing events, and how long the
// session's lease is still known to be valid.
func (m *metrics) registerDaemon(w *worker.Worker) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_worker_running_jobs", Help: "Handlers running on this daemon now."},
			func() float64 { return float64(w.Running()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "leasehold_self_fencing_total", Help: "Sessions this daemon ended because it could not renew its lease (self-fencing: it interrupted its jobs and starts a new session), counted as they end; sessions closed on purpose are not counted."},
			func() float64 { return float64(w.SessionsLost()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_lease_valid_seconds", Help: "How long this daemon's session lease is still known to be valid (0 when it is not)."},
			func() float64 {
				s := w.Session()
				if s == nil || !s.Valid() {
					return 0
				}
				return max(time.Until(s.ValidUntil()).Seconds(), 0)
			}),
	)
}

// jobsCollector exports the number of jobs in each state, and of available
// and running jobs in each queue, at scrape time.
type jobsCollector struct {
	c   *coordinator.Coordinator
	log *slog.Logger
	// queues are the queue labels of leasehold_queue_jobs (the queues
	// beyond them are summed as "other").
	queues queueLabels
}

var (
	jobsDesc      = prometheus.NewDesc("leasehold_jobs", "Jobs in each state (the whole namespace).", []string{"state"}, nil)
	queueJobsDesc = prometheus.NewDesc("leasehold_queue_jobs", "Available and running jobs of each queue (other states are not indexed by queue).", []string{"queue", "state"}, nil)
	scrapeErrDesc = prometheus.NewDesc("leasehold_jobs_scrape_error", "1 if reading the job counts for this scrape failed.", nil, nil)
)

func (jc *jobsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- queueJobsDesc
	ch <- scrapeErrDesc
}

func (jc *jobsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	failed := 0.0
	defer func() { ch <- prometheus.MustNewConstMetric(scrapeErrDesc, prometheus.GaugeValue, failed) }()
	counts, err := jc.c.Counts(ctx)
	if err != nil {
		jc.log.Warn("metrics: counting jobs failed", slog.Any("err", err))
		failed = 1
		return
	}
	for _, st := range coordinator.States {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
	queues, err := queueCounts(ctx, jc.c)
	if err != nil {
		jc.log.Warn("metrics: counting jobs by queue failed", slog.Any("err", err))
		failed = 1
		return
	}
	// In name order, so that which queues get their own label does not
	// depend on map order.
	byLabel := map[string]*queueCount{}
	for _, q := range slices.Sorted(maps.Keys(queues)) {
		l := jc.queues.label(q)
		if byLabel[l] == nil {
			byLabel[l] = &queueCount{}
		}
		byLabel[l].Available += queues[q].Available
		byLabel[l].Running += queues[q].Running
	}
	for l, c := range byLabel {
		ch <- prometheus.MustNewConstMetric(queueJobsDesc, prometheus.GaugeValue, float64(c.Available), l, string(coordinator.StateAvailable))
		ch <- prometheus.MustNewConstMetric(queueJobsDesc, prometheus.GaugeValue, float64(c.Running), l, string(coordinator.StateRunning))
	}
}

// queueCount is what is cheap to count per queue.
type queueCount struct {
	Available, Running int
}

// queueCounts counts available jobs per queue from the index keys and
// running jobs per queue from the running index's values (no records are
// read: a scrape costs the same with 1 KiB and 1 MiB payloads). Queues that live daemons serve are counted
// even when empty.
func queueCounts(ctx context.Context, c *coordinator.Coordinator) (map[string]*queueCount, error) {
	avail, err := c.AvailableByQueue(ctx)
	if err != nil {
		return nil, err
	}
	ws, err := c.Workers(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]*queueCount{}
	for _, w := range ws {
		for _, q := range w.Queues {
			out[q] = &queueCount{}
		}
	}
	get := func(q string) *queueCount {
		if out[q] == nil {
			out[q] = &queueCount{}
		}
		return out[q]
	}
	for q, n := range avail {
		get(q).Available = n
	}
	running, err := c.RunningByQueue(ctx)
	if err != nil {
		return nil, err
	}
	for q, n := range running {
		get(q).Running = n
	}
	return out, nil
}

// meteredStore counts a store's failed requests and times lease renewals.
type meteredStore struct {
	kv.Store
	m       *metrics
	backend string
}

// instrumentStore wraps s so that m sees its errors and renewals.
func (m *metrics) instrumentStore(s kv.Store, backend string) kv.Store {
	return &meteredStore{Store: s, m: m, backend: backend}
}

// count counts err, unless the caller cancelled the request: a request
// whose deadline passed is counted, as the store did not answer in time.
func (s *meteredStore) count(ctx context.Context, op string, err error) {
	if err == nil || errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, context.Canceled) {
		return
	}
	s.m.storeErrors.WithLabelValues(s.backend, op).Inc()
}

func (s *meteredStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	r, err := s.Store.Txn(ctx, t)
	s.count(ctx, "txn", err)
	return r, err
}

func (s *meteredStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	rr, err := s.Store.Range(ctx, r)
	s.count(ctx, "range", err)
	return rr, err
}

func (s *meteredStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	in := s.Store.Watch(ctx, prefix, fromRev)
	out := make(chan kv.WatchResponse)
	go func() {
		defer close(out)
		for resp := range in {
			if resp.Err != nil {
				s.count(ctx, "watch", resp.Err)
			}
			select {
			case out <- resp:
			case <-ctx.Done():
				// The consumer may have stopped reading: drain what the
				// store still sends until it closes the channel.
				for range in {
				}
				return
			}
		}
	}()
	return out
}

func (s *meteredStore) Grant(ctx context.Context, ttl time.Duration) (kv.LeaseID, error) {
	id, err := s.Store.Grant(ctx, ttl)
	s.count(ctx, "grant", err)
	return id, err
}

func (s *meteredStore) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	start := time.Now()
	ttl, err := s.Store.KeepAliveOnce(ctx, id)
	s.m.renewalTime.Observe(time.Since(start).Seconds())
	if err == nil {
		s.m.renewals.Inc()
	}
	if !errors.Is(err, kv.ErrLeaseNotFound) {
		s.count(ctx, "keepalive", err)
	}
	return ttl, err
}

func (s *meteredStore) Revoke(ctx context.Context, id kv.LeaseID) error {
	err := s.Store.Revoke(ctx, id)
	if !errors.Is(err, kv.ErrLeaseNotFound) {
		s.count(ctx, "revoke", err)
	}
	return err
}

// outcomeOps are the Op values of worker.Outcome.
var outcomeOps = []string{"complete", "fail", "snooze", "cancel", "release", "abandon"}

// storeOps are the operations meteredStore counts.
var storeOps = []string{"txn", "range", "watch", "grant", "keepalive", "revoke"}

// initSeries creates the series of the daemon's queues, kinds, store and
// outcome writes at zero, so that rates and alerts have a series to work
// on before the first event.
func (m *metrics) initSeries(backend string, queues, kinds []string) {
	for _, q := range queues {
		m.claims.WithLabelValues(q)
		m.conflicts.WithLabelValues(q)
	}
	for _, k := range kinds {
		m.completions.WithLabelValues(k)
		m.failures.WithLabelValues(k)
		m.retries.WithLabelValues(k)
		for _, reason := range []string{"attempts", "rescues", "outcome"} {
			m.discards.WithLabelValues(k, reason)
		}
		m.cancellations.WithLabelValues(k)
		m.snoozes.WithLabelValues(k)
	}
	for _, op := range outcomeOps {
		m.refused.WithLabelValues(op)
		m.writeErrors.WithLabelValues(op)
	}
	for _, op := range storeOps {
		m.storeErrors.WithLabelValues(backend, op)
	}
	for _, st := range []coordinator.State{coordinator.StateAvailable, coordinator.StateCancelled, coordinator.StateDiscarded} {
		m.reaped.WithLabelValues(string(st))
	}
}
