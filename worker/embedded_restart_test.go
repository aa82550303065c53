package worker_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
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
	open := func() (*localstore.Store, *coordinator.Coordinator) {
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
