package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/fence"
)

// Job is what a handler receives: the job as claimed (with its fencing
// token and attempt number) and the means to write for the run.
//
// The method Checkpoint hides the embedded field of the same name: the
// checkpoint that earlier runs recorded is j.Job.Checkpoint, or decoded
// with LastCheckpoint. Read from the store, a job that never
// checkpointed holds JSON null there (the 4 bytes "null", not an empty
// RawMessage; nil only in a record without the field), and so does
// j.Job.Result of a job without a result.
type Job struct {
	coordinator.Job

	run    *coordinator.Run
	mu     sync.Mutex
	result json.RawMessage
	ended  bool // the handler returned, or was abandoned: SetResult and Checkpoint are too late
}

// Checkpoint records v (marshalled to JSON) under the run's fence. A later
// run of the job (a retry, a run after a snooze or a lost lease) reads it
// with LastCheckpoint, or raw as j.Job.Checkpoint (this method hides that
// field). An error wrapping fence.ErrLeaseLost means the run is over:
// return.
//
// The write is bounded by ctx, so it fails once the handler's context is
// done (Stop's drain deadline, a cancel, the attempt's timeout), which is
// when a long handler most wants its progress kept: give it a context of
// its own then, such as
//
//	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
//	err := j.Checkpoint(cctx, progress)
//	cancel()
//
// The fence still applies: a run that is over is refused, whatever the
// context. Called once the handler returned (from a goroutine it left
// behind, or after it was abandoned), it records nothing, as SetResult.
func (j *Job) Checkpoint(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("worker: marshal checkpoint of job %s: %w", j.ID, err)
	}
	if j.isEnded() {
		// The outcome is what the handler left as it returned: a later
		// checkpoint would be written with it, or under it.
		return fmt.Errorf("%w: %w: worker: checkpoint of job %s after its handler returned: checkpoint before returning", fence.ErrLeaseLost, coordinator.ErrWrongState, j.ID)
	}
	err = j.run.Checkpoint(ctx, b)
	if errors.Is(err, coordinator.ErrWrongState) {
		// The run's outcome was recorded (its handler outlived
		// AbandonGrace, or left a goroutine behind): the run is over.
		return fmt.Errorf("%w: %w", fence.ErrLeaseLost, err)
	}
	return err
}

// LastCheckpoint decodes into v the checkpoint recorded by earlier runs
// of the job (j.Job.Checkpoint, as claimed: not one this run recorded) and
// reports whether there was one. A job that never checkpointed, or whose
// last checkpoint was nil, has none: ok is false and v is left alone.
func (j *Job) LastCheckpoint(v any) (ok bool, err error) {
	cp := bytes.TrimSpace(j.Job.Checkpoint)
	if len(cp) == 0 || bytes.Equal(cp, []byte("null")) {
		return false, nil
	}
	if err := json.Unmarshal(cp, v); err != nil {
		return false, fmt.Errorf("worker: decode checkpoint of %s job %s: %w", j.Kind, j.ID, err)
	}
	return true, nil
}

// SetResult sets what is recorded as the job's result when the handler
// returns nil. Called once the handler returned (from a goroutine it left
// behind, or after it was abandoned), it records nothing and returns an
// error wrapping fence.ErrLeaseLost: the run is over.
func (j *Job) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("worker: marshal result of job %s: %w", j.ID, err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ended {
		return fmt.Errorf("%w: worker: result of job %s set after its run ended: set it before the handler returns", fence.ErrLeaseLost, j.ID)
	}
	j.result = b
	return nil
}

// end marks the run as over for the handler's writes: it returned, or
// its outcome is being recorded without it.
func (j *Job) end() {
	j.mu.Lock()
	j.ended = true
	j.mu.Unlock()
}

func (j *Job) isEnded() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ended
}

// Fence returns the run's fencing token, the same as j.Token, for
// external systems to fence the run's side effects per job (see
// fence.Token.Validates).
func (j *Job) Fence() fence.Token { return j.run.Token() }

// BootDeadline reports until when the run is known to be this daemon's,
// as a reading of the boot clock (CLOCK_BOOTTIME on Linux, which every
// process of the machine reads alike): the deadline of the daemon's
// session, which moves with each renewal (see coordinator.Session's
// ValidUntil and BootDeadline). It is for a process beside the daemon that
// must stop the run's work even if the daemon is paused, as the exec guard
// does for --exec commands; a handler in the daemon has its context. ok is
// false when the run hangs on no lease that expires while the daemon is
// stopped (embedded mode), or without a boot clock.
func (j *Job) BootDeadline() (d time.Duration, ok bool) {
	if j.run == nil {
		return 0, false
	}
	return j.run.Session().BootDeadline()
}

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
