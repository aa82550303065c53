package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/fence"
)

// Job is what a handler receives: the job as claimed (with its fencing
// token and attempt number) and the means to write for the run.
type Job struct {
	coordinator.Job

	run    *coordinator.Run
	mu     sync.Mutex
	result json.RawMessage
}

// Checkpoint records v (marshalled to JSON) under the run's fence. A retry
// of the job sees it in Job.Checkpoint. An error wrapping fence.ErrLeaseLost
// means the run is over: return.
func (j *Job) Checkpoint(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("worker: marshal checkpoint of job %s: %w", j.ID, err)
	}
	err = j.run.Checkpoint(ctx, b)
	if errors.Is(err, coordinator.ErrWrongState) {
		// The run's outcome was recorded (its handler outlived
		// AbandonGrace, or left a goroutine behind): the run is over.
		return fmt.Errorf("%w: %w", fence.ErrLeaseLost, err)
	}
	return err
}

// SetResult sets what is recorded as the job's result when the handler
// returns nil.
func (j *Job) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("worker: marshal result of job %s: %w", j.ID, err)
	}
	j.mu.Lock()
	j.result = b
	j.mu.Unlock()
	return nil
}

// Fence returns the predicate that external systems can check: the run's
// token on the job's ownership key.
func (j *Job) Fence() fence.Token { return j.run.Token() }

// Decode unmarshals the payload into v.
func (j *Job) Decode(v any) error {
	if err := json.Unmarshal(j.Payload, v); err != nil {
		return fmt.Errorf("worker: decode payload of %s job %s: %w", j.Kind, j.ID, err)
	}
	return nil
}

func (j *Job) getResult() json.RawMessage {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.result
}

// Handler runs one job. See the package doc for what its error means.
type Handler func(ctx context.Context, j *Job) error

// Typed adapts a function of a decoded payload type into a Handler: the
// payload is decoded into T first, and a payload that does not decode
// cancels the job (retrying cannot fix it).
func Typed[T any](fn func(ctx context.Context, j *Job, args T) error) Handler {
	return func(ctx context.Context, j *Job) error {
		var args T
		if err := j.Decode(&args); err != nil {
			return JobCancel(err)
		}
		return fn(ctx, j, args)
	}
}
