package coordtest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
	"github.com/leasehold/leasehold/fence"
)

// Tests from a review of runs' outcome writes and group commit
// (2026-12-03). Run adds them to the suite.
var runReviewTests = []suiteTest{
	{"GroupWaiterLeavesWhenItsContextEnds", testGroupWaiterLeaves},
	{"CheckpointAfterAppliedLostOutcomeNotAccepted", testCheckpointAfterLostOutcome},
}

// testGroupWaiterLeaves: an outcome queued behind a group commit in flight
// returns when its context ends, without waiting for the batch ahead of it
// (which is bounded only by the latest deadline of others), and is known
// not to have been sent: after its job is taken over, a retry is refused
// as ErrLeaseLost, not reported as an unknown outcome.
func testGroupWaiterLeaves(t *testing.T, h *harness) {
	h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	gate := kvtest.NewGate(h.store)
	open := openOnce(t, gate)
	c := h.coordinator(gate, coordinator.Config{})
	s := h.session(c)
	runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 2, false)
	if err != nil || len(runs) != 2 {
		t.Fatalf("claim 2: %d, %v", len(runs), err)
	}
	lead, waiter := runs[0], runs[1]
	gate.Arm()
	leadErr := make(chan error, 1)
	go func() { leadErr <- lead.Complete(h.ctx(), nil) }()
	<-gate.Held()

	ctx, cancel := context.WithCancel(h.ctx())
	defer cancel()
	waitErr := make(chan error, 1)
	go func() { waitErr <- waiter.Fail(ctx, errors.New("boom"), coordinator.FailOpts{}) }()
	bound := time.After(failBound)
	for groupWaiting() < 2 {
		select {
		case <-bound:
			open()
			t.Fatal("the second outcome did not reach the group commit")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-waitErr:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("outcome whose context ended while queued: %v, want context.Canceled", err)
		}
	case <-time.After(failBound):
		t.Error("an outcome whose context ended while queued waited for the batch in flight")
	}
	open()
	if err := <-leadErr; err != nil {
		t.Fatalf("held complete: %v", err)
	}
	if t.Failed() {
		return
	}
	// The job is taken over: the unsent fail's retry is refused.
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	if n, err := h.c.Reap(h.ctx(), nil, nil); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v; want 1", n, err)
	}
	if err := waiter.Fail(h.ctx(), errors.New("boom"), coordinator.FailOpts{}); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("retried fail after the job was taken over: %v, want ErrLeaseLost (the first was never sent)", err)
	}
	h.wantState(waiter.Job().ID, coordinator.StateAvailable)
}

// testCheckpointAfterLostOutcome (promise 9): a checkpoint written after an
// outcome whose reply was lost, but which was applied, is not reported as
// accepted (it was not written: the run had ended), and it does not take
// the outcome's retry's answer: that retry still finds its write applied.
func testCheckpointAfterLostOutcome(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	fs := &flakyStore{Store: h.store}
	c := h.coordinator(fs, coordinator.Config{})
	run := h.claimOneFrom(c, h.session(c))
	fs.fail.Store(1) // applied, reply lost
	if err := run.Complete(h.ctx(), json.RawMessage(`1`)); !errors.Is(err, errReplyLost) {
		t.Fatalf("first complete: %v", err)
	}
	if err := run.Checkpoint(h.ctx(), json.RawMessage(`{"step":2}`)); !errors.Is(err, coordinator.ErrWrongState) {
		t.Errorf("checkpoint after the run's outcome was applied: %v, want ErrWrongState (it was not written)", err)
	}
	if err := run.Complete(h.ctx(), json.RawMessage(`1`)); err != nil {
		t.Errorf("retried complete: %v, want it found applied", err)
	}
	if got := h.wantState(j.ID, coordinator.StateCompleted); strings.Contains(string(got.Checkpoint), "step") {
		t.Errorf("completed job's checkpoint = %s, want the one before the outcome (none)", got.Checkpoint)
	}
}
