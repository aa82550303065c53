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
