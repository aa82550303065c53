package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
	"github.com/prometheus/client_golang/prometheus"
)

// newTest returns Metrics on a registry of their own.
func newTest() (*Metrics, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return New(reg), reg
}

// Clients name queues freely: leasehold_enqueued_total keeps at most
// MaxQueueLabels of them as labels, the rest as "other", instead of one
// series per name ever sent.
func TestEnqueuedQueueLabelsBounded(t *testing.T) {
	m, reg := newTest()
	for i := range MaxQueueLabels + 50 {
		m.CountEnqueued(&coordinator.Job{Queue: fmt.Sprintf("q%d", i), Kind: "echo"})
	}
	m.CountEnqueued(&coordinator.Job{Queue: "q0", Kind: "echo"}) // a known one keeps its label
	mfs, err := reg.Gather()
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
	if len(queues) != MaxQueueLabels+1 || queues["other"] != 50 || queues["q0"] != 2 {
		t.Fatalf("%d queue labels (other %v, q0 %v); want %d and other 50, q0 2", len(queues), queues["other"], queues["q0"], MaxQueueLabels+1)
	}
}

// A failed attempt is counted by the state it left the job in: a job the
// worker discarded because its outcome could not be stored, with attempts
// left, is a discard (reason outcome), not a retry.
func TestFailOutcomeCountedByRecordedState(t *testing.T) {
	m, reg := newTest()
	job := coordinator.Job{Kind: "k", Attempt: 1, MaxAttempts: 25}
	m.onOutcome(worker.Outcome{Job: job, Op: "fail", State: coordinator.StateRetryable})
	m.onOutcome(worker.Outcome{Job: job, Op: "fail", State: coordinator.StateDiscarded})
	last := coordinator.Job{Kind: "k", Attempt: 25, MaxAttempts: 25}
	m.onOutcome(worker.Outcome{Job: last, Op: "fail", State: coordinator.StateDiscarded})
	got := map[string]float64{}
	mfs, err := reg.Gather()
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

// Every per-kind outcome counter, per-queue claim counter and store error
// counter has its series at zero from the start, every discard reason
// included, so that rates and alerts work before the first event.
func TestSeriesStartAtZero(t *testing.T) {
	m, reg := newTest()
	c := testCoordinator(t, func(s kv.Store) kv.Store { return m.WrapStore(s, "pebble") })
	w, err := worker.New(c, worker.Config{Queues: []string{"mail"}})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("echo", func(context.Context, *worker.Job) error { return nil })
	m.RegisterWorker(w)
	mfs, err := reg.Gather()
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
		"leasehold_claims_total,queue=mail",
		"leasehold_claim_conflicts_total,queue=mail",
		"leasehold_store_errors_total,backend=pebble,op=keepalive",
		"leasehold_fenced_writes_refused_total,op=complete",
		"leasehold_reaped_jobs_total,state=available",
		"leasehold_worker_running_jobs",
	} {
		if !seen[want] {
			t.Errorf("no series %s at start", want)
		}
	}
}

// A worker claims jobs of any kind: 10,000 jobs of distinct kinds it has
// no handler for, failed and reaped, make at most MaxKindLabels kind
// labels beside its own kinds (which keep theirs), the rest counted as
// "other", instead of some twenty series per kind for as long as the
// process lives.
func TestKindLabelsBounded(t *testing.T) {
	m, reg := newTest()
	c := testCoordinator(t, nil)
	w, err := worker.New(c, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("echo", func(context.Context, *worker.Job) error { return nil })
	m.RegisterWorker(w)
	const n = 10_000
	for i := range n {
		job := coordinator.Job{Kind: fmt.Sprintf("k%05d", i), Attempt: 1, MaxAttempts: 1}
		m.onOutcome(worker.Outcome{Job: job, Op: "fail", State: coordinator.StateDiscarded})
		job.State = coordinator.StateDiscarded
		m.onReap(&job)
		m.CountEnqueued(&job)
	}
	m.onOutcome(worker.Outcome{Job: coordinator.Job{Kind: "echo"}, Op: "complete", State: coordinator.StateCompleted})
	m.CountEnqueued(&coordinator.Job{Kind: "echo"})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		kinds := map[string]float64{}
		for _, x := range mf.GetMetric() {
			for _, l := range x.GetLabel() {
				if l.GetName() == "kind" {
					kinds[l.GetValue()] += x.GetCounter().GetValue() + float64(x.GetHistogram().GetSampleCount())
				}
			}
		}
		if len(kinds) == 0 {
			continue
		}
		if len(kinds) > MaxKindLabels+2 {
			t.Errorf("%s: %d kind labels, want at most %d", mf.GetName(), len(kinds), MaxKindLabels+2)
		}
		if _, ok := kinds["echo"]; !ok {
			t.Errorf("%s: the worker's own kind echo has no label of its own", mf.GetName())
		}
		if mf.GetName() == "leasehold_job_failures_total" && (kinds["other"] != n-MaxKindLabels || kinds["k00000"] != 1) {
			t.Errorf("%s: other %v, k00000 %v; want %d and 1", mf.GetName(), kinds["other"], kinds["k00000"], n-MaxKindLabels)
		}
	}
}

