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
	// ErrUnknownKind: no handler is registered for the job's kind.
	ErrUnknownKind = errors.New("worker: no handler for kind")
	// ErrStopped is returned by Start on a stopped worker.
	ErrStopped = errors.New("worker: stopped")
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
// at t instead of the retry policy's time (if attempts remain).
func JobRetryAt(t time.Time, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryAtError{at: t, err: err}
}
