package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/localstore"
)

// A daemon whose build cannot run at the cluster version its namespace
// runs at (a newer build raised it, docs/adr/0028) refuses to start with
// one line saying so, and writes nothing: not even the re-queueing of the
// jobs left running, which would use a layout it does not know.
func TestDaemonRefusesANewerClusterVersion(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	revision := func() int64 {
		t.Helper()
		s, err := localstore.Open(dir, localstore.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		rr, err := s.Range(context.Background(), kv.RangeRequest{Start: "/"})
		if err != nil {
			t.Fatal(err)
		}
		return rr.Revision
	}
	s, err := localstore.Open(dir, localstore.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// A job left running by a daemon that stopped without a word.
	ctx, cancel := context.WithCancel(context.Background())
	c, err := coordinator.New(s, coordinator.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	sess, err := c.NewSession(ctx, coordinator.SessionConfig{Worker: coordinator.WorkerInfo{ID: "gone"}})
	if err != nil {
		t.Fatal(err)
	}
	if runs, _, err := c.Claim(ctx, sess, coordinator.DefaultQueue, 1, false); err != nil || len(runs) != 1 {
		t.Fatalf("claim: %d runs, %v", len(runs), err)
	}
	cancel()
	<-sess.Done()
	// A newer build raised the namespace's version since.
	if _, err := s.Txn(context.Background(), kv.Txn{Then: []kv.Op{kv.Put("/leasehold/default/cv/2", nil, 0)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := revision()
	r := runCLI(t, nil, "", "daemon", "--data", dir, "--listen", "127.0.0.1:0", "--log-level", "error")
	checkOneLineError(t, "daemon in a namespace at cluster version 2", r, 1, "namespace default runs at cluster version 2, and this build of leasehold at 1 at most: upgrade it")
	if after := revision(); after != before {
		t.Errorf("the refused daemon wrote: the store's revision went from %d to %d", before, after)
	}
}
