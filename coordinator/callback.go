package coordinator

import (
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// CallUser calls fn, which calls code of the program's other than a
// handler (a retry policy, a hook: what names it, "OnReap" say). A panic
// in it is recovered, logged at error with its stack (on the logger log
// returns, or the coordinator's if log is nil: it is built only then),
// counted in CallbackPanics, and returned as an error wrapping
// ErrCallbackPanicked; fn's work is lost. Else it returns nil. A panic
// there ran on a goroutine of the worker or of the coordinator, where it
// would end the process, and with it every run of the daemon: a job whose
// retry policy panicked would do that on every daemon that ran it (ADR
// 0057).
func (c *Coordinator) CallUser(what string, log func() *slog.Logger, fn func()) (err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		c.callbackPanics.Add(1)
		err = fmt.Errorf("%w: %s: %v", ErrCallbackPanicked, what, p)
		l := c.log
		if log != nil {
			l = log()
		}
		l.Error("callback panicked: recovered, the process goes on without what it did not do; fix the callback", slog.String("callback", what), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
	}()
	fn()
	return nil
}

// CallbackPanics counts the panics CallUser recovered: of retry policies,
// hooks and enqueue hooks, the worker's too.
func (c *Coordinator) CallbackPanics() int64 { return c.callbackPanics.Load() }

// retryDelay returns policy's wait before the attempt after attempt of j,
// or, if policy panics, DefaultRetryPolicy's: the attempt still fails, and
// is retried (CallUser logs the panic).
func (c *Coordinator) retryDelay(policy RetryPolicy, attempt int, j *Job) time.Duration {
	var d time.Duration
	log := func() *slog.Logger {
		return c.log.With(slog.String("job", j.ID), slog.String("kind", j.Kind), slog.Int("attempt", attempt))
	}
	if err := c.CallUser("coordinator.Config.RetryPolicy", log, func() { d = policy(attempt, j) }); err != nil {
		return DefaultRetryPolicy(attempt, j)
	}
	return d
}
