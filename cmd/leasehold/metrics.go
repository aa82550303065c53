package main

// The daemon's Prometheus metrics, served at /metrics: the library's
// (package metrics: jobs, claims, outcomes, the store and the session)
// and the daemon's own (HTTP requests, the Go runtime, the process). Each
// daemon (and each in-process API of a CLI command) has a registry of its
// own, not prometheus.DefaultRegisterer, so that two daemons in one test
// process do not share counters.

import (
	"strconv"
	"time"

	"github.com/leasehold/leasehold/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// daemonMetrics holds one daemon's registry and instruments.
type daemonMetrics struct {
	reg *prometheus.Registry
	*metrics.Metrics

	httpRequests *prometheus.CounterVec
	httpLatency  *prometheus.HistogramVec
}

func newMetrics() *daemonMetrics {
	reg := prometheus.NewRegistry()
	m := &daemonMetrics{reg: reg, Metrics: metrics.New(reg)}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "leasehold_http_requests_total", Help: "HTTP requests served, by route and status code."}, []string{"route", "code"})
	m.httpLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "leasehold_http_request_seconds", Help: "HTTP request latency, by route.", Buckets: prometheus.DefBuckets}, []string{"route"})
	reg.MustRegister(m.httpRequests, m.httpLatency)
	return m
}

// observeRequest counts one HTTP request.
func (m *daemonMetrics) observeRequest(route string, code int, took time.Duration) {
	m.httpRequests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.httpLatency.WithLabelValues(route).Observe(took.Seconds())
}
