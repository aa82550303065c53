package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
	"github.com/leasehold/leasehold/worker"
)

// A result the store cannot take fails the attempt, saying why; the job
// is not left running to be reaped and run again, and again.
func TestResultTooLargeFailsTheAttempt(t *testing.T) {
	e := newEnv(t, func(s kv.Store) kv.Store { return &kvtest.Limit{Store: s, MaxBytes: 256 << 10} })
	e.worker(worker.Config{}, map[string]worker.Handler{
		"big": func(ctx context.Context, j *worker.Job) error {
			return j.SetResult(strings.Repeat("r", 300<<10))
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "big", MaxAttempts: 1, Payload: json.RawMessage(`{}`)})
	j := e.wait(id)
	if j.State != coordinator.StateDiscarded || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "more than the store takes") {
		t.Fatalf("job with a result too large for the store: %s, errors %+v; want discarded, saying why", j.State, j.Errors)
	}
}

// A failed attempt whose record, with its error, would be too large to run
// again ends the job discarded, saying why, instead of leaving it running
// under a live session that nothing reaps.
func TestOutcomeTooLargeToRunAgainDiscards(t *testing.T) {
	e := newEnv(t, func(s kv.Store) kv.Store { return &kvtest.Limit{Store: s, MaxBytes: 256 << 10} })
	e.worker(worker.Config{}, map[string]worker.Handler{
		"big": func(ctx context.Context, j *worker.Job) error {
			if err := j.Checkpoint(ctx, strings.Repeat("c", 60<<10)); err != nil {
				return err
			}
			return errors.New(strings.Repeat("e", 20<<10))
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "big", Payload: json.RawMessage(`"` + strings.Repeat("p", 50<<10) + `"`)})
	j := e.wait(id)
	if j.State != coordinator.StateDiscarded || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "could not be recorded") {
		t.Fatalf("job whose failure cannot be stored: %s, %d errors; want discarded, saying why", j.State, len(j.Errors))
	}
}

// A cancel whose record, with the handler's error, the store cannot take
// still ends the job cancelled, saying why the error is not there: the
// job is not left running under a live session that nothing reaps (and,
// embedded, run again at the next open although its handler cancelled it).
func TestCancelTooLargeStillCancels(t *testing.T) {
	e := newEnv(t, func(s kv.Store) kv.Store { return &kvtest.Limit{Store: s, MaxBytes: 256 << 10} })
	outcomes := make(chan worker.Outcome, 1)
	e.worker(worker.Config{OnOutcome: func(o worker.Outcome) { outcomes <- o }}, map[string]worker.Handler{
		"big": func(ctx context.Context, j *worker.Job) error {
			return worker.JobCancel(errors.New(strings.Repeat("e", 300<<10)))
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "big"})
	out := <-outcomes
	j, err := e.c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if out.Err != nil || out.Op != "cancel" || j.State != coordinator.StateCancelled {
		t.Fatalf("cancel too large for the store: outcome %s (%v), job %s; want it recorded cancelled", out.Op, out.Err, j.State)
	}
	if len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "could not be recorded") {
		t.Fatalf("cancelled job's errors %+v; want one saying why the handler's error is not there", j.Errors)
	}
}
