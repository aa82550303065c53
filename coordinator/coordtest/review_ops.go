package coordtest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
)

// Tests from a review of enqueue and the job operations (2026-12-03). Run
// adds them to the suite.
var opsReviewTests = []suiteTest{
	{"ScheduledJobOverStoreLimitRefused", testScheduledJobOverStoreLimit},
	{"RetryOfJobTooLargeToRunAgainRefused", testRetryTooLargeToRunAgain},
	{"ListRefusesBadKind", testListRefusesBadKind},
	{"CountsMissNoJobMovingDuringTheScan", testCountsMissNoMovingJob},
	{"RefusalsSayWhatToDo", testRefusalsSayWhatToDo},
	{"TextNotUTF8Refused", testTextNotUTF8Refused},
}

// testScheduledJobOverStoreLimit (ADR 0018): a scheduled job is written
// once at enqueue but twice when it falls due (its record, and the copy in
// its queue's index). One that fits once but not twice would be accepted
// and then only ever discarded by promotion: it is refused at enqueue as
// bad input, as the same job without a delay is, and nothing is written.
func testScheduledJobOverStoreLimit(t *testing.T, h *harness) {
	const limit = 256 << 10
	c := h.coordinator(&kvtest.Limit{Store: h.store, MaxBytes: limit}, coordinator.Config{})
	// Within the payload limit (56 KiB here); encoded as JSON, "<" takes
	// six bytes: about 180 KiB, which fits once but not twice.
	escaped := json.RawMessage(`"` + strings.Repeat("<", 30<<10) + `"`)
	later := h.clock.Now().Add(time.Hour)
	for name, ps := range map[string][]coordinator.EnqueueParams{
		"one":        {{Kind: "k", Payload: escaped, ScheduledAt: later}},
		"in a batch": {{Kind: "k"}, {Kind: "k", Payload: escaped, ScheduledAt: later}},
	} {
		_, err := c.EnqueueBatch(h.ctx(), ps)
		if !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("%s: enqueue of a scheduled job that cannot be made available in one request of the store: %v, want ErrInvalid", name, err)
		}
	}
	for st, n := range h.counts() {
		if n != 0 {
			t.Errorf("refused enqueues wrote %d %s jobs", n, st)
		}
	}
	// A scheduled job that fits twice is taken.
	ok := json.RawMessage(`"` + strings.Repeat("z", 50<<10) + `"`)
	if _, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", Payload: ok, ScheduledAt: later}); err != nil {
		t.Fatalf("enqueue of a scheduled job that fits: %v", err)
	}
}

// testRetryTooLargeToRunAgain (ADR 0018): a discarded job whose record grew
// (a checkpoint, a long error) past what fits twice in one request cannot
// be made available again. Retry says so as bad input, with what to do,
// instead of passing on the store's refusal of an oversized request; the
// job is left as it was.
func testRetryTooLargeToRunAgain(t *testing.T, h *harness) {
	const limit = 512 << 10
	c := h.coordinator(&kvtest.Limit{Store: h.store, MaxBytes: limit}, coordinator.Config{})
	r, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", Payload: json.RawMessage(`"` + strings.Repeat("x", 100<<10) + `"`)})
	if err != nil {
		t.Fatal(err)
	}
	s := h.session(c)
	run := h.claimOneFrom(c, s)
	// The checkpoint still fits twice; the discard's long error (a panic's
	// stack, say) is stored once, as a finished job is.
	if err := run.Checkpoint(h.ctx(), json.RawMessage(`"`+strings.Repeat("c", 140<<10)+`"`)); err != nil {
		t.Fatal(err)
	}
	if err := run.Fail(h.ctx(), errors.New(strings.Repeat("e", 40<<10)), coordinator.FailOpts{Discard: true}); err != nil {
		t.Fatal(err)
	}
	h.wantState(r.Job.ID, coordinator.StateDiscarded)
	_, err = c.Retry(h.ctx(), r.Job.ID)
	if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "too large to run again") {
		t.Fatalf("Retry of a job too large to run again: %v, want ErrInvalid saying it is too large to run again", err)
	}
	h.wantState(r.Job.ID, coordinator.StateDiscarded)
}

// testListRefusesBadKind: a kind filter that no job can have is bad input,
// as the HTTP API says (400), not an empty listing: a client on the store
// (shared mode: the CLI, package client) must answer as one over HTTP.
func testListRefusesBadKind(t *testing.T, h *harness) {
	h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	for _, st := range []coordinator.State{"", coordinator.StateAvailable, coordinator.StateCompleted} {
		page, err := h.c.List(h.ctx(), coordinator.ListParams{State: st, Kind: "no such/kind"})
		if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "kind") {
			t.Errorf("List state %q with a malformed kind: %d jobs, %v; want ErrInvalid naming the kind", st, len(page.Jobs), err)
		}
	}
}

