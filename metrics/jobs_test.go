package metrics

import (
	"context"
	"log/slog"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/coordtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// finishedReads counts the ranges read from the finished index of
// namespace ns (key layout: /leasehold/NS/f/ID).
type finishedReads struct {
	kv.Store
	prefix string
	n      atomic.Int64
}

func (s *finishedReads) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if strings.HasPrefix(r.Start, s.prefix) {
		s.n.Add(1)
	}
	return s.Store.Range(ctx, r)
}

// A scrape within 1 s of the last count of the finished jobs does not read
// the finished index again, and leasehold_jobs_finished_age_seconds says
// how old that count is; the unfinished states are read at every scrape;
// a scrape 1 s after the count counts the finished jobs again.
func TestFinishedCountsReadOncePerInterval(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	var reads *finishedReads
	clock := coordtest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	coord := testCoordinatorWith(t, coordinator.Config{Namespace: "gauges", Clock: clock}, func(s kv.Store) kv.Store {
		reads = &finishedReads{Store: s, prefix: "/leasehold/gauges/f/"}
		return reads
	})
	ctx := context.Background()
	enqueue := func() string {
		t.Helper()
		res, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k"})
		if err != nil {
			t.Fatal(err)
		}
		return res.Job.ID
	}
	if _, err := coord.Cancel(ctx, enqueue()); err != nil {
		t.Fatal(err)
	}
	m, reg := newTest()
	m.RegisterJobs(coord, log)
	check := func(when string, wantJobs map[string]float64, wantAge float64, wantReads int64) {
		t.Helper()
		got := gatherValues(t, reg, "leasehold_jobs", "state")
		for st, n := range wantJobs {
			if got[st] != n {
				t.Errorf("%s: leasehold_jobs{state=%q} = %v, want %v", when, st, got[st], n)
			}
		}
		if got, want := gatherValues(t, reg, "leasehold_jobs_finished_age_seconds", ""), map[string]float64{"": wantAge}; !maps.Equal(got, want) {
			t.Errorf("%s: leasehold_jobs_finished_age_seconds %v, want %v", when, got, want)
		}
		if n := reads.n.Load(); n != wantReads {
			t.Errorf("%s: %d reads of the finished index in all, want %d", when, n, wantReads)
		}
	}
	check("first scrape", map[string]float64{"cancelled": 1, "available": 0}, 0, 1)
	if _, err := coord.Cancel(ctx, enqueue()); err != nil {
		t.Fatal(err)
	}
	enqueue()
	clock.Advance(500 * time.Millisecond)
	check("0.5 s later", map[string]float64{"cancelled": 1, "available": 1}, 0.5, 1)
	clock.Advance(500 * time.Millisecond)
	check("1 s later", map[string]float64{"cancelled": 2, "available": 1}, 0, 2)
}
