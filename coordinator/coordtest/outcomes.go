package coordtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
)

// Tests of how a run's outcome, the reaper and cancel requests meet, and of
// enqueues that the store cannot take in one transaction. Run adds them to
// the suite.
var outcomeTests = []suiteTest{
	{"CancelRequestOutranksRunAgain", testCancelOutranksRunAgain},
	{"ReapKeepsCancelRequestWrittenMeanwhile", testReapKeepsLateCancel},
	{"ReaperSeesDeathDuringItsPass", testReaperSeesDeathDuringPass},
	{"ReaperSeesDeathAfterItsPassRead", testReaperSeesDeathAfterPassRead},
	{"JobOverStoreLimitRefused", testJobOverStoreLimit},
	{"OversizedJobBlocksNoMaintenance", testOversizedJobBlocksNoMaintenance},
	{"DefaultPayloadLimitFitsTheStore", testDefaultPayloadLimitFits},
	{"RecordOverStoreLimitRefused", testRecordOverStoreLimit},
	{"CancelManyReportsStoreErrors", testCancelManyReportsStoreErrors},
	{"FailWithoutCause", testFailWithoutCause},
	{"FailingElectedWorkBacksOff", testFailingElectedWorkBacksOff},
	{"RunningCountedByQueue", testRunningByQueue},
	{"PromotionPassesOverUnreadableJobs", testPromotionPassesOverUnreadable},
}

// testCancelOutranksRunAgain: a cancel request acknowledged while the job
// runs is not dropped by an outcome that would run the job again (a failed
// attempt with attempts left, a snooze, a release): the job ends cancelled,
// as the request asked, and frees its unique key.
func testCancelOutranksRunAgain(t *testing.T, h *harness) {
	outcomes := map[string]func(r *coordinator.Run) error{
		"fail":     func(r *coordinator.Run) error { return r.Fail(h.ctx(), errors.New("boom"), coordinator.FailOpts{}) },
		"snooze":   func(r *coordinator.Run) error { return r.Snooze(h.ctx(), time.Minute) },
		"snooze-0": func(r *coordinator.Run) error { return r.Snooze(h.ctx(), 0) },
		"release":  func(r *coordinator.Run) error { return r.Release(h.ctx()) },
	}
	s := h.session(h.c)
	for name, outcome := range outcomes {
		key := "once-" + name
		j := h.enqueue(coordinator.EnqueueParams{Kind: "k", UniqueKey: key})
		r := h.claimOne(s)
		if r.Job().ID != j.ID {
			t.Fatalf("%s: claimed %s, want %s", name, r.Job().ID, j.ID)
		}
		if got, err := h.c.Cancel(h.ctx(), j.ID); err != nil || !got.CancelRequested {
			t.Fatalf("%s: Cancel running job: %+v, %v", name, got, err)
		}
		if err := outcome(r); err != nil {
			t.Fatalf("%s with a cancel request pending: %v", name, err)
		}
		got := h.get(j.ID)
		if got.State != coordinator.StateCancelled || got.FinalizedAt == nil || got.CancelRequested {
			t.Fatalf("%s with a cancel request pending: job is %s (finalized %v, cancel_requested %v); the acknowledged cancel was dropped",
				name, got.State, got.FinalizedAt, got.CancelRequested)
		}
		if got.Attempt != 1 {
			t.Errorf("%s: cancelled job's attempt = %d, want 1", name, got.Attempt)
		}
		if name == "fail" && (len(got.Errors) != 1 || got.Errors[0].Error != "boom") {
			t.Errorf("fail: cancelled job's errors = %+v, want the attempt's error", got.Errors)
		}
		if res, err := h.c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", UniqueKey: key}); err != nil || res.Existed {
			t.Fatalf("%s: unique key still held by the cancelled job: %+v, %v", name, res, err)
		}
		if runs, _, err := h.c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false); err != nil || len(runs) != 1 {
			t.Fatalf("%s: claim the new job: %d, %v", name, len(runs), err)
		} else if err := runs[0].Complete(h.ctx(), nil); err != nil {
			t.Fatal(err)
		}
	}
	// Without a request the outcome stands.
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	if err := h.claimOne(s).Fail(h.ctx(), errors.New("boom"), coordinator.FailOpts{}); err != nil {
		t.Fatal(err)
	}
	h.wantState(j.ID, coordinator.StateRetryable)
}

