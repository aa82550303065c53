package worker_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/worker"
)

// TestIdleFinisherKeepsNoJob: once a run's outcome is recorded, the idle
// finisher that recorded it holds nothing of the run (its job, payload and
// result): a kept finisher held its last run until it exited, finisherIdle
// (10 s) later, or for as long as it served more runs.
func TestIdleFinisherKeepsNoJob(t *testing.T) {
	e := newEnv(t, nil)
	collected := make(chan struct{})
	e.worker(worker.Config{}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error {
			runtime.AddCleanup(j, func(ch chan struct{}) { close(ch) }, collected)
			return nil
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k"})
	if j := e.wait(id); j.State != coordinator.StateCompleted {
		t.Fatalf("job %s", j.State)
	}
	// Well within finisherIdle: the finisher is still there, idle.
	for range 50 {
		runtime.GC()
		select {
		case <-collected:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("the run's Job is still reachable after its outcome was recorded")
}
