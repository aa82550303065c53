package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
)

// TestEmbeddedStartRequeuesJobsLeftRunning: a program that embeds
// leasehold and makes no Reap call of its own gets back, at its worker's
// Start, the job a previous process left running. The previous process
// is cut off as a crash would: its store closes under the running
// handler, so that nothing records the run's end. Without the re-queue
// at Start the job stayed running for ever, with nothing saying why.
func TestEmbeddedStartRequeuesJobsLeftRunning(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	open := func() (*localstore.Store, *coordinator.Coordinator) { return openEmbedded(t, dir) }

	s1, c1 := open()
	started := make(chan struct{})
	w1, err := worker.New(c1, worker.Config{AbandonGrace: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w1.Handle("k", func(ctx context.Context, _ *worker.Job) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	if err := w1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c1.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_ = w1.Stop(sctx) // its release and revoke find the store closed
	cancel()

	s2, c2 := open()
	defer func() { _ = s2.Close() }()
	if j, err := c2.Get(ctx, r.Job.ID); err != nil || j.State != coordinator.StateRunning {
		t.Fatalf("after the cut-off: %v, %v; want the job left running", j, err)
	}
	done := make(chan struct{})
	w2, err := worker.New(c2, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w2.Handle("k", func(context.Context, *worker.Job) error { close(done); return nil })
	if err := w2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = w2.Stop(sctx)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		j, _ := c2.Get(ctx, r.Job.ID)
		t.Fatalf("the job left running was not run again: state %s", j.State)
	}
}

// TestEmbeddedStartChecksClusterVersionBeforeRequeue: a program of a build
// too old for the namespace (a newer build raised its cluster version,
// docs/adr/0028) whose worker starts on an embedded store with a job left
// running is refused with ErrClusterVersion before it writes: the job
// stays as the newer build left it, and the store's revision does not
// move. Without the check in Start, its re-queue rewrote the job's record
// in this build's layout, and only the registration after it refused.
func TestEmbeddedStartChecksClusterVersionBeforeRequeue(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	open := func() (*localstore.Store, *coordinator.Coordinator) { return openEmbedded(t, dir) }

	// A job left running by a process that ended without a word, in a
	// namespace raised to cluster version 2 since.
	s1, c1 := open()
	r, err := c1.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	sess, err := c1.NewSession(sctx, coordinator.SessionConfig{Worker: coordinator.WorkerInfo{ID: "gone"}})
	if err != nil {
		t.Fatal(err)
	}
	if runs, _, err := c1.Claim(ctx, sess, coordinator.DefaultQueue, 1, false); err != nil || len(runs) != 1 {
		t.Fatalf("claim: %d runs, %v", len(runs), err)
	}
	if _, err := s1.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("/leasehold/default/cv/2", nil, 0)}}); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-sess.Done()

	s2, c2 := open() // its open drops the ownership key
	defer func() { _ = s2.Close() }()
	revision := func() int64 {
		t.Helper()
		rr, err := s2.Range(ctx, kv.RangeRequest{Start: "/"})
		if err != nil {
			t.Fatal(err)
		}
		return rr.Revision
	}
	before := revision()
	w, err := worker.New(c2, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(context.Context, *worker.Job) error { return nil })
	if err := w.Start(ctx); !errors.Is(err, coordinator.ErrClusterVersion) {
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_ = w.Stop(sctx)
			cancel()
		}
		t.Fatalf("Start: %v, want ErrClusterVersion", err)
	}
	if after := revision(); after != before {
		t.Errorf("the refused worker wrote: the store's revision went from %d to %d", before, after)
	}
	if j, err := c2.Get(ctx, r.Job.ID); err != nil || j.State != coordinator.StateRunning || j.Rescues != 0 {
		t.Fatalf("the job left running: %+v, %v; want it running still, not re-queued", j, err)
	}
}

// openEmbedded opens the Pebble store in dir and a coordinator over it,
// as a program that embeds leasehold does at each start.
func openEmbedded(t *testing.T, dir string) (*localstore.Store, *coordinator.Coordinator) {
	t.Helper()
	s, err := localstore.Open(dir, localstore.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.New(s, coordinator.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}
