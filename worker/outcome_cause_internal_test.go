package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/localstore"
)

// TestFailureBeforeDrainCutIsRecorded: a handler that failed before Stop's
// drain deadline passed has its failure recorded, even if the deadline
// passes before its outcome is: the run's context was cancelled (cause
// ErrShutdown) only after its handler returned. The failure was turned
// into a release: the attempt not counted, its error lost.
func TestFailureBeforeDrainCutIsRecorded(t *testing.T) {
	ctx := context.Background()
	s, err := localstore.Open(t.TempDir(), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := coordinator.New(s, coordinator.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(c, Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(ctx context.Context, j *Job) error { return errors.New("boom") })
	if err := w.wrapHandlers(); err != nil {
		t.Fatal(err)
	}
	w.runCtx, w.runCancel = context.WithCancelCause(ctx)
	defer w.runCancel(nil)
	sess, err := w.newSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = sess.Close(cctx)
	}()
	res, err := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k", MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	runs, _, err := c.Claim(ctx, sess, coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 {
		t.Fatalf("claim: %d runs, %v", len(runs), err)
	}
	// As claim and start do, but with the wait for the handler and the
	// outcome in this goroutine.
	w.reserve(coordinator.DefaultQueue, 1)
	w.inFlight.Add(1)
	w.needFree.Store(1) // released signals freed as the handler gives its slot back
	finish := w.execute(sess, runs[0])
	<-w.freed    // the handler returned
	w.cutDrain() // then Stop's drain deadline passes
	finish()
	j, err := c.Get(ctx, res.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != coordinator.StateRetryable || j.Attempt != 1 || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "boom") {
		t.Fatalf("job %s attempt %d errors %+v: want its failure recorded", j.State, j.Attempt, j.Errors)
	}
}

// TestWritesAfterHandlerReturnedRefused: a goroutine the handler left
// behind that sets a result or checkpoints after the handler returned,
// but before its outcome is recorded, is refused with fence.ErrLeaseLost
// and changes nothing: the outcome is what the handler left when it
// returned. The run counted as over only once its outcome began to be
// recorded, so the leaked result replaced the handler's and the leaked
// checkpoint was written with it.
func TestWritesAfterHandlerReturnedRefused(t *testing.T) {
	ctx := context.Background()
	s, err := localstore.Open(t.TempDir(), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := coordinator.New(s, coordinator.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(c, Config{})
	if err != nil {
		t.Fatal(err)
	}
	late := make(chan struct{})
	lateErrs := make(chan error, 2)
	w.Handle("k", func(ctx context.Context, j *Job) error {
		go func() {
			<-late
			lateErrs <- j.SetResult("late")
			lateErrs <- j.Checkpoint(context.Background(), "late")
		}()
		return j.SetResult("in time")
	})
	if err := w.wrapHandlers(); err != nil {
		t.Fatal(err)
	}
	w.runCtx, w.runCancel = context.WithCancelCause(ctx)
	defer w.runCancel(nil)
	sess, err := w.newSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = sess.Close(cctx)
	}()
	res, err := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	runs, _, err := c.Claim(ctx, sess, coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 {
		t.Fatalf("claim: %d runs, %v", len(runs), err)
	}
	w.reserve(coordinator.DefaultQueue, 1)
	w.inFlight.Add(1)
	w.needFree.Store(1) // released signals freed as the handler gives its slot back
	finish := w.execute(sess, runs[0])
	<-w.freed // the handler returned
	close(late)
	for range 2 {
		if err := <-lateErrs; !errors.Is(err, fence.ErrLeaseLost) {
			t.Errorf("write after the handler returned: %v, want fence.ErrLeaseLost", err)
		}
	}
	finish()
	j, err := c.Get(ctx, res.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != coordinator.StateCompleted || string(j.Result) != `"in time"` || string(j.Checkpoint) == `"late"` {
		t.Fatalf("job %s result %s checkpoint %s: want completed with the handler's result and no late checkpoint", j.State, j.Result, j.Checkpoint)
	}
}
