package coordtest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// Tests from a review of maintenance pacing (2026-12-06). Run adds them to
// the suite.
var purgePaceReviewTests = []suiteTest{
	{"PurgeBacklogHoldsNoPromotion", testPurgeBacklogHoldsNoPromotion},
}

// purgeReads hands each read of the finished index to the test, which
// lets it go on (by receiving from the read's channel) when it is done
// looking: the test sees the store between two slices of a purge.
type purgeReads struct {
	kv.Store
	finished string
	reads    chan purgeRead
}

type purgeRead struct {
	start string
	goOn  chan struct{}
}

func (s *purgeReads) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if strings.HasPrefix(r.Start, s.finished) {
		pr := purgeRead{start: r.Start, goOn: make(chan struct{})}
		select {
		case s.reads <- pr:
		case <-ctx.Done():
			return kv.RangeResult{}, ctx.Err()
		}
		select {
		case <-pr.goOn:
		case <-ctx.Done():
			return kv.RangeResult{}, ctx.Err()
		}
	}
	return s.Store.Range(ctx, r)
}

// testPurgeBacklogHoldsNoPromotion: a purge of a backlog of finished jobs
// past retention (a lowered --retention, a daemon down for days) deletes
// them a batch at a time between promotion passes: a job that falls due
// while it runs is promoted before the purge's next batch, not once the
// whole backlog is gone (minutes, for hundreds of thousands of jobs). Each
// batch reads on from where the one before ended, not from the index's
// start again (over the entries just deleted); the purge still deletes
// every job past retention, and the next one reads from the start.
func testPurgeBacklogHoldsNoPromotion(t *testing.T, h *harness) {
	const backlog = 2500 // three batches of maintainBatch
	for i := 0; i < backlog; i += 500 {
		ps := make([]coordinator.EnqueueParams, 500)
		for k := range ps {
			ps[k] = coordinator.EnqueueParams{Kind: "old"}
		}
		if _, err := h.c.EnqueueBatch(h.ctx(), ps); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.c.CancelMany(h.ctx(), coordinator.CancelFilter{Kind: "old"}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(2 * time.Hour)
	t0 := h.clock.Now()
	clk := newTimedClock(t0)
	store := &purgeReads{Store: h.store, finished: h.keysRoot() + "f/", reads: make(chan purgeRead)}
	c, err := coordinator.New(store, coordinator.Config{Namespace: h.ns, Clock: clk, Retention: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	due, err := c.Enqueue(h.ctx(), coordinator.EnqueueParams{Kind: "k", ScheduledAt: t0.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.RunMaintenance(ctx, coordinator.MaintainConfig{MaxWait: time.Minute, PurgeEvery: time.Minute}); err != ctx.Err() {
			t.Errorf("RunMaintenance returned %v", err)
		}
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()
	read := func(what string) purgeRead {
		t.Helper()
		select {
		case r := <-store.reads:
			return r
		case <-h.ctx().Done():
			t.Fatalf("%s: no read of the finished index", what)
		}
		return purgeRead{}
	}
	first := read("the purge's first batch")
	if first.start != store.finished {
		t.Fatalf("the purge's first batch read from %q; want the index's start", first.start)
	}
	// The scheduled job falls due while the first batch is deleted.
	clk.Advance(2 * time.Second)
	close(first.goOn)
	second := read("the purge's second batch")
	if got := h.get(due.Job.ID); got.State != coordinator.StateAvailable {
		t.Errorf("when the purge read its second batch, the job due since its first was %s; want available (promoted between batches)", got.State)
	}
	if second.start <= first.start {
		t.Errorf("the purge's second batch read from %q again; want past the first batch", second.start)
	}
	close(second.goOn)
	third := read("the purge's last batch")
	for len(clk.set) > 0 { // the sleeps set so far
		<-clk.set
	}
	close(third.goOn)
	<-clk.set // the purge ended: the loop sleeps (MaxWait)
	if n := h.counts(); n[coordinator.StateCancelled] != 0 || n[coordinator.StateAvailable] != 1 {
		t.Fatalf("counts after the purge %v; want the promoted job alone", n)
	}
	// A minute later the next purge reads from the index's start.
	clk.Advance(time.Minute)
	r := read("the next purge")
	close(r.goOn)
	if r.start != store.finished {
		t.Errorf("the next purge read from %q; want the index's start", r.start)
	}
}
