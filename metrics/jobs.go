package metrics

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterJobs registers the job gauges, read from c's store at each
// scrape: jobs in each state (leasehold_jobs; the finished states from a
// recent count, coordinator.Coordinator.RecentCounts, whose age is
// leasehold_jobs_finished_age_seconds), available and running jobs
// of each queue (leasehold_queue_jobs), whether each queue is paused
// (leasehold_queue_paused) and its global limit (leasehold_queue_limit),
// and whether the read failed
// (leasehold_jobs_scrape_error; the failure is logged to log, or to
// slog.Default if log is nil). One process of a namespace is enough to
// register them: the counts are the namespace's.
func (m *Metrics) RegisterJobs(c *coordinator.Coordinator, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	m.reg.MustRegister(&jobsCollector{c: c, log: log})
}

// scrapeTimeout bounds a scrape's reads of the job counts.
const scrapeTimeout = 5 * time.Second

// jobsCollector exports the number of jobs in each state, and of available
// and running jobs in each queue, at scrape time.
type jobsCollector struct {
	c   *coordinator.Coordinator
	log *slog.Logger
	// queues are the queue labels of leasehold_queue_jobs (the queues
	// beyond them are summed as "other").
	queues boundedLabels
}

var (
	jobsDesc        = prometheus.NewDesc("leasehold_jobs", "Jobs in each state (the whole namespace).", []string{"state"}, nil)
	queueJobsDesc   = prometheus.NewDesc("leasehold_queue_jobs", "Available and running jobs of each queue (other states are not indexed by queue).", []string{"queue", "state"}, nil)
	finishedAgeDesc = prometheus.NewDesc("leasehold_jobs_finished_age_seconds", "Age of the completed, discarded and cancelled counts of leasehold_jobs: they are counted again once older than 1,000 times as long as their count took, at least 1 s and at most 60 s (the other states are read at each scrape).", nil, nil)
	scrapeErrDesc   = prometheus.NewDesc("leasehold_jobs_scrape_error", "1 if reading the job counts for this scrape failed.", nil, nil)
	pausedDesc      = prometheus.NewDesc("leasehold_queue_paused", "1 if the queue is paused (for queue=\"other\": how many of the queues summed there are).", []string{"queue"}, nil)
	limitDesc       = prometheus.NewDesc("leasehold_queue_limit", "The queue's global limit on jobs running at once across daemons (0: none).", []string{"queue"}, nil)
)

func (jc *jobsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- finishedAgeDesc
	ch <- queueJobsDesc
	ch <- scrapeErrDesc
	ch <- pausedDesc
	ch <- limitDesc
}

func (jc *jobsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	failed := 0.0
	defer func() { ch <- prometheus.MustNewConstMetric(scrapeErrDesc, prometheus.GaugeValue, failed) }()
	// One read of each index: the counts by state and by queue.
	tally, err := jc.c.RecentTally(ctx, coordinator.TallyParams{})
	if err != nil {
		jc.log.Warn("metrics: counting jobs failed", slog.Any("err", err))
		failed = 1
		return
	}
	for _, st := range coordinator.States {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(tally.Counts[st]), string(st))
	}
	ch <- prometheus.MustNewConstMetric(finishedAgeDesc, prometheus.GaugeValue, jc.c.Clock().Now().Sub(tally.CountedAt).Seconds())
	queues, err := queueCounts(ctx, jc.c, tally)
	if err != nil {
		jc.log.Warn("metrics: counting jobs by queue failed", slog.Any("err", err))
		failed = 1
		return
	}
	confs, err := jc.c.QueueConfigs(ctx)
	if err != nil {
		jc.log.Warn("metrics: reading queue configurations failed", slog.Any("err", err))
		failed = 1
		return
	}
	for _, conf := range confs {
		q := queues[conf.Name]
		if q == nil {
			q = &queueCount{}
			queues[conf.Name] = q
		}
		q.Limit = conf.Limit
		if conf.Paused {
			q.Paused = 1
		}
	}
	// In name order, so that which queues get their own label does not
	// depend on map order.
	byLabel := map[string]*queueCount{}
	// own: the labels that are the name of the one queue behind them (not
	// "other" summing queues past the bound, even just one).
	own := map[string]bool{}
	for _, q := range slices.Sorted(maps.Keys(queues)) {
		l := jc.queues.label(q)
		if byLabel[l] == nil {
			byLabel[l] = &queueCount{}
		}
		_, summed := own[l]
		own[l] = !summed && l == q
		byLabel[l].Available += queues[q].Available
		byLabel[l].Running += queues[q].Running
		byLabel[l].Paused += queues[q].Paused
		byLabel[l].Limit = queues[q].Limit
	}
	for l, c := range byLabel {
		ch <- prometheus.MustNewConstMetric(queueJobsDesc, prometheus.GaugeValue, float64(c.Available), l, string(coordinator.StateAvailable))
		ch <- prometheus.MustNewConstMetric(queueJobsDesc, prometheus.GaugeValue, float64(c.Running), l, string(coordinator.StateRunning))
		ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, float64(c.Paused), l)
		if own[l] {
			// Limits of different queues do not add up: "other", summing
			// the queues past the bound, has none, but a queue named
			// "other" alone under its label has its own.
			ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, float64(c.Limit), l)
		}
	}
}

// queueCount is what is cheap to read per queue: its available and running
// jobs, and its configuration.
type queueCount struct {
	Available, Running int
	Paused             int // 1 if paused (summed over the queues of a label)
	Limit              int
}

// queueCounts counts available jobs per queue from the index keys and
// running jobs per queue from the running index's values, both as tally
// read them with the counts by state (no records are read: a scrape costs
// the same with 1 KiB and 1 MiB payloads). Queues that live daemons serve
// are counted even when empty.
func queueCounts(ctx context.Context, c *coordinator.Coordinator, tally coordinator.Tally) (map[string]*queueCount, error) {
	served, err := c.ServedQueues(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]*queueCount{}
	for q := range served {
		out[q] = &queueCount{}
	}
	get := func(q string) *queueCount {
		if out[q] == nil {
			out[q] = &queueCount{}
		}
		return out[q]
	}
	for q, n := range tally.AvailableByQueue {
		get(q).Available = n
	}
	for q, n := range tally.RunningByQueue {
		get(q).Running = n
	}
	return out, nil
}
