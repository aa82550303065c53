package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/worker"
)

// TestSharedNoSpaceQuietThenResumes: while etcd refuses writes for want of
// room (its NOSPACE alarm, which keeps renewing leases), a daemon says so
// once, and once per run whose outcome waits, rather than a line per
// refused claim and per retried outcome (about 400 lines a minute for a
// daemon of 4 slots, 2026-12-05); once an operator has made room and
// disarmed the alarm, the outcomes are recorded and the backlog runs, each
// job once, without a restart.
func TestSharedNoSpaceQuietThenResumes(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithQuota(4<<20))
	e := &sharedEnv{t: t, srv: srv, ns: "nospace"}
	e.c = e.coordinator(srv.Endpoint(), nil)
	cli := srv.Client(t)

	var mu sync.Mutex
	runs := map[string]int{}
	started := make(chan struct{}, 16)
	release := make(chan struct{})
	var logged testutil.SyncBuffer
	e.daemon(e.coordinator(srv.Endpoint(), nil), worker.Config{Concurrency: 2, Logger: slog.New(slog.NewTextHandler(&logged, nil))},
		map[string]worker.Handler{"k": func(ctx context.Context, j *worker.Job) error {
			mu.Lock()
			runs[j.ID]++
			mu.Unlock()
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := make([]coordinator.EnqueueParams, 4)
	for i := range ps {
		ps[i] = coordinator.EnqueueParams{Kind: "k"}
	}
	res, err := e.c.EnqueueBatch(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("two jobs did not start")
		}
	}

	// Fill the backend quota outside the namespace until etcd raises its
	// NOSPACE alarm; then the two handlers return.
	etcdtest.FillQuota(ctx, t, cli)
	close(release)
	// Wait for both outcomes to be refused, then watch for more lines: a
	// flood (a claim every second, each outcome's retries) shows in 3 s.
	count := func(out, msg string) int { return strings.Count(out, "msg=\""+msg) }
	for deadline := time.Now().Add(30 * time.Second); count(logged.String(), "recording outcome waits for room in the store") < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("two outcomes not refused for want of room within 30 s:\n%s", logged.String())
		}
	}
	time.Sleep(3 * time.Second)
	out := logged.String()
	if n := count(out, "the store is out of space"); n != 1 {
		t.Errorf("the store's want of room logged %d times, want once:\n%s", n, out)
	}
	if n := count(out, "recording outcome waits for room in the store"); n != 2 {
		t.Errorf("%d lines for the two outcomes waiting for room, want one each:\n%s", n, out)
	}
	if n := count(out, "claim failed") + count(out, "recording outcome failed; retrying"); n > 0 {
		t.Errorf("%d lines for claims and outcome retries refused for want of room, want none (said once):\n%s", n, out)
	}
	mu.Lock()
	if len(runs) != 2 {
		t.Errorf("%d jobs started under NOSPACE, want the 2 started before", len(runs))
	}
	mu.Unlock()

	// The operator makes room: deletes, compacts, defragments, disarms.
	etcdtest.MakeRoom(ctx, t, cli, srv.Endpoint())
	for _, r := range res {
		if j := e.wait(r.Job.ID, 30*time.Second); j.State != coordinator.StateCompleted {
			t.Fatalf("job %s ended %s, want completed", j.ID, j.State)
		}
	}
	mu.Lock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("job %s ran %d times, want once (its daemon's lease never ended)", id, n)
		}
	}
	mu.Unlock()
	if n := strings.Count(logged.String(), "the store has room again"); n != 1 {
		t.Errorf("the room's return logged %d times, want once:\n%s", n, logged.String())
	}
}
