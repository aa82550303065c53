package coordinator

import "errors"

// Sentinel errors. Callers test them with errors.Is.
var (
	// ErrInvalid wraps every rejection of bad input (a malformed payload,
	// an unknown state, a bad id, an oversized job). Nothing was written.
	ErrInvalid = errors.New("coordinator: invalid request")
	// ErrNotFound is returned for a job id that does not exist.
	ErrNotFound = errors.New("coordinator: job not found")
	// ErrWrongState is returned for an operation that makes no sense in
	// the job's current state (cancelling a completed job, say).
	ErrWrongState = errors.New("coordinator: job is in the wrong state")
	// ErrCorrupt is returned when a stored record cannot be decoded; the
	// error names the key.
	ErrCorrupt = errors.New("coordinator: corrupt record")
	// ErrSessionExpired is the cause of a session's context when its lease
	// was lost or could not be renewed before its validity deadline.
	ErrSessionExpired = errors.New("coordinator: session expired")
	// ErrSessionClosed is the cause of a session's context after Close.
	ErrSessionClosed = errors.New("coordinator: session closed")
	// ErrUnknownOutcome is returned by a run's write when an earlier
	// attempt's reply was lost and the run can no longer find out whether
	// it was applied (its session ended, or the write would have run the
	// job again and the job has moved on since). The run is over either
	// way; the job's record says what happened.
	ErrUnknownOutcome = errors.New("coordinator: outcome unknown")
	// ErrConflict is returned when an operation kept losing races with
	// concurrent writers; it is safe to retry.
	ErrConflict = errors.New("coordinator: too many concurrent changes, try again")
	// ErrCallbackPanicked wraps the error of code of the program's other
	// than a handler (an enqueue hook, a retry policy, a hook) that
	// panicked: see Coordinator.CallUser. An enqueue refused with it wrote
	// nothing.
	ErrCallbackPanicked = errors.New("coordinator: callback panicked")
	// ErrEnqueueRefused wraps the error of an enqueue that one of
	// Config.EnqueueHooks refused, by its error (also wrapped) or its
	// panic (ErrCallbackPanicked): nothing was written. The same enqueue
	// is refused again unless what the hook checks has changed.
	ErrEnqueueRefused = errors.New("coordinator: enqueue refused by a hook")
)
