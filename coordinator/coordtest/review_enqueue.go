package coordtest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// Tests from a review of the enqueue path at its edges (2026-12-06). Run
// adds them to the suite.
var enqueueReviewTests = []suiteTest{
	{"SplitBatchPartlyRefusedIsNoRefusal", testSplitBatchPartlyRefused},
}

// lowLimitStore tells a coordinator a larger request limit (reported) than
// it takes (real), as etcd servers started with a lower --max-request-bytes
// than the daemon's --etcd-max-request-bytes do. It refuses a larger
// transaction only once a smaller one has been applied, so that a batch's
// transactions, applied concurrently, land in that order.
type lowLimitStore struct {
	kv.Store
	reported, real int
	once           sync.Once
	applied        chan struct{}
}

func (s *lowLimitStore) Limits() kv.Limits {
	l := s.Store.Limits()
	l.MaxBytes = s.reported
	return l
}

func (s *lowLimitStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if t.Bytes() > s.real {
		select {
		case <-s.applied:
		case <-ctx.Done():
			return kv.TxnResult{}, ctx.Err()
		}
		return kv.TxnResult{}, kv.ErrTxnTooLarge
	}
	r, err := s.Store.Txn(ctx, t)
	if err == nil {
		s.once.Do(func() { close(s.applied) })
	}
	return r, err
}

// testSplitBatchPartlyRefused: a batch applied in several transactions,
// one of which the store refuses as too large (its limit lower than the
// coordinator was told) while another is applied, is not answered with
// the store's refusal: that error (a 413, ErrInvalid in the clients) says
// that nothing was written, and a caller who sends the jobs again in
// smaller batches, as it advises, enqueues the applied ones twice. The
// error says that some may have been written.
func testSplitBatchPartlyRefused(t *testing.T, h *harness) {
	store := &lowLimitStore{Store: h.store, reported: 1 << 20, real: 256 << 10, applied: make(chan struct{})}
	c := h.coordinator(store, coordinator.Config{})
	// 40 KiB each as stored (twice): a full first transaction of about
	// 25 jobs, which the store refuses, and a second of one, which it
	// takes.
	payload := json.RawMessage(`"` + strings.Repeat("x", 20<<10) + `"`)
	ps := make([]coordinator.EnqueueParams, 0, 30)
	for {
		ps = append(ps, coordinator.EnqueueParams{Kind: "k", Payload: payload})
		if len(ps)*42<<10 > 1<<20 {
			break
		}
	}
	_, err := c.EnqueueBatch(h.ctx(), ps)
	written := h.counts()[coordinator.StateAvailable]
	if written == 0 || written == len(ps) {
		t.Fatalf("%d of %d jobs written (error %v): want some, the store refusing one transaction and taking another", written, len(ps), err)
	}
	if err == nil {
		t.Fatalf("enqueue of a batch whose first transaction the store refused: no error")
	}
	if errors.Is(err, kv.ErrTxnTooLarge) || errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("enqueue of a batch of which %d of %d jobs were written: %v, an error that says nothing was", written, len(ps), err)
	}
	if !strings.Contains(err.Error(), "may have been") {
		t.Errorf("error of a batch written in part: %q, want it to say that jobs may have been written", err)
	}
}
