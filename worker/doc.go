// Package worker is the runtime a Go program embeds to run leasehold jobs:
// a handler registry by kind, a bounded number of slots, per-job timeouts,
// retries with backoff, self-fencing and graceful stop.
//
// A Worker holds one session (a lease) at a time. Every job it claims hangs
// on that lease and every write for the job is fenced by the claim's token
// (see package fence). The handler's context is derived from the session:
// when the lease is lost or cannot be renewed before its validity deadline,
// every handler's context is cancelled with cause
// coordinator.ErrSessionExpired, their runs are abandoned (nothing is
// recorded: another daemon may own the jobs by now), and the worker starts a
// new session and goes on claiming.
//
// A handler's context is also cancelled when an operator cancels its job
// (cause ErrCancelRequested), when the job's timeout passes
// (context.DeadlineExceeded) and when Stop's deadline passes
// (ErrShutdown). A handler that ignores its context keeps running, but its
// writes are refused once its run is over and its slot is given back after
// AbandonGrace.
//
// What a handler returns decides the outcome: nil completes the job (with
// the result set by SetResult), JobSnooze runs it again later without using
// an attempt, JobCancel ends it cancelled, JobRetryAt retries at a given
// time, and any other error fails the attempt: retryable with backoff until
// MaxAttempts, then discarded. A panic is recovered into a failed attempt
// with its stack.
//
// Per kind, HandleWith sets max attempts, a timeout and a retry policy, and
// HandleArgs registers a handler of typed arguments (the kind from their
// Kind method). Middleware (Config.Middleware, KindOptions.Middleware)
// wraps handlers for tracing, logging, metrics or tenancy. A worker with
// Maintain also enqueues Config.Periodic schedules while it is the elected
// maintenance leader, and Config.QueueConcurrency bounds its jobs per queue.
//
// A handler that checkpoints its progress (Job.Checkpoint) reads, on a
// later run, what the earlier ones recorded with Job.LastCheckpoint, or raw
// as j.Job.Checkpoint (the method hides the field): JSON null, not an
// empty RawMessage, when there is none.
//
// Execution is at least once. Side effects outside the store should be
// fenced with Job.Token or made idempotent with Job.IdempotencyKey.
//
// # Running a worker
//
// Scheduled, retryable and snoozed jobs become available only while some
// worker on the store has Config.Maintain (in shared mode one, elected,
// suffices); in shared mode the jobs of a daemon whose lease expired are
// re-queued only by a worker with Config.Reap. In embedded mode leases do
// not expire while the process lives: what a crashed process left running
// is re-queued by Start.
// Start's ctx bounds only the start; Stop stops the worker, with a ctx
// whose deadline bounds the drain, and goes before closing the store:
//
//	store, err := localstore.Open(dir, localstore.Options{})
//	...
//	defer store.Close() // runs after w.Stop below
//	c, err := coordinator.New(store, coordinator.Config{})
//	...
//	w, err := worker.New(c, worker.Config{Maintain: true})
//	...
//	w.Handle("resize", resize)
//	if err := w.Start(ctx); err != nil {
//		...
//	}
//	<-ctx.Done() // a signal.NotifyContext, say: it does not stop w
//	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//	defer cancel()
//	if err := w.Stop(sctx); err != nil {
//		...
//	}
package worker
