package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/worker"
)

// reopen lets new requests through the gate while those it holds stay
// held (a connection that hangs beside healthy ones); release frees them.
func (g *gate) reopen() (release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	up := g.up
	g.up = nil
	return sync.OnceFunc(func() {
		if up != nil {
			close(up)
		}
	})
}

// TestJanitorDoesNotHoldUpANewSession: the claim loop's janitor (the
// release of orphaned claims, every ReapInterval) waits for the session's
// claims in flight and then scans its ownership keys. When the store holds
// that claim or that scan (an outage, a hung connection), the session ends
// on its deadline: the loop must replace it at once and go on claiming
// while the old request is still held. It used to wait for the held
// request first; and once the janitor no longer waited, the next
// session's claims waited for the held claim's read of the queue (claims
// of one queue read one at a time). No new session, or no job run, for as
// long as the store held the request.
func TestJanitorDoesNotHoldUpANewSession(t *testing.T) {
	for _, tc := range []struct {
		name string
		reap time.Duration
		wait bool // wake the loop once the janitor is due, with a claim held
	}{
		// Due at once: the janitor's scan is what the store holds.
		{"scan held", time.Millisecond, false},
		// Due later: a claim is held, and a wake-up finds the janitor
		// due with that claim in flight.
		{"claim held", time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOutageEnv(t)
			ran := make(chan string, 16)
			completed := make(chan struct{}, 1)
			cfg := o.config(worker.Config{OnOutcome: func(out worker.Outcome) {
				if out.Op == "complete" {
					signal(completed)
				}
			}})
			cfg.ReapInterval = tc.reap
			start := time.Now()
			w := o.worker(cfg, map[string]worker.Handler{"k": func(_ context.Context, j *worker.Job) error {
				ran <- j.ID
				return nil
			}})
			// A first job runs and completes: the availability watch is
			// set up (its first read must not be what the cut store
			// holds), and no outcome write is left to be held.
			first, err := o.raw.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			if id := <-ran; id != first.Job.ID {
				t.Fatalf("ran %s, want %s", id, first.Job.ID)
			}
			awaitSignal(t, completed, "the first job completed")
			o.cutWithClaimInFlight(t)
			if tc.wait {
				<-time.After(time.Until(start.Add(tc.reap)))
				if _, err := o.raw.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "k"}); err != nil {
					t.Fatal(err)
				}
			}
			o.logs.await(t, "session ended: running jobs were interrupted and fenced; starting a new session")
			release := o.st.data.reopen()
			defer release()
			o.st.lease.heal()
			o.logs.await(t, "new session started")
			r, err := o.raw.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			bound := time.After(outageBound)
			for id := ""; id != r.Job.ID; {
				select {
				case id = <-ran:
				case <-bound:
					t.Fatalf("job %s never ran under the new session while the old request was held", r.Job.ID)
				}
			}
			release()
			stopChecked(t, w)
		})
	}
}
