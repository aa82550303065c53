package coordinator_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/fence"
)

// An outcome that etcd refused for want of room (its NOSPACE alarm) was not
// applied: when the session then ends, the run is lost (fence.ErrLeaseLost),
// not left with an outcome "unknown, an earlier attempt's reply was lost".
func TestOutcomeRefusedForNoSpaceIsNotUncertain(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithQuota(4<<20))
	cli := srv.Client(t)
	store := etcdkv.New(cli, etcdkv.Options{})
	t.Cleanup(func() { _ = store.Close() })
	c, err := coordinator.New(store, coordinator.Config{Namespace: "nospace", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.NewSession(ctx, coordinator.SessionConfig{TTL: 30 * time.Second, Worker: coordinator.WorkerInfo{ID: coordinator.NewWorkerID()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	if _, err := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	runs, _, err := c.Claim(ctx, s, coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 {
		t.Fatalf("claim: %d runs, %v", len(runs), err)
	}
	r := runs[0]

	// Fill the backend quota outside the namespace until etcd raises its
	// NOSPACE alarm.
	etcdtest.FillQuota(ctx, t, cli)
	if err := r.Complete(ctx, nil); !errors.Is(err, kv.ErrNoSpace) {
		t.Fatalf("complete under NOSPACE: %v, want kv.ErrNoSpace", err)
	}
	// The session ends (its lease revoked: etcd takes that under NOSPACE).
	if err := store.Revoke(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Ctx().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session lives on 10 s after its lease was revoked")
	}
	err = r.Complete(ctx, nil)
	if errors.Is(err, coordinator.ErrUnknownOutcome) || !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("complete after the session ended: %v, want fence.ErrLeaseLost (the refused write was not applied), not an unknown outcome", err)
	}
}
