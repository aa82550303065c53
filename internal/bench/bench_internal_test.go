package bench

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/worker"
)

// TestInsertTenthsWholeCalls: the insert phase knows only when each call
// of InsertBatch jobs returned, so its first and last tenth rates are over
// whole calls. At an even pace of one job per microsecond both are that
// pace, whatever N (a tenth of 2,000 jobs is a fifth of one call).
func TestInsertTenthsWholeCalls(t *testing.T) {
	const want = 1e6 // jobs/s
	for _, n := range []int{15, 2000, 2500, 15000, 20000} {
		var at []time.Duration
		for done := 0; done < n; {
			done = min(done+InsertBatch, n)
			at = append(at, time.Duration(done)*time.Microsecond)
		}
		elapsed := at[len(at)-1]
		first, last := insertTenths(n, elapsed, at)
		if first != want || last != want {
			t.Errorf("n=%d: first/last tenth %v/%v jobs/s, want %v for both", n, first, last, float64(want))
		}
	}
}

// TestLatencyRerunKeepsFirst: a latency job run twice (its first outcome
// lost) is counted once, with its first run's latency.
func TestLatencyRerunKeepsFirst(t *testing.T) {
	h := newHandlers(0, 1)
	h.latEnqueued[0].Store(int64(time.Since(h.base)))
	j := &worker.Job{Job: coordinator.Job{Kind: kindLatency, Payload: json.RawMessage(payload(time.Now(), 0))}}
	if err := h.latency(t.Context(), j); err != nil {
		t.Fatal(err)
	}
	first := h.latLatency[0].Load()
	// The second run computes a different latency, whatever the clock.
	h.latEnqueued[0].Add(-int64(time.Hour))
	if err := h.latency(t.Context(), j); err != nil {
		t.Fatal(err)
	}
	if got := h.latLatency[0].Load(); got != first {
		t.Errorf("latency after a second run %v, want the first run's %v", time.Duration(got), time.Duration(first))
	}
	if got := h.latStarted.Load(); got != 1 {
		t.Errorf("latency jobs counted %d, want 1", got)
	}
}
