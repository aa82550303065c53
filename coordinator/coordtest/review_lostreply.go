package coordtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
)

// Tests from a review of writes whose reply was lost: claims, outcomes
// and checkpoints (2026-12-06). Run adds them to the suite.
var lostReplyReviewTests = []suiteTest{
	{"LateCheckpointOverwritesNoLaterOne", testLateCheckpoint},
}

// lateStore holds the writes it is told to: each answers at once with
// errReplyLost and is applied only when the test calls land, as a write
// that waited on a hung etcd member lands after its client gave up on it
// (ADR 0029: "the write may still be applied").
type lateStore struct {
	kv.Store
	hold atomic.Int32 // number of upcoming writes to hold
	mu   sync.Mutex
	held []kv.Txn
}

func (s *lateStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if kvtest.Writes(t) && s.hold.Add(-1) >= 0 {
		s.mu.Lock()
		s.held = append(s.held, t)
		s.mu.Unlock()
		return kv.TxnResult{}, errReplyLost
	}
	return s.Store.Txn(ctx, t)
}

// land applies the oldest write held.
func (s *lateStore) land(t *testing.T, ctx context.Context) kv.TxnResult {
	t.Helper()
	s.mu.Lock()
	if len(s.held) == 0 {
		s.mu.Unlock()
		t.Fatal("no write held")
	}
	w := s.held[0]
	s.held = s.held[1:]
	s.mu.Unlock()
	res, err := s.Store.Txn(ctx, w)
	if err != nil {
		t.Fatalf("late write: %v", err)
	}
	return res
}

// testLateCheckpoint: a checkpoint whose reply was lost may still land
// (etcd), after a later checkpoint of the same run was accepted. Both
// pass the run's fence; the late one must not replace the later one, or
// the next attempt (after the daemon dies) resumes from a checkpoint
// older than the last one accepted.
func testLateCheckpoint(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	ls := &lateStore{Store: h.store}
	c := h.coordinator(ls, coordinator.Config{})
	s := h.session(c)
	run := h.claimOneFrom(c, s)
	checkpoint := func(step int) error {
		return run.Checkpoint(h.ctx(), json.RawMessage(fmt.Sprintf(`{"step":%d}`, step)))
	}
	// One whose reply was lost and that lands before the next: the next
	// is still the run's to write, over it.
	ls.hold.Store(1)
	if err := checkpoint(1); !errors.Is(err, errReplyLost) {
		t.Fatalf("first checkpoint: %v, want its reply lost", err)
	}
	ls.land(t, h.ctx())
	if err := checkpoint(2); err != nil {
		t.Fatalf("checkpoint after an earlier one of the run landed: %v", err)
	}
	// One whose reply was lost and that lands after the next.
	ls.hold.Store(1)
	if err := checkpoint(3); !errors.Is(err, errReplyLost) {
		t.Fatalf("third checkpoint: %v, want its reply lost", err)
	}
	if err := checkpoint(4); err != nil {
		t.Fatalf("fourth checkpoint: %v", err)
	}
	ls.land(t, h.ctx()) // the third lands now
	if got := h.wantState(j.ID, coordinator.StateRunning); string(got.Checkpoint) != `{"step":4}` {
		t.Errorf("checkpoint after the late landing of an earlier one = %s, want the last accepted one, {\"step\":4}", got.Checkpoint)
	}
	// The daemon dies: the next attempt resumes from the last accepted
	// checkpoint.
	if err := h.store.Revoke(h.ctx(), s.Lease()); err != nil {
		t.Fatal(err)
	}
	if n, err := h.c.Reap(h.ctx(), nil, nil); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v; want 1", n, err)
	}
	next := h.claimOne(h.session(h.c))
	if got := next.Job().Checkpoint; string(got) != `{"step":4}` {
		t.Errorf("next attempt's checkpoint = %s, want {\"step\":4}", got)
	}
}