// Handler durations of hours fall in buckets of their own: a job of 2
// hours and one of 10 are told apart. The buckets ended at about 40
// minutes, so every long job was only +Inf.
func TestHandlerDurationBucketsReachHours(t *testing.T) {
	m, reg := newTest()
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, d := range []time.Duration{2 * time.Hour, 10 * time.Hour} {
		m.onOutcome(worker.Outcome{Job: coordinator.Job{Kind: "report"}, Op: "complete", Started: start, Ended: start.Add(d)})
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "leasehold_handler_duration_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		var below2h, below10h uint64 // cumulative counts of the last buckets below each
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() < (2 * time.Hour).Seconds() {
				below2h = b.GetCumulativeCount()
			}
			if b.GetUpperBound() < (10 * time.Hour).Seconds() {
				below10h = b.GetCumulativeCount()
			}
		}
		var finite uint64 // in a bucket of finite bound
		if bs := h.GetBucket(); len(bs) > 0 {
			finite = bs[len(bs)-1].GetCumulativeCount()
		}
		if below2h != 0 || below10h != 1 || finite != 2 {
			t.Fatalf("buckets %v: want the 2 h run above every bucket below 2 h, the 10 h run apart from it, both in a finite bucket", h.GetBucket())
		}
		return
	}
	t.Fatal("no leasehold_handler_duration_seconds")
}

// A job enqueued with the default max attempts and discarded by its kind's
// (KindOptions.MaxAttempts) used its attempts: reason attempts, not the
// reason of an outcome that could not be stored.
func TestKindMaxAttemptsDiscardCountedAsAttempts(t *testing.T) {
	m, reg := newTest()
	c := testCoordinator(t, nil)
	wcfg := worker.Config{Logger: slog.New(slog.DiscardHandler)}
	m.HookWorker(&wcfg)
	discarded := make(chan struct{}, 1)
	prev := wcfg.OnOutcome
	wcfg.OnOutcome = func(o worker.Outcome) {
		prev(o)
		if o.State == coordinator.StateDiscarded {
			discarded <- struct{}{}
		}
	}
	w, err := worker.New(c, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	w.HandleWith("k", func(context.Context, *worker.Job) error { return errors.New("no") },
		worker.KindOptions{MaxAttempts: 1})
	m.RegisterWorker(w)
	ctx := t.Context()
	if _, err := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-discarded
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "leasehold_job_discards_total" {
			continue
		}
		for _, x := range mf.GetMetric() {
			for _, l := range x.GetLabel() {
				if l.GetName() == "reason" {
					got[l.GetValue()] += x.GetCounter().GetValue()
				}
			}
		}
	}
	if got["attempts"] != 1 || got["outcome"] != 0 {
		t.Errorf("discards by reason = %v, want attempts 1 and outcome 0", got)
	}
}

