package coordtest

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
)

// Tests from a review of namespaces sharing one store (2026-12-06). Run
// adds them to the suite.
var namespaceReviewTests = []suiteTest{
	{"NamespacesSharingAPrefixStayApart", testNamespacesSharingAPrefixStayApart},
}

// testNamespacesSharingAPrefixStayApart: a namespace's keys are under
// /leasehold/NS/, and NS may not hold the separator, so that no namespace's
// key range holds another's: New refuses a namespace with a slash (with one,
// "NS/j" would put its whole key space inside NS's job records, and
// "NS/q" inside NS's available index), and each operation of a namespace
// whose name is a prefix of another's (NS and NS-b) reads, moves and
// deletes its own jobs only: list and counts, promotion, claims, a bulk
// cancel of everything, the reaper, the purge, the registrations.
func testNamespacesSharingAPrefixStayApart(t *testing.T, h *harness) {
	for _, ns := range []string{h.ns + "/j", h.ns + "/q", h.ns + "/", "/" + h.ns} {
		if _, err := coordinator.New(h.store, coordinator.Config{Namespace: ns}); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("New with namespace %q: %v, want ErrInvalid", ns, err)
		}
	}
	a := h.c
	b, err := coordinator.New(h.store, coordinator.Config{Namespace: h.ns + "-b", Clock: h.clock, Retention: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	get := func(c *coordinator.Coordinator, id string, want coordinator.State) {
		t.Helper()
		j, err := c.Get(h.ctx(), id)
		if err != nil || j.State != want {
			t.Fatalf("job %s of %s: %+v, %v; want it %s", id, c.Namespace(), j, err, want)
		}
	}
	enqueue := func(c *coordinator.Coordinator, p coordinator.EnqueueParams) string {
		t.Helper()
		r, err := c.Enqueue(h.ctx(), p)
		if err != nil {
			t.Fatal(err)
		}
		return r.Job.ID
	}

	// B: a job it completes (past retention below), one whose daemon
	// dies while running it, one due later, one available.
	done := enqueue(b, coordinator.EnqueueParams{Kind: "k"})
	sb := h.session(b)
	runs, _, err := b.Claim(h.ctx(), sb, coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 || runs[0].Job().ID != done {
		t.Fatalf("B's claim: %d runs, %v", len(runs), err)
	}
	if err := runs[0].Complete(h.ctx(), nil); err != nil {
		t.Fatal(err)
	}
	orphan := enqueue(b, coordinator.EnqueueParams{Kind: "k"})
	dying := h.session(b)
	if runs, _, err := b.Claim(h.ctx(), dying, coordinator.DefaultQueue, 1, false); err != nil || len(runs) != 1 || runs[0].Job().ID != orphan {
		t.Fatalf("B's second claim: %d runs, %v", len(runs), err)
	}
	if err := dying.Close(h.ctx()); err != nil {
		t.Fatal(err)
	}
	later := enqueue(b, coordinator.EnqueueParams{Kind: "k", ScheduledAt: h.clock.Now().Add(time.Minute)})
	avail := enqueue(b, coordinator.EnqueueParams{Kind: "k"})
	mine := enqueue(a, coordinator.EnqueueParams{Kind: "k"})
	h.clock.Advance(2 * time.Hour)

	page, err := a.List(h.ctx(), coordinator.ListParams{})
	if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != mine {
		t.Fatalf("A's list: %+v, %v; want its one job", page.Jobs, err)
	}
	if n := h.counts(); n[coordinator.StateAvailable] != 1 || n[coordinator.StateScheduled]+n[coordinator.StateRunning]+n[coordinator.StateCompleted] != 0 {
		t.Fatalf("A's counts: %v; want one available job", n)
	}
	if n, err := a.PromoteDue(h.ctx()); err != nil || n != 0 {
		t.Fatalf("A's promotion moved %d jobs (%v), want none", n, err)
	}
	get(b, later, coordinator.StateScheduled)
	if n, err := a.Reap(h.ctx(), nil, nil); err != nil || n != 0 {
		t.Fatalf("A's reaper moved %d jobs (%v), want none", n, err)
	}
	get(b, orphan, coordinator.StateRunning)
	if n, err := a.PurgeFinished(h.ctx()); err != nil || n != 0 {
		t.Fatalf("A's purge deleted %d jobs (%v), want none", n, err)
	}
	get(b, done, coordinator.StateCompleted)
	sa := h.session(a)
	if runs, _, err := a.Claim(h.ctx(), sa, coordinator.DefaultQueue, 10, false); err != nil || len(runs) != 1 || runs[0].Job().ID != mine {
		t.Fatalf("A's claim of up to 10 jobs: %d runs, %v; want its one job", len(runs), err)
	}
	if ws, err := a.Workers(h.ctx()); err != nil || len(ws) != 1 || ws[0].ID != sa.WorkerID() {
		t.Fatalf("A's workers: %+v, %v; want its one session", ws, err)
	}
	if res, err := a.CancelMany(h.ctx(), coordinator.CancelFilter{}); err != nil || res.Cancelled != 0 || res.CancelRequested != 1 {
		t.Fatalf("A's cancel of every job: %+v, %v; want a request for its running job only", res, err)
	}
	get(b, avail, coordinator.StateAvailable)

	// B's own operations still find its jobs.
	if n, err := b.PromoteDue(h.ctx()); err != nil || n != 1 {
		t.Fatalf("B's promotion moved %d jobs (%v), want 1", n, err)
	}
	if n, err := b.Reap(h.ctx(), nil, nil); err != nil || n != 1 {
		t.Fatalf("B's reaper moved %d jobs (%v), want 1", n, err)
	}
	if n, err := b.PurgeFinished(h.ctx()); err != nil || n != 1 {
		t.Fatalf("B's purge deleted %d jobs (%v), want 1", n, err)
	}
}
