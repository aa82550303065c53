package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/worker"
)

// TestJobWakesOnlyItsQueue: a job that becomes available in one of many
// queues served makes the claim loop claim from that queue, not from every
// queue it found empty. Each wake-up voided every queue's emptiness: with
// 1,000 queues, every job cost a thousand claims.
func TestJobWakesOnlyItsQueue(t *testing.T) {
	e := newEnv(t, nil)
	const queues, jobs = 50, 30
	qs := make([]string, queues)
	for i := range qs {
		qs[i] = fmt.Sprintf("q%d", i)
	}
	var claims atomic.Int64
	e.worker(worker.Config{
		Queues:       qs,
		PollInterval: time.Hour, // only the watches wake the claim loop
		OnClaim:      func(string, int, coordinator.ClaimStats) { claims.Add(1) },
	}, map[string]worker.Handler{"k": func(context.Context, *worker.Job) error { return nil }})
	// The first job ends the start: every queue has been claimed from.
	e.wait(e.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: qs[0]}))
	before := claims.Load()
	for i := range jobs {
		// One at a time, each in a queue a claim found empty.
		j := e.wait(e.enqueue(coordinator.EnqueueParams{Kind: "k", Queue: qs[(i*7+1)%queues]}))
		if j.State != coordinator.StateCompleted {
			t.Fatalf("job %s is %s, want completed", j.ID, j.State)
		}
	}
	t.Logf("%d claims for %d jobs", claims.Load()-before, jobs)
	// A claim or two per job, and room for three rounds of every queue
	// (wake-ups for every queue, such as the queue watch's start); not a
	// round of every queue per job.
	if n := claims.Load() - before; n > 2*jobs+3*queues {
		t.Fatalf("%d claims for %d jobs, one at a time, in %d queues served: want at most %d", n, jobs, queues, 2*jobs+3*queues)
	}
}
