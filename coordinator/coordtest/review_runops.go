package coordtest

import (
	"errors"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
)

// Tests from a review of the operations on a running job from outside:
// cancel requests, retry and delete, and reading the job while it runs
// (2026-12-06). Run adds them to the suite.
var runOpsReviewTests = []suiteTest{
	{"LateCancelRequestSparesALaterRun", testLateCancelRequest},
}

// testLateCancelRequest (ADR 0053): a cancel request whose reply was lost
// may still land (etcd: a request that waited on a hung member), after the
// run it was made during ended and an operator ran the job again (jobs
// retry). It was conditional only on the job running, so it became a
// request of the new run, which its daemon stopped and recorded
// cancelled: the job the operator had just retried ended cancelled by a
// request older than the retry. A request is for the run it was made
// during (the worker already ignores one older than its run): one that
// lands in another run is refused. Both the cancel of one job and a bulk
// cancel's request are checked.
func testLateCancelRequest(t *testing.T, h *harness) {
	ls := &lateStore{Store: h.store}
	c := h.coordinator(ls, coordinator.Config{})
	s := h.session(h.c)
	for _, tc := range []struct {
		name   string
		cancel func(id string) error
	}{
		{"cancel", func(id string) error {
			_, err := c.Cancel(h.ctx(), id)
			return err
		}},
		{"bulk cancel", func(string) error {
			_, err := c.CancelMany(h.ctx(), coordinator.CancelFilter{State: coordinator.StateRunning})
			return err
		}},
	} {
		name := tc.name
		j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
		first := h.claimOne(s)
		// The request for the first run: its reply is lost, and it is
		// held on its way to the store.
		ls.hold.Store(1)
		if err := tc.cancel(j.ID); !errors.Is(err, errReplyLost) {
			t.Fatalf("%s: %v, want its reply lost", name, err)
		}
		// The first run ends (its attempt fails for good), and an
		// operator runs the job again.
		if err := first.Fail(h.ctx(), errors.New("boom"), coordinator.FailOpts{Discard: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.c.Retry(h.ctx(), j.ID); err != nil {
			t.Fatal(err)
		}
		second := h.claimOne(s)
		// Now the first run's request lands.
		ls.land(t, h.ctx())
		if got := h.get(j.ID); got.CancelRequested {
			t.Errorf("%s: a cancel request made during the first run, landed during the second, is the second's: job %s shows a pending cancel", name, j.ID)
		}
		// The second run's attempt fails with attempts left: the job
		// runs again, as nothing cancelled it since the retry.
		if err := second.Fail(h.ctx(), errors.New("again"), coordinator.FailOpts{}); err != nil {
			t.Fatal(err)
		}
		if got := h.get(j.ID); got.State != coordinator.StateRetryable {
			t.Errorf("%s: the retried job's failed attempt left it %s, want retryable: a cancel request made before the retry cancelled it", name, got.State)
		}
		// It is done with: the next case's bulk cancel sees no job of
		// this one.
		if _, err := h.c.Cancel(h.ctx(), j.ID); err != nil && !errors.Is(err, coordinator.ErrWrongState) {
			t.Fatal(err)
		}
	}
}
