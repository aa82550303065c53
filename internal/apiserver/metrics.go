package apiserver

// The daemon's Prometheus metrics, served at /metrics: the library's
// (package metrics: jobs, claims, outcomes, the store and the session)
// and the daemon's own (HTTP requests, the Go runtime, the process). Each
// daemon (and each in-process API of a CLI command) has a registry of its
// own, not prometheus.DefaultRegisterer, so that two daemons in one test
// process do not share counters.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics holds one daemon's registry and instruments.
type Metrics struct {
	reg *prometheus.Registry
	// Metrics are the library's series; nil in a program that serves
	// none (httpapi without package metrics).
	*metrics.Metrics
	// jobs: New registers the job gauges (metrics.Metrics.RegisterJobs)
	// on reg; not when the Metrics are a program's own, which registers
	// them itself.
	jobs bool

	httpRequests *prometheus.CounterVec
	httpLatency  *prometheus.HistogramVec
}

// NewMetrics returns a daemon's metrics: a registry of their own with
// the library's series, the job gauges, the HTTP series and the Go
// runtime's and the process's. The daemon wires the library's series to
// its coordinator and worker (metrics.Metrics' hooks).
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := NewMetricsOn(reg, metrics.New(reg))
	if err != nil {
		panic(err) // a new registry holds none of them
	}
	m.jobs = true
	return m
}

// NewMetricsOn returns metrics that register the HTTP series on reg and
// count enqueued jobs in lib, the library's series that a program
// registered on reg itself with its job gauges (nil: none). It fails,
// registering nothing, if reg holds the HTTP series already.
func NewMetricsOn(reg *prometheus.Registry, lib *metrics.Metrics) (*Metrics, error) {
	m := &Metrics{reg: reg, Metrics: lib}
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "leasehold_http_requests_total", Help: "HTTP requests served, by route and status code."}, []string{"route", "code"})
	m.httpLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "leasehold_http_request_seconds", Help: "HTTP request latency, by route.", Buckets: prometheus.DefBuckets}, []string{"route"})
	if err := reg.Register(m.httpRequests); err != nil {
		return nil, fmt.Errorf("register the HTTP series: %w", err)
	}
	if err := reg.Register(m.httpLatency); err != nil {
		reg.Unregister(m.httpRequests)
		return nil, fmt.Errorf("register the HTTP series: %w", err)
	}
	return m, nil
}

// countEnqueued counts a job inserted through the API, if the library's
// series are served.
func (m *Metrics) countEnqueued(j *coordinator.Job) {
	if m.Metrics != nil {
		m.CountEnqueued(j)
	}
}

// observeRequest counts one HTTP request.
func (m *Metrics) observeRequest(route string, code int, took time.Duration) {
	m.httpRequests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.httpLatency.WithLabelValues(route).Observe(took.Seconds())
}
