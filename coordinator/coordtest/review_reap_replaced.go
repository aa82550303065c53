package coordtest

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
)

// Tests from a review of the reaper and orphan release (2026-12-06). Run
// adds them to the suite.
var reapReplacedReviewTests = []suiteTest{
	{"ReaperReapsAReplacedSessionsJobsWhenItsLeaseEnds", testReaperReplacedSession},
}

// testReaperReplacedSession (promise 7): a daemon whose session ended
// starts a new one under the same worker id; when the old lease is still
// alive then (its revoke failed: the store was out of reach), the new
// registration takes over the key, and the old lease's end deletes only
// the old session's ownership keys, no registration: no reaper's watch saw
// a daemon go, and its jobs stayed running with no owner until the next
// periodic scan. The reaper takes a registration that replaced a live one
// as a death to come: it scans again once the replaced lease's TTL has
// passed (here the periodic scan is an hour away).
func testReaperReplacedSession(t *testing.T, h *harness) {
	const ttl = 60 * time.Second
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	old := h.session(h.c)
	h.claimOne(old)
	woke := h.watchAvailable()
	clock := h.reaperOn(h.store, time.Hour)
	now := clock.Now()
	renewed, err := h.c.NewSession(h.ctx(), coordinator.SessionConfig{TTL: ttl, Worker: coordinator.WorkerInfo{ID: old.WorkerID()}})
	if err != nil {
		t.Fatalf("NewSession under the same worker id: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = renewed.Close(ctx)
	})
	var due time.Time
	select {
	case due = <-clock.timers:
	case <-time.After(failBound):
		t.Fatal("the reaper set no timer after a registration replaced a live one: the old lease's end would go unseen until the periodic scan")
	}
	if limit := now.Add(ttl + 2*time.Second); due.After(limit) {
		t.Fatalf("the reaper scans again at %s after the replacement, want within the TTL %s and a moment", due.Sub(now), ttl)
	}
	// The old lease ends (as it expires): its ownership key goes, the
	// registration, now the new session's, stays.
	if err := h.store.Revoke(h.ctx(), old.Lease()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(due.Sub(clock.Now()))
	h.awaitAvailable(woke, j.ID, "the reaper did not reap the replaced session's job once its lease had ended")
	if got := h.get(j.ID); got.Rescues != 1 {
		t.Fatalf("the job was rescued %d times, want 1", got.Rescues)
	}
}
