package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
)

// TestUserCallbackPanicsAreRecovered: a kind's retry policy, OnStart,
// OnClaim and OnOutcome that panic do not end the process (ADR 0057):
// the attempt whose retry policy panicked fails all the same and is
// retried by the coordinator's policy, every hook's event completes, and
// each panic is logged once with its stack (the policy's with the job's
// kind) and counted. They ran on the worker's goroutines (the finisher,
// the claim loop), where a panic ended the process: a job whose retry
// policy panicked took down every daemon that ran it, once per run.
// Without the recovery this test's binary dies with the policy's panic.
func TestUserCallbackPanicsAreRecovered(t *testing.T) {
	s, err := localstore.Open(t.TempDir(), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var log testutil.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	// The coordinator's policy retries at once: what a kind's policy
	// that panicked leaves the retry to.
	c, err := coordinator.New(s, coordinator.Config{Logger: logger, RetryPolicy: func(int, *coordinator.Job) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	outcomes := make(chan worker.Outcome, 10)
	w, err := worker.New(c, worker.Config{
		Maintain: true, // promotes the retry
		OnClaim: func(q string, n int, _ coordinator.ClaimStats) {
			if n > 0 {
				panic("OnClaim: nil map")
			}
		},
		OnStart: func(coordinator.Job, fence.Token) { panic("OnStart: nil map") },
		OnOutcome: func(o worker.Outcome) {
			outcomes <- o
			panic("OnOutcome: nil map")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.HandleWith("poison", func(ctx context.Context, j *worker.Job) error {
		if j.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}, worker.KindOptions{RetryPolicy: func(attempt int, j *coordinator.Job) time.Duration {
		panic("RetryPolicy: index out of range")
	}})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	r, err := c.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "poison"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	j, err := c.Wait(ctx, r.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != coordinator.StateCompleted || j.Attempt != 2 || len(j.Errors) != 1 || j.Errors[0].Error != "first attempt fails" {
		t.Fatalf("job %s at attempt %d, errors %+v; want completed at attempt 2 after the first attempt's failure", j.State, j.Attempt, j.Errors)
	}
	for i, want := range []struct {
		op    string
		state coordinator.State
	}{{"fail", coordinator.StateRetryable}, {"complete", coordinator.StateCompleted}} {
		select {
		case o := <-outcomes:
			if o.Op != want.op || o.Err != nil || o.State != want.state {
				t.Fatalf("outcome %d: %s %v %s; want %s %s", i+1, o.Op, o.Err, o.State, want.op, want.state)
			}
		case <-ctx.Done():
			t.Fatalf("outcome %d not reported", i+1)
		}
	}
	// Stop waits for the finishers: the last OnOutcome has returned.
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopCancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	out := log.String()
	for _, cb := range []string{"worker.KindOptions.RetryPolicy", "worker.Config.OnStart", "worker.Config.OnOutcome", "worker.Config.OnClaim"} {
		want := 2
		if cb == "worker.KindOptions.RetryPolicy" {
			want = 1
		}
		if n := strings.Count(out, "callback="+cb+" "); n != want {
			t.Errorf("%s: %d logs of its panic, want %d", cb, n, want)
		}
	}
	policy := ""
	for line := range strings.Lines(out) {
		if strings.Contains(line, "callback=worker.KindOptions.RetryPolicy") {
			policy = line
		}
	}
	if !strings.Contains(policy, "kind=poison") || !strings.Contains(policy, "RetryPolicy: index out of range") || !strings.Contains(policy, "TestUserCallbackPanicsAreRecovered") {
		t.Errorf("the policy's panic logged without its kind, value or stack: %s", policy)
	}
	if n := c.CallbackPanics(); n != 7 {
		t.Errorf("CallbackPanics = %d, want 7 (a policy, two starts, two outcomes, two claims)", n)
	}
}

// TestKindRetryPolicyPanicWaitsByTheCoordinatorsPolicy: an attempt whose
// kind's retry policy panicked is retried when the coordinator's policy
// says (an hour here), not at once: the kind's policy gave no wait. With
// the attempt's retry time taken from the policy that panicked (a wait of
// zero), no test failed, and a job whose policy panics ran its attempts
// back to back.
func TestKindRetryPolicyPanicWaitsByTheCoordinatorsPolicy(t *testing.T) {
	s, err := localstore.Open(t.TempDir(), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	logger := slog.New(slog.DiscardHandler)
	c, err := coordinator.New(s, coordinator.Config{Logger: logger, RetryPolicy: func(int, *coordinator.Job) time.Duration { return time.Hour }})
	if err != nil {
		t.Fatal(err)
	}
	outcomes := make(chan worker.Outcome, 1)
	w, err := worker.New(c, worker.Config{Logger: logger, OnOutcome: func(o worker.Outcome) { outcomes <- o }})
	if err != nil {
		t.Fatal(err)
	}
	w.HandleWith("poison", func(context.Context, *worker.Job) error {
		return errors.New("fails")
	}, worker.KindOptions{RetryPolicy: func(int, *coordinator.Job) time.Duration {
		panic("RetryPolicy: index out of range")
	}})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	before := time.Now()
	r, err := c.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "poison"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	select {
	case o := <-outcomes:
		if o.Op != "fail" || o.Err != nil || o.State != coordinator.StateRetryable {
			t.Fatalf("outcome %s %v %s; want fail, retryable", o.Op, o.Err, o.State)
		}
	case <-ctx.Done():
		t.Fatal("no outcome")
	}
	j, err := c.Get(ctx, r.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != coordinator.StateRetryable || j.ScheduledAt.Before(before.Add(time.Hour)) {
		t.Fatalf("job %s, retry at %v (%v after the enqueue); want retryable in an hour, the coordinator's policy", j.State, j.ScheduledAt, j.ScheduledAt.Sub(before))
	}
	if n := c.CallbackPanics(); n != 1 {
		t.Errorf("CallbackPanics = %d, want 1", n)
	}
}
