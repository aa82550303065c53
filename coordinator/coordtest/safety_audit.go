package coordtest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
	"github.com/leasehold/leasehold/fence"
)

// Tests from a second mutation audit of the safety contract (2026-12-04):
// each fails when the promise it names is broken at the site it names.

// testStaleFirstWriteOfEachKind (promise 3): every kind of write of a run
// whose job was taken over is refused by the store's fence and leaves the
// new owner's record alone. Each write is the stale run's first, so that
// it reaches the store: a run that was refused once refuses its later
// writes itself, which would test nothing. (An unfenced snooze left the
// job scheduled and deleted the new owner's ownership key; an unfenced
// cancel ended a job another daemon ran.)
func testStaleFirstWriteOfEachKind(t *testing.T, h *harness) {
	ops := []struct {
		name string
		op   func(r *coordinator.Run) error
	}{
		{"checkpoint", func(r *coordinator.Run) error { return r.Checkpoint(h.ctx(), json.RawMessage(`{"x":1}`)) }},
		{"complete", func(r *coordinator.Run) error { return r.Complete(h.ctx(), nil) }},
		{"fail", func(r *coordinator.Run) error { return r.Fail(h.ctx(), errors.New("x"), coordinator.FailOpts{}) }},
		{"snooze", func(r *coordinator.Run) error { return r.Snooze(h.ctx(), time.Minute) }},
		{"cancel", func(r *coordinator.Run) error { return r.Cancel(h.ctx(), nil) }},
		{"release", func(r *coordinator.Run) error { return r.Release(h.ctx()) }},
	}
	for _, o := range ops {
		j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
		stale := h.claimOne(h.session(h.c))
		_, owner := h.takeOver(stale.Session())
		if err := o.op(stale); !errors.Is(err, fence.ErrLeaseLost) {
			t.Errorf("stale %s: err = %v, want ErrLeaseLost", o.name, err)
		}
		got := h.get(j.ID)
		if got.State != coordinator.StateRunning || got.Token != owner.Token() {
			t.Errorf("after a stale %s: job %s under token %d, want running under %d", o.name, got.State, got.Token, owner.Token())
		}
		if err := owner.Complete(h.ctx(), nil); err != nil {
			t.Errorf("after a stale %s: the new owner's complete: %v", o.name, err)
		}
	}
}

// maxOps1 makes a store take one operation per transaction, so that a
// reaper reads each key of a job in a transaction of its own.
type maxOps1 struct{ kv.Store }

func (s maxOps1) Limits() kv.Limits { l := s.Store.Limits(); l.MaxOps = 1; return l }

// testReapTornRead (promise 7): the reaper reads records (and, to decide
// again a job whose move was refused, its ownership and cancel keys) in
// chunks of the store's MaxOps (128 on etcd; a job's three keys come in one
// chunk when they fit, as they do there, not on a store that takes fewer),
// so it may read a record at a later revision than the one at which it
// found the job's ownership key missing (its list of ownerless jobs, or the
// key's own read). A job that another reaper re-queued and a live daemon
// claimed in between must be left running: the re-queue re-checks, in its
// own transaction, that the ownership key is missing.
func testReapTornRead(t *testing.T, h *harness) {
	h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	b := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	dead := h.session(h.c)
	if runs, _, err := h.c.Claim(h.ctx(), dead, coordinator.DefaultQueue, 2, false); err != nil || len(runs) != 2 {
		t.Fatalf("claim of 2: %d runs, %v", len(runs), err)
	}
	if err := h.store.Revoke(h.ctx(), dead.Lease()); err != nil {
		t.Fatal(err)
	}
	gate := kvtest.NewGate(maxOps1{h.store})
	gate.Match = func(tx kv.Txn) bool { // the read of b's record, after the reap listed b ownerless
		return !kvtest.Writes(tx) && len(tx.Then) == 1 && strings.HasSuffix(tx.Then[0].Key, "/j/"+b.ID)
	}
	open := openOnce(t, gate)
	reaper := h.coordinator(gate, coordinator.Config{})
	gate.Arm()
	done := make(chan error, 1)
	go func() { _, err := reaper.Reap(h.ctx(), nil, nil); done <- err }()
	select {
	case <-gate.Held():
	case <-time.After(failBound):
		t.Fatal("the reaper never read b's record in a chunk of its own")
	}
	// Meanwhile another daemon reaps both jobs, and a live one claims them.
	if n, err := h.c.Reap(h.ctx(), nil, nil); err != nil || n != 2 {
		t.Fatalf("Reap = %d, %v; want 2", n, err)
	}
	live := h.session(h.coordinator(h.store, coordinator.Config{}))
	if runs, _, err := h.c.Claim(h.ctx(), live, coordinator.DefaultQueue, 2, false); err != nil || len(runs) != 2 {
		t.Fatalf("claim again: %d runs, %v", len(runs), err)
	}
	open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := h.get(b.ID); got.State != coordinator.StateRunning || got.Owner != live.WorkerID() {
		t.Fatalf("a job claimed again by a live daemon, reaped on a torn read: %s, owner %q", got.State, got.Owner)
	}
}

// testWritesStopPastDeadline (promise 6): a session past its validity
// deadline writes nothing, although its lease is still alive in the store
// (which has not expired it yet): the run refuses the write itself.
func testWritesStopPastDeadline(t *testing.T, h *harness) {
	const ttl = 10 * time.Second
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	clock := newSignalClock(NewClock(time.Now()))
	c := h.coordinator(h.store, coordinator.Config{})
	s := h.clockSession(c, clock, ttl)
	r := h.claimOneFrom(c, s)
	clock.next(t)
	clock.Advance(ttl) // past ValidUntil, no renewal acknowledged
	select {
	case <-s.Ctx().Done():
	case <-time.After(failBound):
		t.Fatal("the session did not end past its deadline")
	}
	err := r.Checkpoint(h.ctx(), json.RawMessage(`{"late":true}`))
	if lost := (*fence.LostError)(nil); !errors.As(err, &lost) || !lost.Local {
		t.Fatalf("checkpoint past the deadline: %v; want a local ErrLeaseLost", err)
	}
	if got := h.get(j.ID); string(got.Checkpoint) == `{"late":true}` {
		t.Fatalf("a checkpoint past the deadline was stored: %s", got.Checkpoint)
	}
}