// testReapKeepsLateCancel: a cancel request written after the reaper read
// the job (and found none) is not deleted by the reaper's write: the job
// ends cancelled, not available to run again.
func testReapKeepsLateCancel(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	s := h.session(h.c)
	h.claimOne(s)
	// The reaper has read the job, its missing owner and no cancel request;
	// its write is held. A cancel request lands meanwhile.
	finish := h.heldReap(s)
	if got, err := h.c.Cancel(h.ctx(), j.ID); err != nil || !got.CancelRequested {
		t.Fatalf("Cancel: %+v, %v", got, err)
	}
	if n, err := finish(); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v; want 1", n, err)
	}
	if got := h.get(j.ID); got.State != coordinator.StateCancelled {
		t.Fatalf("job is %s after the reap, want cancelled: the reaper deleted a cancel request it had not read", got.State)
	}
}

// deathStore revokes a lease once, at a read that its at picks out, as if
// that daemon's lease expired at that moment: before the read when before
// is set, else once it has returned.
type deathStore struct {
	kv.Store
	at     func(r kv.RangeRequest) bool
	before bool
	once   sync.Once
	revoke func()
}

func (s *deathStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if s.before && s.at(r) {
		s.once.Do(s.revoke)
	}
	rr, err := s.Store.Range(ctx, r)
	if !s.before && err == nil && s.at(r) {
		s.once.Do(s.revoke)
	}
	return rr, err
}

// testReaperSeesDeathDuringPass: a daemon whose lease ends while the reaper
// starts (between its scan and the revision it watches from) has its jobs
// reaped at once, not at the next periodic scan.
func testReaperSeesDeathDuringPass(t *testing.T, h *harness) {
	workers := h.keysRoot() + "w/"
	reaperSeesDeath(t, h, &deathStore{before: true, at: func(r kv.RangeRequest) bool { return r.Start == workers }},
		"the job of a daemon that died as the reaper started was not reaped (it waits for the next periodic scan)")
}

// testReaperSeesDeathAfterPassRead (promise 7): a daemon whose lease ends
// after the reaper's pass read its ownership keys (the pass saw it alive,
// and reaps nothing of it), but before the reaper's watch starts, is seen
// by that watch: it starts from the revision read before the pass, not
// from the store's revision when it starts (the death would then wait for
// the next periodic scan, an hour here). Found by mutation (2026-12-05).
func testReaperSeesDeathAfterPassRead(t *testing.T, h *harness) {
	owners := h.keysRoot() + "o/"
	reaperSeesDeath(t, h, &deathStore{at: func(r kv.RangeRequest) bool { return r.Start == owners }},
		"the job of a daemon that died after the reaper's pass read its ownership key was not reaped: the watch began after the death")
}

// reaperSeesDeath runs a reaper over ds, which revokes the lease of a
// daemon that runs a job at the read ds picks out, and checks that the
// job is reaped without a periodic scan (an hour away on the test's
// clock); failure says what went wrong.
func reaperSeesDeath(t *testing.T, h *harness, ds *deathStore, failure string) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	victim := h.session(h.c)
	h.claimOne(victim)
	ds.Store = h.store
	ds.revoke = func() {
		if err := h.store.Revoke(h.ctx(), victim.Lease()); err != nil {
			t.Errorf("revoke: %v", err)
		}
	}
	reaped := make(chan string, 1)
	reaper := h.coordinator(ds, coordinator.Config{OnReap: func(j *coordinator.Job) { reaped <- j.ID }})
	ctx, cancel := context.WithCancel(h.ctx())
	stopped := make(chan error, 1)
	go func() { stopped <- reaper.RunReaper(ctx, nil, time.Hour, nil) }()
	select {
	case id := <-reaped:
		if id != j.ID {
			t.Errorf("reaped %s, want %s", id, j.ID)
		}
	case <-time.After(10 * time.Second):
		t.Error(failure)
	}
	cancel()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		t.Fatalf("RunReaper returned %v", err)
	}
	if !t.Failed() {
		h.wantState(j.ID, coordinator.StateAvailable)
	}
}

