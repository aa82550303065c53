package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
)

type resize struct {
	Path  string `json:"path"`
	Width int    `json:"width"`
}

// An embedded queue: a Pebble directory, the state machine over it, and a
// worker with one typed handler. The store is closed after the worker is
// stopped (deferred first, it runs last).
func Example() {
	dir, _ := os.MkdirTemp("", "leasehold-example")
	defer os.RemoveAll(dir)
	store, err := localstore.Open(dir, localstore.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	coord, _ := coordinator.New(store, coordinator.Config{Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()

	// Maintain: without a maintaining worker, retried and snoozed jobs
	// would never become available again.
	w, _ := worker.New(coord, worker.Config{Concurrency: 4, Maintain: true})
	w.Handle("resize", worker.Typed(func(ctx context.Context, j *worker.Job, args resize) error {
		// j.Token fences side effects; j.IdempotencyKey() is stable per attempt.
		return j.SetResult(fmt.Sprintf("%s at %dpx", args.Path, args.Width))
	}))
	// Start re-queues what a previous process left running on this
	// directory (embedded mode: its leases ended with it).
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer func() {
		// Start's ctx does not stop the worker: Stop does, draining
		// running handlers until its ctx ends, so give it a deadline.
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()

	res, _ := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "resize", Payload: []byte(`{"path":"a.png","width":640}`)})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	j, _ := coord.Wait(wctx, res.Job.ID)
	fmt.Println(j.State, string(j.Result))
	// Output: completed "a.png at 640px"
}

// A handler decides what happens next by what it returns.
func ExampleJobSnooze() {
	h := func(ctx context.Context, j *worker.Job) error {
		if !ready() {
			return worker.JobSnooze(30 * time.Second) // again later; no attempt used
		}
		return nil
	}
	_ = h
	fmt.Println("ok")
	// Output: ok
}

func ready() bool { return true }
