package coordtest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/testutil"
)

// Tests from a review of the program's callbacks other than handlers
// (ADR 0057). Run adds them to the suite.
var callbackReviewTests = []suiteTest{
	{"EnqueueHookPanicRefusesTheEnqueue", testEnqueueHookPanic},
	{"RetryPolicyPanicRetriesByTheDefault", testRetryPolicyPanic},
	{"OnReapPanicStillReaps", testOnReapPanic},
}

// revision is the store's revision now.
func (h *harness) revision() int64 {
	h.t.Helper()
	res, err := h.store.Txn(h.ctx(), kv.Txn{Then: []kv.Op{kv.Get(h.keysRoot())}})
	if err != nil {
		h.t.Fatal(err)
	}
	return res.Revision
}

// testEnqueueHookPanic: an enqueue hook that panics refuses the enqueue
// (one job, a batch, a periodic job's ticks) with an error wrapping
// ErrCallbackPanicked, writing nothing, and the panic is logged with its
// stack. It ran on the caller's goroutine: on the periodic leader's, the
// panic ended the daemon, and then every daemon elected after it.
func testEnqueueHookPanic(t *testing.T, h *harness) {
	var log testutil.SyncBuffer
	c := h.coordinator(h.store, coordinator.Config{
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
		EnqueueHooks: []coordinator.EnqueueHook{
			func(ctx context.Context, p *coordinator.EnqueueParams) error {
				if p.Kind == "poison" {
					panic("tenant lookup: nil map")
				}
				return nil
			},
		},
	})
	before := h.revision()
	if _, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "poison"}); !errors.Is(err, coordinator.ErrCallbackPanicked) || !strings.Contains(err.Error(), "tenant lookup: nil map") {
		t.Fatalf("enqueue whose hook panicked: %v; want ErrCallbackPanicked with the panic", err)
	}
	if _, err := c.EnqueueBatch(h.ctx(), []coordinator.EnqueueParams{{Kind: "k"}, {Kind: "poison"}}); !errors.Is(err, coordinator.ErrCallbackPanicked) {
		t.Fatalf("batch whose hook panicked on its second job: %v; want ErrCallbackPanicked", err)
	}
	pj := coordinator.PeriodicJob{Name: "poison-tick", Spec: "@every 1m", Job: coordinator.EnqueueParams{Kind: "poison"}}
	// A tick due: the schedule starts now, its first tick a minute on.
	if _, err := c.EnqueueDueTicks(h.ctx(), pj); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Minute)
	mid := h.revision()
	if _, err := c.EnqueueDueTicks(h.ctx(), pj); !errors.Is(err, coordinator.ErrCallbackPanicked) {
		t.Fatalf("ticks whose hook panicked: %v; want ErrCallbackPanicked", err)
	}
	if after := h.revision(); after != mid {
		t.Fatalf("the ticks refused moved the revision from %d to %d: something was written", mid, after)
	}
	if n := len(h.jobsOf("poison")) + len(h.jobsOf("k")); n != 0 {
		t.Fatalf("%d jobs written by enqueues whose hook panicked (revision %d before)", n, before)
	}
	if n := c.CallbackPanics(); n != 3 {
		t.Fatalf("CallbackPanics = %d, want 3", n)
	}
	if got := log.String(); strings.Count(got, "callback panicked") != 3 || !strings.Contains(got, "testEnqueueHookPanic") {
		t.Fatalf("want three logs of the panic, with its stack; got:\n%s", got)
	}
	// The coordinator goes on: a job the hook takes is enqueued.
	if _, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
}

// testRetryPolicyPanic: a coordinator whose retry policy panics records a
// failed attempt all the same, retryable after DefaultRetryPolicy's wait,
// and logs the panic with its stack and the job's kind. It panicked in
// the worker's goroutine that records outcomes: the process ended, and
// every daemon that ran the job ended the same way.
func testRetryPolicyPanic(t *testing.T, h *harness) {
	var log testutil.SyncBuffer
	c := h.coordinator(h.store, coordinator.Config{
		Logger:      slog.New(slog.NewTextHandler(&log, nil)),
		RetryPolicy: func(attempt int, j *coordinator.Job) time.Duration { panic("policy: index out of range") },
	})
	j := h.enqueue(coordinator.EnqueueParams{Kind: "poison"})
	r := h.claimOneFrom(c, h.session(c))
	now := h.clock.Now()
	if err := r.Fail(h.ctx(), errors.New("handler failed"), coordinator.FailOpts{}); err != nil {
		t.Fatalf("fail of an attempt whose retry policy panicked: %v", err)
	}
	got := h.wantState(j.ID, coordinator.StateRetryable)
	if wait := got.ScheduledAt.Sub(now); wait < time.Second || wait > 1100*time.Millisecond {
		t.Fatalf("retry in %s; want DefaultRetryPolicy's for attempt 1 (1s, up to 10%% more)", wait)
	}
	if len(got.Errors) != 1 || got.Errors[0].Error != "handler failed" {
		t.Fatalf("errors %+v; want the handler's", got.Errors)
	}
	if out := log.String(); !strings.Contains(out, "policy: index out of range") || !strings.Contains(out, "kind=poison") || !strings.Contains(out, "testRetryPolicyPanic") {
		t.Fatalf("want the panic logged with the kind and its stack; got:\n%s", out)
	}
	if n := c.CallbackPanics(); n != 1 {
		t.Fatalf("CallbackPanics = %d, want 1", n)
	}
}

// testOnReapPanicStillReaps: an OnReap that panics leaves the reap whole:
// every job whose owner's lease is gone is re-queued, and counted. It
// panicked in the reaper's goroutine, ending the process.
func testOnReapPanic(t *testing.T, h *harness) {
	c := h.coordinator(h.store, coordinator.Config{OnReap: func(*coordinator.Job) { panic("metrics: nil vector") }})
	a := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	b := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	s := h.session(h.c)
	h.claimOne(s)
	h.claimOne(s)
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Reap(h.ctx(), nil, nil); err != nil || n != 2 {
		t.Fatalf("Reap = %d, %v; want 2", n, err)
	}
	h.wantState(a.ID, coordinator.StateAvailable)
	h.wantState(b.ID, coordinator.StateAvailable)
	if n := c.CallbackPanics(); n != 2 {
		t.Fatalf("CallbackPanics = %d, want 2", n)
	}
}
