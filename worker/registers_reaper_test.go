package worker_test

import (
	"context"
	"testing"

	"github.com/leasehold/leasehold/worker"
)

// TestRegistrationSaysWhetherTheWorkerReaps: a death's reap is ranked
// among the registrations that say their worker reaps (ADR 0062). A worker
// with Reap that did not say so would never be ranked (every death reaped
// by every such daemon at once); one without Reap that did would be ranked
// first for some deaths and leave them to the backups or the periodic
// scan.
func TestRegistrationSaysWhetherTheWorkerReaps(t *testing.T) {
	e := newEnv(t, nil)
	hs := map[string]worker.Handler{"k": func(context.Context, *worker.Job) error { return nil }}
	reaps := e.worker(worker.Config{Reap: true}, hs)
	other := e.worker(worker.Config{}, hs)
	ws, err := e.c.Workers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{reaps.Session().WorkerID(): true, other.Session().WorkerID(): false}
	for _, w := range ws {
		if r, ok := want[w.ID]; ok && w.Reaps != r {
			t.Errorf("worker %s (Reap %v) registered reaps %v", w.ID, r, w.Reaps)
		}
		delete(want, w.ID)
	}
	if len(want) > 0 {
		t.Fatalf("workers %v not registered", want)
	}
}