// testJobOverStoreLimit: a job within the payload limit that the store
// still cannot take in one transaction (an available job is written twice,
// as its record and in its queue's index; JSON escaping can grow a payload)
// is refused as bad input, and nothing is written.
func testJobOverStoreLimit(t *testing.T, h *harness) {
	const limit = 256 << 10
	c := h.coordinator(&kvtest.Limit{Store: h.store, MaxBytes: limit}, coordinator.Config{})
	if got := c.MaxPayloadBytes(); got != 56<<10 {
		t.Fatalf("default payload limit on a %d-byte store: %d, want 56 KiB", limit, got)
	}
	// Within the payload limit, but encoded as JSON "<" takes six bytes
	// ("\u003c").
	escaped := json.RawMessage(`"` + strings.Repeat("<", 30<<10) + `"`)
	for name, ps := range map[string][]coordinator.EnqueueParams{
		"one":            {{Kind: "k", Payload: escaped}},
		"in a batch":     {{Kind: "k"}, {Kind: "k", Payload: escaped}},
		"in a big batch": {{Kind: "k", Payload: json.RawMessage(`"` + strings.Repeat("y", 50<<10) + `"`)}, {Kind: "k", Payload: escaped}},
	} {
		if _, err := c.EnqueueBatch(h.ctx(), ps); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("%s: enqueue of a job over the store's %d-byte request limit: %v, want ErrInvalid", name, limit, err)
		}
	}
	for st, n := range h.counts() {
		if n != 0 {
			t.Errorf("refused enqueues wrote %d %s jobs", n, st)
		}
	}
	// What fits is taken, in as many transactions as it needs.
	ok := json.RawMessage(`"` + strings.Repeat("z", 50<<10) + `"`)
	res, err := c.EnqueueBatch(h.ctx(), []coordinator.EnqueueParams{{Kind: "k", Payload: ok}, {Kind: "k", Payload: ok}, {Kind: "k", Payload: ok}})
	if err != nil || len(res) != 3 {
		t.Fatalf("enqueue of jobs that fit: %d, %v", len(res), err)
	}
}