// A job re-queued by a reap counts one reclaim delay, at the start of the
// run after the reap: the runs after a snooze of it (or a stop's give-back)
// are not the re-queue of a lost run, though its last error is still the
// reap's and its attempt the same.
func TestReclaimDelayCountedOncePerReap(t *testing.T) {
	m, reg := newTest()
	c := testCoordinator(t, nil)
	ctx := t.Context()
	if _, err := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	// A run lost with its daemon: its session ends, its lease revoked.
	gone, err := c.NewSession(ctx, coordinator.SessionConfig{Worker: coordinator.WorkerInfo{ID: "gone"}})
	if err != nil {
		t.Fatal(err)
	}
	if runs, _, err := c.Claim(ctx, gone, coordinator.DefaultQueue, 1, false); err != nil || len(runs) != 1 {
		t.Fatalf("claim: %d runs, %v", len(runs), err)
	}
	if err := gone.Close(ctx); err != nil {
		t.Fatal(err)
	}

	wcfg := worker.Config{Logger: slog.New(slog.DiscardHandler)}
	m.HookWorker(&wcfg)
	completed := make(chan struct{})
	prev := wcfg.OnOutcome
	wcfg.OnOutcome = func(o worker.Outcome) {
		prev(o)
		if o.Op == "complete" {
			close(completed)
		}
	}
	w, err := worker.New(c, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	var runs int
	w.Handle("k", func(context.Context, *worker.Job) error {
		if runs++; runs == 1 {
			return worker.JobSnooze(0)
		}
		return nil
	})
	m.RegisterWorker(w)
	// Start re-queues the job left running (a reap), then runs it twice.
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-completed
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "leasehold_reclaim_delay_seconds" {
			continue
		}
		if n := mf.GetMetric()[0].GetHistogram().GetSampleCount(); n != 1 || runs != 2 {
			t.Fatalf("%d reclaim delays counted over %d runs after one reap; want 1 over 2", n, runs)
		}
		return
	}
	t.Fatal("no leasehold_reclaim_delay_seconds")
}

// A job the reaper discards because it is too large to run again (its
// record grew, by a checkpoint, past what the store takes with its queue's
// copy) did not lose its run too often: it is counted as a discard of
// reason outcome, as a failed attempt too large to run again is, not
// rescues, which says its daemons keep dying under it.
func TestReapDiscardTooLargeCountedAsOutcome(t *testing.T) {
	m, reg := newTest()
	ctx := t.Context()
	log := slog.New(slog.DiscardHandler)
	ls, err := localstore.Open(t.TempDir(), localstore.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ls.Close() })
	// The record grows under a coordinator with a larger limit, as if the
	// store's limit were lowered since (c refuses such writes itself).
	grower, err := coordinator.New(&kvtest.Limit{Store: ls, MaxBytes: 1 << 20}, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ccfg := coordinator.Config{Logger: log}
	m.HookCoordinator(&ccfg)
	c, err := coordinator.New(&kvtest.Limit{Store: ls, MaxBytes: 512 << 10}, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	payload := json.RawMessage(`"` + strings.Repeat("x", 100<<10) + `"`)
	if _, err := grower.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k", Payload: payload}); err != nil {
		t.Fatal(err)
	}
	gone, err := grower.NewSession(ctx, coordinator.SessionConfig{Worker: coordinator.WorkerInfo{ID: "gone"}})
	if err != nil {
		t.Fatal(err)
	}
	runs, _, err := grower.Claim(ctx, gone, coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 {
		t.Fatalf("claim: %d runs, %v", len(runs), err)
	}
	if err := runs[0].Checkpoint(ctx, json.RawMessage(`"`+strings.Repeat("c", 160<<10)+`"`)); err != nil {
		t.Fatal(err)
	}
	if err := gone.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Reap(ctx, nil, nil); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v; want the job discarded", n, err)
	}
	if j, err := c.Get(ctx, runs[0].Job().ID); err != nil || j.State != coordinator.StateDiscarded {
		t.Fatalf("job after the reap: %+v, %v; want it discarded", j, err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, x := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range x.GetLabel() {
				if l.GetName() == "reason" || l.GetName() == "state" {
					name += "/" + l.GetValue()
				}
			}
			got[name] += x.GetCounter().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"leasehold_reaped_jobs_total/discarded": 1,
		"leasehold_job_discards_total/rescues":  0,
		"leasehold_job_discards_total/outcome":  1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}
