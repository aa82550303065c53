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
	j := runInline(t, coordinator.EnqueueParams{Kind: "k", MaxAttempts: 2},
		func(ctx context.Context, j *Job) error { return errors.New("boom") },
		func(w *Worker) { w.cutDrain() }) // then Stop's drain deadline passes
	if j.State != coordinator.StateRetryable || j.Attempt != 1 || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "boom") {
		t.Fatalf("job %s attempt %d errors %+v: want its failure recorded", j.State, j.Attempt, j.Errors)
	}
}

// runInline enqueues one job of p, claims it and runs handler h on it as
// claim and start do, but with the wait for the handler and its outcome
// in this goroutine: between runs once the handler returned and gave its
// slot back, before the outcome is recorded. It returns the job as stored
// then.
func runInline(t *testing.T, p coordinator.EnqueueParams, h Handler, between func(*Worker)) *coordinator.Job {
	t.Helper()
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
	w.Handle(p.Kind, h)
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
	res, err := c.Enqueue(ctx, p)
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
	between(w)
	finish()
	j, err := c.Get(ctx, res.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestWritesAfterHandlerReturnedRefused: a goroutine the handler left
// behind that sets a result or checkpoints after the handler returned,
// but before its outcome is recorded, is refused with fence.ErrLeaseLost
// and changes nothing: the outcome is what the handler left when it
// returned. The run counted as over only once its outcome began to be
// recorded, so the leaked result replaced the handler's and the leaked
// checkpoint was written with it.
func TestWritesAfterHandlerReturnedRefused(t *testing.T) {
	late := make(chan struct{})
	lateErrs := make(chan error, 2)
	j := runInline(t, coordinator.EnqueueParams{Kind: "k"}, func(ctx context.Context, j *Job) error {
		go func() {
			<-late
			lateErrs <- j.SetResult("late")
			lateErrs <- j.Checkpoint(context.Background(), "late")
		}()
		return j.SetResult("in time")
	}, func(*Worker) {
		close(late)
		for range 2 {
			if err := <-lateErrs; !errors.Is(err, fence.ErrLeaseLost) {
				t.Errorf("write after the handler returned: %v, want fence.ErrLeaseLost", err)
			}
		}
	})
	if j.State != coordinator.StateCompleted || string(j.Result) != `"in time"` || string(j.Checkpoint) == `"late"` {
		t.Fatalf("job %s result %s checkpoint %s: want completed with the handler's result and no late checkpoint", j.State, j.Result, j.Checkpoint)
	}
}
