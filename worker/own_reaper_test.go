package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/worker"
)

// TestOwnReaperLeavesRunningJob (promise 7): a daemon never reaps a job it
// is running itself. Its lease revoked under it, the ownership key of its
// running job is gone at once, but its own reaper (which sees that within
// milliseconds) must leave the job running until the handler has been
// interrupted: the daemon learns of the loss only at its next renewal, up
// to TTL/3 later, and meanwhile the handler runs on. The job is watched
// from the revoke until the handler's context ends.
func TestOwnReaperLeavesRunningJob(t *testing.T) {
	e := newEnv(t, nil)
	started, interrupted := make(chan struct{}), make(chan struct{})
	wk := e.worker(worker.Config{LeaseTTL: 3 * time.Second, Reap: true, AbandonGrace: 5 * time.Second}, map[string]worker.Handler{
		"long": func(ctx context.Context, j *worker.Job) error {
			if j.Attempt > 1 || j.Rescues > 0 {
				return nil // its next run, after the interrupted one
			}
			close(started)
			<-ctx.Done()
			close(interrupted)
			return ctx.Err()
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "long"})
	<-started
	if err := e.store.Revoke(context.Background(), wk.Session().Lease()); err != nil {
		t.Fatal(err)
	}
	// Watch the job's record until the handler is interrupted.
	for {
		j, err := e.c.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-interrupted:
			return
		default:
		}
		if j.State != coordinator.StateRunning || j.Rescues != 0 {
			t.Fatalf("job %s (rescues %d) while its handler here still ran uninterrupted: its own daemon reaped it", j.State, j.Rescues)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