// testOversizedJobBlocksNoMaintenance: a job whose record grew (errors,
// checkpoint) past what the store takes when it is made available again
// (record and queue index entry, in one transaction) cannot run again:
// promotion and reaping discard it, saying why, and go on with the others.
func testOversizedJobBlocksNoMaintenance(t *testing.T, h *harness) {
	const limit = 512 << 10
	ls := &kvtest.Limit{Store: h.store, MaxBytes: limit}
	c := h.coordinator(ls, coordinator.Config{})
	// The records grow under a coordinator with a larger limit (as if the
	// store's limit were lowered since): c refuses such writes itself.
	grower := h.coordinator(&kvtest.Limit{Store: h.store, MaxBytes: 1 << 20}, coordinator.Config{})
	payload := json.RawMessage(`"` + strings.Repeat("x", 100<<10) + `"`)
	grow := json.RawMessage(`"` + strings.Repeat("c", 160<<10) + `"`)
	enqueue := func(p coordinator.EnqueueParams) *coordinator.Job {
		t.Helper()
		r, err := grower.Enqueue(h.ctx(), p)
		if err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		return r.Job
	}
	s := h.session(grower)
	claim := func(id string) *coordinator.Run {
		t.Helper()
		runs, _, err := grower.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
		if err != nil || len(runs) != 1 || runs[0].Job().ID != id {
			t.Fatalf("claim %s: %d runs, %v", id, len(runs), err)
		}
		return runs[0]
	}

	// Promotion: the big job is due first, a small one after it.
	big := enqueue(coordinator.EnqueueParams{Kind: "k", Payload: payload})
	r := claim(big.ID)
	if err := r.Checkpoint(h.ctx(), grow); err != nil {
		t.Fatal(err)
	}
	if err := r.Fail(h.ctx(), errors.New("boom"), coordinator.FailOpts{RetryAt: h.clock.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	small := enqueue(coordinator.EnqueueParams{Kind: "k", ScheduledAt: h.clock.Now().Add(2 * time.Minute)})
	h.clock.Advance(3 * time.Minute)
	if n, err := c.PromoteDue(h.ctx()); err != nil || n != 2 {
		t.Fatalf("PromoteDue = %d, %v; want the job that fits promoted and the other discarded", n, err)
	}
	h.wantState(small.ID, coordinator.StateAvailable)
	wantTooLarge(t, h.wantState(big.ID, coordinator.StateDiscarded))
	if err := claim(small.ID).Complete(h.ctx(), nil); err != nil {
		t.Fatal(err)
	}

	// Reaping: two jobs lose their daemon; the big one sorts first.
	big = enqueue(coordinator.EnqueueParams{Kind: "k", Payload: payload})
	small = enqueue(coordinator.EnqueueParams{Kind: "k"})
	lost := h.session(grower)
	for _, id := range []string{big.ID, small.ID} {
		runs, _, err := grower.Claim(h.ctx(), lost, coordinator.DefaultQueue, 1, false)
		if err != nil || len(runs) != 1 || runs[0].Job().ID != id {
			t.Fatalf("claim %s: %d runs, %v", id, len(runs), err)
		}
		if id == big.ID {
			if err := runs[0].Checkpoint(h.ctx(), grow); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := h.store.Revoke(h.ctx(), lost.Lease()); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Reap(h.ctx(), nil, nil); err != nil || n != 2 {
		t.Fatalf("Reap = %d, %v; want the job that fits reaped and the other discarded", n, err)
	}
	h.wantState(small.ID, coordinator.StateAvailable)
	wantTooLarge(t, h.wantState(big.ID, coordinator.StateDiscarded))
}

// wantTooLarge checks that j's last error says it was too large to run
// again.
func wantTooLarge(t *testing.T, j *coordinator.Job) {
	t.Helper()
	if len(j.Errors) == 0 || !strings.Contains(j.Errors[len(j.Errors)-1].Error, "too large to run again") {
		t.Fatalf("job %s is discarded with errors %v; want the last to say it was too large to run again", j.ID, len(j.Errors))
	}
}

// testDefaultPayloadLimitFits: on a store with etcd's default request limit
// the default payload limit is one a job can use: a job with the largest
// payload, metadata and unique key is enqueued, claimed, retried, made
// available again and completed. A larger limit is refused up front.
func testDefaultPayloadLimitFits(t *testing.T, h *harness) {
	ls := &kvtest.Limit{Store: h.store, MaxBytes: 3<<19 - 64<<10} // etcdkv's MaxBytes on a default member
	if lim := h.store.Limits().MaxBytes; lim > 0 && lim < ls.MaxBytes {
		ls.MaxBytes = lim
	}
	c := h.coordinator(ls, coordinator.Config{})
	limit := c.MaxPayloadBytes()
	if limit < 512<<10 || limit > 1<<20 {
		t.Fatalf("default payload limit on a %d-byte store: %d", ls.MaxBytes, limit)
	}
	if _, err := coordinator.New(ls, coordinator.Config{Namespace: h.ns, MaxPayloadBytes: 1 << 20}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("New with a 1 MiB payload limit on a %d-byte store: %v, want ErrInvalid", ls.MaxBytes, err)
	}
	p := coordinator.EnqueueParams{
		Kind:      "k",
		Payload:   json.RawMessage(`"` + strings.Repeat("x", limit-2) + `"`),
		Metadata:  json.RawMessage(`"` + strings.Repeat("m", 64<<10-2) + `"`),
		UniqueKey: strings.Repeat("u", 256),
	}
	res, err := c.Enqueue(h.ctx(), p)
	if err != nil {
		t.Fatalf("enqueue of the largest job: %v", err)
	}
	s := h.session(c)
	claim := func() *coordinator.Run {
		t.Helper()
		runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, 1, false)
		if err != nil || len(runs) != 1 || runs[0].Job().ID != res.Job.ID {
			t.Fatalf("claim the largest job: %d runs, %v", len(runs), err)
		}
		return runs[0]
	}
	if err := claim().Fail(h.ctx(), errors.New("once"), coordinator.FailOpts{RetryAt: h.clock.Now().Add(time.Second)}); err != nil {
		t.Fatalf("fail the largest job: %v", err)
	}
	h.clock.Advance(2 * time.Second)
	if n, err := c.PromoteDue(h.ctx()); err != nil || n != 1 {
		t.Fatalf("PromoteDue = %d, %v; want the largest job made available", n, err)
	}
	if err := claim().Snooze(h.ctx(), 0); err != nil {
		t.Fatalf("snooze the largest job: %v", err)
	}
	if err := claim().Release(h.ctx()); err != nil {
		t.Fatalf("release the largest job: %v", err)
	}
	if err := claim().Complete(h.ctx(), nil); err != nil {
		t.Fatalf("complete the largest job: %v", err)
	}
	h.wantState(res.Job.ID, coordinator.StateCompleted)
}

// testRecordOverStoreLimit: a checkpoint or result that would make the
// job's record more than the store takes in one request is refused with
// ErrInvalid before anything is written, and the run goes on: a checkpoint
// must leave room for the copy in the queue's index that a retry makes.
func testRecordOverStoreLimit(t *testing.T, h *harness) {
	ls := &kvtest.Limit{Store: h.store, MaxBytes: 512 << 10}
	c := h.coordinator(ls, coordinator.Config{})
	j, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", Payload: json.RawMessage(`"` + strings.Repeat("x", 100<<10) + `"`)})
	if err != nil {
		t.Fatal(err)
	}
	runs, _, err := c.Claim(h.ctx(), h.session(c), coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 {
		t.Fatalf("claim: %d runs, %v", len(runs), err)
	}
	r := runs[0]
	str := func(n int) json.RawMessage { return json.RawMessage(`"` + strings.Repeat("c", n) + `"`) }
	// 100 + 160 KiB fits once, not twice.
	if err := r.Checkpoint(h.ctx(), str(160<<10)); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("checkpoint that cannot be made available again: %v, want ErrInvalid", err)
	}
	if err := r.Checkpoint(h.ctx(), str(40<<10)); err != nil {
		t.Fatalf("checkpoint that fits: %v", err)
	}
	if err := r.Complete(h.ctx(), str(500<<10)); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("result over the store's limit: %v, want ErrInvalid", err)
	}
	if got := h.get(j.Job.ID); got.State != coordinator.StateRunning || len(got.Checkpoint) != 40<<10+2 {
		t.Fatalf("after the refused writes: %s with a %d-byte checkpoint; want running with the one that fit", got.State, len(got.Checkpoint))
	}
	// 100 + 40 + 200 KiB: a final record needs to fit once.
	if err := r.Complete(h.ctx(), str(200<<10)); err != nil {
		t.Fatalf("complete with a result that fits: %v", err)
	}
	h.wantState(j.Job.ID, coordinator.StateCompleted)
}

// testCancelManyReportsStoreErrors: a job that changed while CancelMany
// cancelled its page is cancelled on its own; a store error then is
// returned, not dropped with the job uncounted.
func testCancelManyReportsStoreErrors(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	gate := kvtest.NewGate(h.store)
	fs := &flakyStore{Store: gate}
	c := h.coordinator(fs, coordinator.Config{})
	gate.Arm()
	type result struct {
		res coordinator.CancelManyResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := c.CancelMany(h.ctx(), coordinator.CancelFilter{Kind: "k"})
		done <- result{res, err}
	}()
	<-gate.Held() // its cancel of the page is held; the job changes meanwhile
	if r := h.claimOne(h.session(h.c)); r.Job().ID != j.ID {
		gate.Open()
		t.Fatalf("claimed %s, want %s", r.Job().ID, j.ID)
	}
	fs.drop.Store(1) // its write for the changed job fails
	gate.Open()
	if r := <-done; !errors.Is(r.err, errReplyLost) {
		t.Fatalf("CancelMany with the store failing = %+v, %v; want the store's error", r.res, r.err)
	}
}

// testFailWithoutCause: Fail with a nil cause records a failed attempt.
func testFailWithoutCause(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	if err := h.claimOne(h.session(h.c)).Fail(h.ctx(), nil, coordinator.FailOpts{}); err != nil {
		t.Fatal(err)
	}
	if got := h.wantState(j.ID, coordinator.StateRetryable); len(got.Errors) != 1 || got.Errors[0].Error == "" {
		t.Fatalf("errors after Fail(nil) = %+v", got.Errors)
	}
}

// testFailingElectedWorkBacksOff: elected work that fails at once is run
// again after a pause on the coordinator's clock (1 s, then 2 s, ...), not
// in a tight loop of campaigns and resignations; after a run of 30 s or
// more the pauses start over at 1 s.
func testFailingElectedWorkBacksOff(t *testing.T, h *harness) {
	clk := NewClock(h.clock.Now()) // this coordinator's own: no other timers
	c, err := coordinator.New(h.store, coordinator.Config{Namespace: h.ns, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s := h.session(h.c)
	calls := make(chan struct{}, 16)
	block := make(chan struct{}, 1) // a run that waits for the test
	ctx, cancel := context.WithCancel(h.ctx())
	done := make(chan error, 1)
	go func() {
		done <- c.RunElected(ctx, "failing", func() *coordinator.Session { return s }, func(ctx context.Context) error {
			calls <- struct{}{}
			select {
			case <-block:
				<-block
			default:
			}
			return errors.New("boom")
		})
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("RunElected = %v, want context.Canceled", err)
		}
	}()
	// pause waits for the pause RunElected takes (its only timer), failing
	// if the work runs again first, and returns its length.
	pause := func() time.Duration {
		t.Helper()
		for {
			if d, ok := clk.NextTimer(); ok {
				if len(calls) != 0 {
					t.Fatal("failed elected work ran again without a pause")
				}
				return d
			}
			select {
			case <-calls:
				t.Fatal("failed elected work ran again at once, without a pause")
			case <-time.After(time.Millisecond):
			}
		}
	}
	<-calls
	for _, want := range []time.Duration{time.Second, 2 * time.Second} {
		if got := pause(); got != want {
			t.Fatalf("pause after a failed run: %s, want %s", got, want)
		}
		if want == 2*time.Second {
			block <- struct{}{} // the next run waits for the test
		}
		clk.Advance(want)
		<-calls
	}
	// The third run lasts 30 s of the clock, then fails: the pauses start over.
	clk.Advance(30 * time.Second)
	block <- struct{}{}
	if got := pause(); got != time.Second {
		t.Fatalf("pause after a failed run of 30 s: %s, want 1s", got)
	}
	clk.Advance(time.Second)
	<-calls // and again once the pause is over
}

// testRunningByQueue: running jobs are counted by queue from the running
// index, also an entry written by a daemon older than the queue in its
// value (owner alone): that one is counted from its record.
func testRunningByQueue(t *testing.T, h *harness) {
	s := h.session(h.c)
	var old string
	for q, n := range map[string]int{"a": 3, "b": 1} {
		for range n {
			h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: q})
		}
		runs, _, err := h.c.Claim(h.ctx(), s, q, n, false)
		if err != nil || len(runs) != n {
			t.Fatalf("claim %d of queue %s: %d, %v", n, q, len(runs), err)
		}
		old = runs[0].Job().ID
	}
	h.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: "c"}) // available, not running
	// As a daemon of before 2026-12 wrote it.
	key := h.keysRoot() + "r/" + old
	if _, err := h.store.Txn(h.ctx(), kv.Txn{Then: []kv.Op{kv.Put(key, []byte(s.WorkerID()), 0)}}); err != nil {
		t.Fatal(err)
	}
	got, err := h.c.RunningByQueue(h.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "map[a:3 b:1]" {
		t.Fatalf("RunningByQueue = %v, want map[a:3 b:1]", got)
	}
	// RecentTally counts the same from its one read of the index, and
	// by owner as RunningByOwner does, with the first jobs' records.
	tally, err := h.c.RecentTally(h.ctx(), coordinator.TallyParams{Owners: []string{s.WorkerID()}, JobsPerOwner: 2})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(tally.RunningByQueue) != "map[a:3 b:1]" || fmt.Sprint(tally.AvailableByQueue) != "map[c:1]" || tally.Counts[coordinator.StateRunning] != 4 {
		t.Fatalf("RecentTally: running by queue %v, available by queue %v, running %d; want map[a:3 b:1], map[c:1], 4", tally.RunningByQueue, tally.AvailableByQueue, tally.Counts[coordinator.StateRunning])
	}
	if n, jobs := tally.Running.Count[s.WorkerID()], tally.Running.Jobs[s.WorkerID()]; n != 4 || len(jobs) != 2 {
		t.Fatalf("RecentTally: %d running jobs of the daemon with %d records, want 4 with 2", n, len(jobs))
	}
}