// hookRangeStore runs hook once, before the first Range that starts at
// start.
type hookRangeStore struct {
	kv.Store
	start string
	once  sync.Once
	hook  func()
}

func (s *hookRangeStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if r.Start == s.start {
		s.once.Do(s.hook)
	}
	return s.Store.Range(ctx, r)
}

// testCountsMissNoMovingJob: Counts reads the state indexes one after the
// other. A job that moves from an index not read yet to one already read
// (a failed attempt: running to retryable) was counted nowhere, and with
// nothing else pending Counts said nothing was: jobs wait --all (which
// stops at zero pending) and bench's drain check ended early. A count that
// shows nothing pending must be one of a single moment.
func testCountsMissNoMovingJob(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	r := h.claimOne(h.session(h.c))
	// The attempt fails once the retryable jobs have been counted, before
	// the running ones are.
	hs := &hookRangeStore{Store: h.store, start: h.keysRoot() + "r/"}
	hs.hook = func() {
		if err := r.Fail(h.ctx(), errors.New("boom"), coordinator.FailOpts{}); err != nil {
			t.Errorf("Fail: %v", err)
		}
	}
	n, err := h.coordinator(hs, coordinator.Config{}).Counts(h.ctx())
	if err != nil {
		t.Fatal(err)
	}
	h.wantState(j.ID, coordinator.StateRetryable)
	pending := n[coordinator.StateScheduled] + n[coordinator.StateAvailable] + n[coordinator.StateRunning] + n[coordinator.StateRetryable]
	if pending == 0 {
		t.Fatalf("Counts = %v while job %s moved from running to retryable: nothing pending, yet it is", n, j.ID)
	}
}

// testRefusalsSayWhatToDo: a refused enqueue or cancel says what was wrong
// and what to do, with the right sentinel, whether the caller reaches the
// coordinator over HTTP or straight on the store (a client in shared mode
// gets these words as they are).
func testRefusalsSayWhatToDo(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	if err := h.claimOne(h.session(h.c)).Complete(h.ctx(), nil); err != nil {
		t.Fatal(err)
	}
	_, err := h.c.Cancel(h.ctx(), j.ID)
	if !errors.Is(err, coordinator.ErrWrongState) || !strings.Contains(err.Error(), "already completed: only unfinished jobs can be cancelled") {
		t.Errorf("Cancel of a completed job: %v", err)
	}
	big := json.RawMessage(`"` + strings.Repeat("x", h.c.MaxPayloadBytes()) + `"`)
	_, err = h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", Payload: big})
	if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "use a smaller payload") {
		t.Errorf("Enqueue of a payload over the limit: %v", err)
	}
	_, err = h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", Timeout: -time.Second})
	if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "0 for the worker's default") {
		t.Errorf("Enqueue with a negative timeout: %v", err)
	}
	_, err = h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", Unique: &coordinator.UniqueOpts{ByPeriod: -time.Hour}})
	if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "use a positive period") {
		t.Errorf("Enqueue with a negative unique period: %v", err)
	}
}

// testTextNotUTF8Refused: json.Valid takes invalid UTF-8 inside strings,
// and a payload or metadata stored so made the job's JSON unreadable to
// strict clients; both are refused, and nothing is written. So is half of
// a UTF-16 surrogate pair escaped alone ("\ud800"), which json.Valid
// takes too.
func testTextNotUTF8Refused(t *testing.T, h *harness) {
	bad := json.RawMessage("{\"a\":\"\xff\"}")
	for name, p := range map[string]coordinator.EnqueueParams{
		"payload":  {Kind: "k", Payload: bad},
		"metadata": {Kind: "k", Metadata: bad},
	} {
		if _, err := h.c.Enqueue(h.ctx(), p); !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("Enqueue with a %s that is not UTF-8: %v, want ErrInvalid saying so", name, err)
		}
	}
	// Nor is half of a surrogate pair escaped alone: json.Valid takes it,
	// and strict readers refuse it.
	lone := json.RawMessage(`{"a":"\ud800"}`)
	for name, p := range map[string]coordinator.EnqueueParams{
		"payload":  {Kind: "k", Payload: lone},
		"metadata": {Kind: "k", Metadata: lone},
	} {
		if _, err := h.c.Enqueue(h.ctx(), p); !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "surrogate") {
			t.Errorf("Enqueue with a %s holding a lone surrogate escape: %v, want ErrInvalid saying so", name, err)
		}
	}
	for st, n := range h.counts() {
		if n != 0 {
			t.Errorf("%d %s jobs written by refused enqueues", n, st)
		}
	}
	if _, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", Payload: json.RawMessage(`{"a":"\ud83d\ude00"}`)}); err != nil {
		t.Fatalf("Enqueue with a surrogate pair escaped: %v", err)
	}
}
