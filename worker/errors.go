package worker

import (
	"errors"
	"fmt"
	"time"
)

// Causes of a handler's context cancellation, read with context.Cause.
var (
	// ErrCancelRequested: an operator cancelled the running job.
	ErrCancelRequested = errors.New("worker: job cancel requested")
	// ErrShutdown: the worker is stopping and the drain deadline passed.
	ErrShutdown = errors.New("worker: shutting down")
)

var (
	// ErrUnknownKind fails an attempt of a job whose kind no handler of
	// the worker runs. The attempt's error is recorded as text in the
	// job's Errors (errors.Is does not apply there); an OnOutcome hook
	// sees it as Outcome.HandlerErr.
	ErrUnknownKind = errors.New("worker: no handler for kind")
	// ErrStopped is returned by Start on a stopped worker.
	ErrStopped = errors.New("worker: stopped")
	// ErrStarted is wrapped by the error of Start on a worker already
	// started (a failed Start may be called again; a successful one not).
	ErrStarted = errors.New("worker: already started")
)

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("worker: snooze %s", e.d) }

// JobSnooze, returned by a handler, runs the job again after d without using
// an attempt (at once if d is not positive).
func JobSnooze(d time.Duration) error { return &snoozeError{d: d} }

type cancelError struct{ err error }

func (e *cancelError) Error() string {
	if e.err == nil {
		return "worker: job cancelled by its handler"
	}
	return "worker: job cancelled by its handler: " + e.err.Error()
}
func (e *cancelError) Unwrap() error { return e.err }

// JobCancel, returned by a handler, ends the job cancelled: no more attempts.
// err, if not nil, is recorded.
func JobCancel(err error) error { return &cancelError{err: err} }

type retryAtError struct {
	at  time.Time
	err error
}

func (e *retryAtError) Error() string { return e.err.Error() }
func (e *retryAtError) Unwrap() error { return e.err }

// JobRetryAt, returned by a handler, fails the attempt with err and retries
// at t instead of the retry policy's time (if attempts remain); a t in
// the past retries at once, and the zero t at the retry policy's time.
func JobRetryAt(t time.Time, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryAtError{at: t, err: err}
}

// IsSnooze reports whether err, a handler's error as a middleware sees it,
// asks for a snooze (JobSnooze, wrapped or not), and for how long: a
// snooze is not a failure, and uses no attempt.
func IsSnooze(err error) (time.Duration, bool) {
	var s *snoozeError
	if errors.As(err, &s) {
		return s.d, true
	}
	return 0, false
}

// IsCancel reports whether err, a handler's error as a middleware sees it,
// ends the job cancelled (JobCancel, wrapped or joined): no more attempts.
func IsCancel(err error) bool {
	var c *cancelError
	return errors.As(err, &c)
}