// testPromotionPassesOverUnreadable: more due entries than one read takes
// whose records cannot be decoded are passed over, not read again and
// again: PromoteDue returns, and a job due after them is promoted.
func testPromotionPassesOverUnreadable(t *testing.T, h *harness) {
	const bad = 1001 // more than one read of due entries (1000)
	due := h.clock.Now().Add(-time.Hour).UnixNano()
	root := h.keysRoot()
	var ops []kv.Op
	for i := range bad {
		id := fmt.Sprintf("01ZZZZZZZZZZZZZZZZZZ%06d", i)
		ops = append(ops, kv.Put(fmt.Sprintf("%st/%020d/%s", root, due, id), []byte("scheduled"), 0), kv.Put(root+"j/"+id, []byte("not a job"), 0))
		if len(ops) >= 100 || i == bad-1 {
			if _, err := h.store.Txn(h.ctx(), kv.Txn{Then: ops}); err != nil {
				t.Fatal(err)
			}
			ops = nil
		}
	}
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k", ScheduledAt: h.clock.Now().Add(time.Minute)})
	h.clock.Advance(2 * time.Minute)
	if n, err := h.c.PromoteDue(h.ctx()); err != nil || n != 1 {
		t.Fatalf("PromoteDue = %d, %v; want the one readable job promoted", n, err)
	}
	h.wantState(j.ID, coordinator.StateAvailable)
}
