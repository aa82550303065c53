package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/fence"
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

// TestRefusedRunIsAbandonedNotFailed (promise 3): a run whose write was
// refused because another run owns the job records nothing, and its
// outcome says abandon, even while its own session is still valid (the
// job was taken over before the daemon's next renewal could tell it its
// lease was gone). Recording it as failed would be the verdict that
// overwrites the new owner's record; the store's fence refuses that too,
// but the outcome must not claim an attempt was made.
func TestRefusedRunIsAbandonedNotFailed(t *testing.T) {
	e := newEnv(t, nil)
	started, checkpoint := make(chan struct{}), make(chan struct{})
	outcomes := make(chan worker.Outcome, 4)
	wk := e.worker(worker.Config{LeaseTTL: 30 * time.Second, OnOutcome: func(o worker.Outcome) { outcomes <- o }},
		map[string]worker.Handler{"k": func(ctx context.Context, j *worker.Job) error {
			close(started)
			<-checkpoint
			return j.Checkpoint(ctx, map[string]int{"step": 1}) // refused: ErrLeaseLost
		}})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	<-started
	// Another daemon takes the job over: this daemon's lease is revoked
	// (it learns of that at its next renewal, 10 s away), the job reaped
	// and claimed again.
	ctx := context.Background()
	if err := e.store.Revoke(ctx, wk.Session().Lease()); err != nil {
		t.Fatal(err)
	}
	if n, err := e.c.Reap(ctx, nil, nil); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v; want 1", n, err)
	}
	other, err := e.c.NewSession(ctx, coordinator.SessionConfig{TTL: 30 * time.Second, Worker: coordinator.WorkerInfo{ID: coordinator.NewWorkerID()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Close(ctx) }()
	// The other daemon claims through this daemon's coordinator, whose
	// floor the watch lowers to the re-queued job only when its event
	// arrives, and whose claims skip a job that this daemon's own claim
	// (refused: its lease is gone) still tries: claim until the job comes.
	var runs []*coordinator.Run
	for deadline := time.Now().Add(outageBound); len(runs) == 0; {
		if runs, _, err = e.c.Claim(ctx, other, coordinator.DefaultQueue, 1, false); err != nil || time.Now().After(deadline) {
			t.Fatalf("the other daemon's claim: %d runs, %v", len(runs), err)
		}
		if len(runs) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if runs[0].Job().ID != id {
		t.Fatalf("the other daemon claimed %s; want %s", runs[0].Job().ID, id)
	}
	close(checkpoint)
	select {
	case o := <-outcomes:
		if o.Op != "abandon" || !errors.Is(o.Err, fence.ErrLeaseLost) {
			t.Fatalf("outcome of the refused run: op %q, err %v; want abandon, ErrLeaseLost", o.Op, o.Err)
		}
	case <-time.After(outageBound):
		t.Fatal("no outcome for the refused run")
	}
	if j, err := e.c.Get(ctx, id); err != nil || j.State != coordinator.StateRunning || j.Owner != other.WorkerID() {
		t.Fatalf("job after the refused run: %+v, %v; want running under the other daemon", j, err)
	}
}
