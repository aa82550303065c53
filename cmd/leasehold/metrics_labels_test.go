package main

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/worker"
)

// Clients name queues freely: leasehold_enqueued_total keeps at most
// maxQueueLabels of them as labels, the rest as "other", instead of one
// series per name ever sent.
func TestEnqueuedQueueLabelsBounded(t *testing.T) {
	m := newMetrics()
	for i := range maxQueueLabels + 50 {
		m.onEnqueued(&coordinator.Job{Queue: fmt.Sprintf("q%d", i), Kind: "echo"})
	}
	m.onEnqueued(&coordinator.Job{Queue: "q0", Kind: "echo"}) // a known one keeps its label
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	queues := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "leasehold_enqueued_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "queue" {
					queues[l.GetValue()] += s.GetCounter().GetValue()
				}
			}
		}
	}
	if len(queues) != maxQueueLabels+1 || queues["other"] != 50 || queues["q0"] != 2 {
		t.Fatalf("%d queue labels (other %v, q0 %v); want %d and other 50, q0 2", len(queues), queues["other"], queues["q0"], maxQueueLabels+1)
	}
}

// A failed attempt is counted by the state it left the job in: a job the
// worker discarded because its outcome could not be stored, with attempts
// left, is a discard (reason outcome), not a retry.
func TestFailOutcomeCountedByRecordedState(t *testing.T) {
	m := newMetrics()
	job := coordinator.Job{Kind: "k", Attempt: 1, MaxAttempts: 25}
	m.onOutcome(worker.Outcome{Job: job, Op: "fail", State: coordinator.StateRetryable})
	m.onOutcome(worker.Outcome{Job: job, Op: "fail", State: coordinator.StateDiscarded})
	last := coordinator.Job{Kind: "k", Attempt: 25, MaxAttempts: 25}
	m.onOutcome(worker.Outcome{Job: last, Op: "fail", State: coordinator.StateDiscarded})
	got := map[string]float64{}
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, x := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range x.GetLabel() {
				if l.GetName() == "reason" {
					name += "/" + l.GetValue()
				}
			}
			got[name] += x.GetCounter().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"leasehold_job_retries_total":           1,
		"leasehold_job_discards_total/outcome":  1,
		"leasehold_job_discards_total/attempts": 1,
		"leasehold_job_failures_total":          3,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

// Every per-kind outcome counter has its series at zero from the start,
// every discard reason included, so that rates and alerts work before the
// first event.
func TestKindSeriesStartAtZero(t *testing.T) {
	m := newMetrics()
	m.initSeries("pebble", []string{"default"}, []string{"echo"})
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		for _, x := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range x.GetLabel() {
				key += fmt.Sprintf(",%s=%s", l.GetName(), l.GetValue())
			}
			seen[key] = true
		}
	}
	for _, want := range []string{
		"leasehold_job_completions_total,kind=echo",
		"leasehold_job_failures_total,kind=echo",
		"leasehold_job_retries_total,kind=echo",
		"leasehold_job_discards_total,kind=echo,reason=attempts",
		"leasehold_job_discards_total,kind=echo,reason=rescues",
		"leasehold_job_discards_total,kind=echo,reason=outcome",
		"leasehold_job_cancellations_total,kind=echo",
		"leasehold_job_snoozes_total,kind=echo",
	} {
		if !seen[want] {
			t.Errorf("no series %s at start", want)
		}
	}
}
