package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/localstore"
)

func openExample() (*coordinator.Coordinator, func()) {
	dir, _ := os.MkdirTemp("", "leasehold-coordinator-example")
	store, err := localstore.Open(dir, localstore.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	c, _ := coordinator.New(store, coordinator.Config{Logger: slog.New(slog.DiscardHandler)})
	return c, func() { _ = store.Close(); _ = os.RemoveAll(dir) }
}

// A paused queue is not claimed from, by any daemon, until it is resumed;
// the pause is stored, so it survives restarts.
func ExampleCoordinator_PauseQueue() {
	c, done := openExample()
	defer done()
	ctx := context.Background()
	sess, _ := c.NewSession(ctx, coordinator.SessionConfig{TTL: 10 * time.Second, Worker: coordinator.WorkerInfo{ID: coordinator.NewWorkerID()}})
	defer sess.Close(ctx)

	_, _, _ = c.PauseQueue(ctx, "mail")
	_, _ = c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "send", Queue: "mail"})
	runs, st, _ := c.Claim(ctx, sess, "mail", 10, false)
	fmt.Println("paused:", len(runs), "claimed, held:", st.Held)

	_, _, _ = c.ResumeQueue(ctx, "mail")
	runs, _, _ = c.Claim(ctx, sess, "mail", 10, false)
	fmt.Println("resumed:", len(runs), "claimed")
	// Output:
	// paused: 0 claimed, held: true
	// resumed: 1 claimed
}

// A global limit: at most N jobs of the queue run at once across all
// daemons; each run holds a slot on its daemon's lease.
func ExampleCoordinator_SetQueueLimit() {
	c, done := openExample()
	defer done()
	ctx := context.Background()
	sess, _ := c.NewSession(ctx, coordinator.SessionConfig{TTL: 10 * time.Second, Worker: coordinator.WorkerInfo{ID: coordinator.NewWorkerID()}})
	defer sess.Close(ctx)
	for range 5 {
		_, _ = c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "call-partner", Queue: "partner"})
	}
	_, _, _ = c.SetQueueLimit(ctx, "partner", 2)
	runs, _, _ := c.Claim(ctx, sess, "partner", 5, false)
	fmt.Println("claimed", len(runs))
	_ = runs[0].Complete(ctx, nil) // frees its slot
	more, _, _ := c.Claim(ctx, sess, "partner", 5, false)
	fmt.Println("then", len(more))
	// Output:
	// claimed 2
	// then 1
}

// Unique by arguments within a period: racing enqueues from any daemon
// insert one job; the others get it back.
func ExampleUniqueOpts() {
	c, done := openExample()
	defer done()
	ctx := context.Background()
	p := coordinator.EnqueueParams{
		Kind:    "report",
		Payload: json.RawMessage(`{"account":42}`),
		Unique:  &coordinator.UniqueOpts{ByArgs: true, ByPeriod: 24 * time.Hour},
	}
	first, _ := c.Enqueue(ctx, p)
	p.Payload = json.RawMessage(`{ "account": 42 }`) // the same JSON value
	second, _ := c.Enqueue(ctx, p)
	fmt.Println(first.Existed, second.Existed, second.Job.ID == first.Job.ID)
	// Output: false true true
}

// Retry a cancelled job, delete a finished one; other states get a clear
// ErrWrongState.
func ExampleCoordinator_Retry() {
	c, done := openExample()
	defer done()
	ctx := context.Background()
	res, _ := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k"})
	_, err := c.Retry(ctx, res.Job.ID)
	fmt.Println(errors.Is(err, coordinator.ErrWrongState))
	_, _ = c.Cancel(ctx, res.Job.ID)
	j, _ := c.Retry(ctx, res.Job.ID)
	fmt.Println(j.State)
	_, err = c.Delete(ctx, res.Job.ID)
	fmt.Println(strings.ReplaceAll(err.Error(), res.Job.ID, "ID"))
	// Output:
	// true
	// available
	// coordinator: job is in the wrong state: job ID is available: only finished jobs (completed, discarded, cancelled) can be deleted; cancel it first
}

// Cron specs: five fields, six with seconds, descriptors, @every, and an
// optional time zone (UTC by default).
func ExampleParseSchedule() {
	from := time.Date(2030, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, spec := range []string{"0 3 * * *", "@every 90s", "@weekly", "CRON_TZ=Asia/Tokyo 0 9 * * 1-5"} {
		s, _ := coordinator.ParseSchedule(spec)
		fmt.Println(s.Next(from).UTC().Format(time.RFC3339))
	}
	_, err := coordinator.ParseSchedule("0 3 * *")
	fmt.Println(errors.Is(err, coordinator.ErrInvalid))
	// Output:
	// 2030-01-03T03:00:00Z
	// 2030-01-02T15:05:35Z
	// 2030-01-06T00:00:00Z
	// 2030-01-03T00:00:00Z
	// true
}

// A gauge or an overview that needs the jobs by state, by queue and by
// daemon reads each index once with RecentTally, not once per method.
func ExampleCoordinator_RecentTally() {
	c, done := openExample()
	defer done()
	ctx := context.Background()
	sess, _ := c.NewSession(ctx, coordinator.SessionConfig{TTL: 10 * time.Second, Worker: coordinator.WorkerInfo{ID: "w1"}})
	defer sess.Close(ctx)

	for _, q := range []string{"mail", "mail", "pdf"} {
		_, _ = c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k", Queue: q})
	}
	_, _, _ = c.Claim(ctx, sess, "pdf", 1, false)
	t, _ := c.RecentTally(ctx, coordinator.TallyParams{Owners: []string{"w1"}, JobsPerOwner: 10})
	fmt.Println("available:", t.Counts[coordinator.StateAvailable], t.AvailableByQueue)
	fmt.Println("running:", t.Counts[coordinator.StateRunning], t.RunningByQueue, "of w1:", t.Running.Count["w1"], t.Running.Jobs["w1"][0].Queue)
	// Output:
	// available: 2 map[mail:2]
	// running: 1 map[pdf:1] of w1: 1 pdf
}

// The queues the live daemons serve, read from their registrations alone
// (Workers also counts each daemon's running jobs).
func ExampleCoordinator_ServedQueues() {
	c, done := openExample()
	defer done()
	ctx := context.Background()
	s1, _ := c.NewSession(ctx, coordinator.SessionConfig{TTL: 10 * time.Second, Worker: coordinator.WorkerInfo{ID: "w2", Queues: []string{"default", "pdf"}}})
	defer s1.Close(ctx)
	s2, _ := c.NewSession(ctx, coordinator.SessionConfig{TTL: 10 * time.Second, Worker: coordinator.WorkerInfo{ID: "w1", Queues: []string{"default"}}})
	defer s2.Close(ctx)
	served, _ := c.ServedQueues(ctx)
	fmt.Println(served)
	// Output:
	// map[default:[w1 w2] pdf:[w2]]
}
