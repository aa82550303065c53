package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/worker"
)

// jsonLines parses the JSON log lines written to buf.
func jsonLines(t *testing.T, buf *testutil.SyncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// Each failed attempt logs one "attempt failed" line that names the job's
// queue and the state the attempt left it in: a retry at info, the last
// attempt, which discards the job, at warn (it will not run again; an
// operator has to look), so that a discard can be told from a retry.
func TestAttemptFailedLineSaysQueueAndState(t *testing.T) {
	e := newEnv(t, nil)
	var buf testutil.SyncBuffer
	outcomes := make(chan worker.Outcome, 2)
	e.worker(worker.Config{
		Queues:    []string{"mail"},
		Maintain:  true,
		Logger:    slog.New(slog.NewJSONHandler(&buf, nil)),
		OnOutcome: func(o worker.Outcome) { outcomes <- o },
	}, map[string]worker.Handler{
		"boom": func(context.Context, *worker.Job) error { return errors.New("no luck") },
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "boom", Queue: "mail", MaxAttempts: 2})
	for range 2 {
		<-outcomes // after the outcome's line
	}
	var got []map[string]any
	for _, l := range jsonLines(t, &buf) {
		if l["msg"] == "attempt failed" {
			got = append(got, l)
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d attempt failed lines, want 2: %v", len(got), got)
	}
	for i, want := range []struct{ level, state string }{{"INFO", "retryable"}, {"WARN", "discarded"}} {
		l := got[i]
		if l["level"] != want.level || l["state"] != want.state || l["queue"] != "mail" || l["job"] != id || l["attempt"] != float64(i+1) {
			t.Errorf("line %d = %v; want level %s, state %s, queue mail, job %s, attempt %d", i, l, want.level, want.state, id, i+1)
		}
	}
}

// A run that a stop interrupts logs one line naming its job and how long
// it ran: the job's record keeps no trace of a run given back (no attempt
// used, no error), and the daemon's line about the stop gave only a count,
// so that an operator could not tell which jobs, hours into their run, had
// to start again.
func TestStopLogsEachRunItInterrupts(t *testing.T) {
	e := newEnv(t, nil)
	var buf testutil.SyncBuffer
	started := make(chan struct{})
	w, err := worker.New(e.c, worker.Config{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("long", func(ctx context.Context, j *worker.Job) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := e.enqueue(coordinator.EnqueueParams{Kind: "long", Queue: "default"})
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no drain: the run is interrupted at once
	if err := w.Stop(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop = %v, want its ctx's error", err)
	}
	if j, _ := e.c.Get(context.Background(), id); j.State != coordinator.StateAvailable || j.Attempt != 0 {
		t.Fatalf("job %s attempt %d: want given back, no attempt used", j.State, j.Attempt)
	}
	var got []map[string]any
	for _, l := range jsonLines(t, &buf) {
		if l["msg"] == "run interrupted by the stop: job re-queued" {
			got = append(got, l)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d lines for the interrupted run, want 1: %v", len(got), got)
	}
	// The run's attempt (1), not the record's after the give-back (0).
	if l := got[0]; l["level"] != "INFO" || l["job"] != id || l["kind"] != "long" || l["queue"] != "default" || l["attempt"] != float64(1) || l["ran"] == nil {
		t.Errorf("line %v: want INFO with job %s, kind long, queue default, attempt 1 and ran", l, id)
	}
}
