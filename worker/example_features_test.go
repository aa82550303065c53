package worker_test

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
	"github.com/leasehold/leasehold/worker"
)

// openExample opens an embedded store and a quiet coordinator for an
// example (a worker's Start re-queues what a previous process left
// running); close releases them, after the example's workers are stopped.
func openExample(cfg coordinator.Config) (c *coordinator.Coordinator, close func()) {
	dir, _ := os.MkdirTemp("", "leasehold-example")
	store, err := localstore.Open(dir, localstore.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	c, err = coordinator.New(store, cfg)
	if err != nil {
		panic(err)
	}
	return c, func() { _ = store.Close(); _ = os.RemoveAll(dir) }
}

// stopWorker stops w with a deadline for its drain: Stop waits for running
// handlers until its ctx ends.
func stopWorker(w *worker.Worker) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = w.Stop(ctx)
}

func waitFinal(c *coordinator.Coordinator, id string) *coordinator.Job {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	j, err := c.Wait(ctx, id)
	if err != nil {
		panic(err)
	}
	return j
}

type ctxKey struct{}

// Middleware wraps every handler: here one that puts the job's tenant
// (stamped into its metadata by an enqueue hook) into the context, and one
// that logs each run.
func ExampleMiddleware() {
	// The enqueue side: a hook stamps the tenant into the metadata.
	c, closeStore := openExample(coordinator.Config{EnqueueHooks: []coordinator.EnqueueHook{
		func(ctx context.Context, p *coordinator.EnqueueParams) error {
			p.Metadata = json.RawMessage(`{"tenant":"acme"}`)
			return nil
		},
	}})
	defer closeStore()

	tenancy := func(next worker.Handler) worker.Handler {
		return func(ctx context.Context, j *worker.Job) error {
			var md struct{ Tenant string }
			_ = json.Unmarshal(j.Metadata, &md)
			return next(context.WithValue(ctx, ctxKey{}, md.Tenant), j)
		}
	}
	logging := func(next worker.Handler) worker.Handler {
		return func(ctx context.Context, j *worker.Job) error {
			fmt.Println("start", j.Kind)
			err := next(ctx, j)
			fmt.Println("end", j.Kind, err)
			return err
		}
	}
	w, _ := worker.New(c, worker.Config{Maintain: true, Middleware: []worker.Middleware{logging, tenancy}})
	w.Handle("bill", func(ctx context.Context, j *worker.Job) error {
		fmt.Println("billing tenant", ctx.Value(ctxKey{}))
		return nil
	})
	ctx := context.Background()
	_ = w.Start(ctx)
	defer stopWorker(w)
	res, _ := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "bill"})
	fmt.Println(waitFinal(c, res.Job.ID).State)
	// Output:
	// start bill
	// billing tenant acme
	// end bill <nil>
	// completed
}

// Per-kind options: how often a kind is tried, how long an attempt may take
// and how long to wait between attempts.
func ExampleWorker_HandleWith() {
	c, closeStore := openExample(coordinator.Config{})
	defer closeStore()
	w, _ := worker.New(c, worker.Config{Maintain: true})
	w.HandleWith("webhook", func(ctx context.Context, j *worker.Job) error {
		return fmt.Errorf("endpoint down (attempt %d)", j.Attempt)
	}, worker.KindOptions{
		MaxAttempts: 3,
		Timeout:     10 * time.Second,
		RetryPolicy: func(attempt int, _ *coordinator.Job) time.Duration { return 10 * time.Millisecond },
	})
	ctx := context.Background()
	_ = w.Start(ctx)
	defer stopWorker(w)
	res, _ := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "webhook"})
	j := waitFinal(c, res.Job.ID)
	fmt.Println(j.State, "after", j.Attempt, "attempts:", j.Errors[len(j.Errors)-1].Error)
	// Output: discarded after 3 attempts: endpoint down (attempt 3)
}

type emailArgs struct {
	To string `json:"to"`
}

// Kind names the handler of these arguments, as River's JobArgs.
func (emailArgs) Kind() string { return "email" }

// Typed arguments: the kind comes from the argument type.
func ExampleHandleArgs() {
	c, closeStore := openExample(coordinator.Config{})
	defer closeStore()
	w, _ := worker.New(c, worker.Config{Maintain: true})
	worker.HandleArgs(w, func(ctx context.Context, j *worker.Job, a emailArgs) error {
		return j.SetResult("sent to " + a.To)
	})
	ctx := context.Background()
	_ = w.Start(ctx)
	defer stopWorker(w)
	payload, _ := json.Marshal(emailArgs{To: "ada@example.com"})
	res, _ := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: emailArgs{}.Kind(), Payload: payload})
	fmt.Println(string(waitFinal(c, res.Job.ID).Result))
	// Output: "sent to ada@example.com"
}

// Periodic jobs are declared on the worker and enqueued by whichever
// worker is the elected maintenance leader, each tick once.
func ExampleConfig_periodic() {
	c, closeStore := openExample(coordinator.Config{})
	defer closeStore()
	ran := make(chan string, 4)
	w, _ := worker.New(c, worker.Config{Maintain: true, Periodic: []coordinator.PeriodicJob{{
		Name: "heartbeat",
		Spec: "@every 1s", // or "*/5 * * * *", "@daily", "CRON_TZ=Europe/Paris 0 9 * * 1-5"
		Job:  coordinator.EnqueueParams{Kind: "ping"},
	}}})
	w.Handle("ping", func(ctx context.Context, j *worker.Job) error {
		ran <- j.UniqueKey
		return nil
	})
	ctx := context.Background()
	_ = w.Start(ctx)
	defer stopWorker(w)
	key := <-ran
	fmt.Println(strings.HasPrefix(key, "periodic:heartbeat:"))
	states, _ := c.ListPeriodic(ctx)
	fmt.Println(states[0].Name, states[0].Spec, states[0].Enqueued >= 1)
	// Output:
	// true
	// heartbeat @every 1s true
}

// A daemon may run at most N jobs of a queue at once (QueueConcurrency);
// a limit across every daemon is set on the queue itself.
func ExampleConfig_queueConcurrency() {
	c, closeStore := openExample(coordinator.Config{})
	defer closeStore()
	ctx := context.Background()
	_, _, _ = c.SetQueueLimit(ctx, "pdf", 4) // at most 4 across the cluster
	w, _ := worker.New(c, worker.Config{
		Maintain:         true,
		Concurrency:      20,
		Queues:           []string{"default", "pdf"},
		QueueConcurrency: map[string]int{"pdf": 2}, // at most 2 on this daemon
	})
	w.Handle("render", func(ctx context.Context, j *worker.Job) error { return nil })
	_ = w.Start(ctx)
	defer stopWorker(w)
	res, _ := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "render", Queue: "pdf"})
	fmt.Println(waitFinal(c, res.Job.ID).State)
	// Output: completed
}

// A handler that checkpoints its progress resumes from it on a later run:
// here the first attempt records step 2 and fails, and the retry (made
// available by the maintaining worker) starts from step 2.
func ExampleJob_LastCheckpoint() {
	c, closeStore := openExample(coordinator.Config{})
	defer closeStore()
	w, _ := worker.New(c, worker.Config{Maintain: true})
	w.Handle("import", func(ctx context.Context, j *worker.Job) error {
		var p struct{ Step int }
		if ok, err := j.LastCheckpoint(&p); err != nil {
			return worker.JobCancel(err)
		} else if ok {
			fmt.Println("attempt", j.Attempt, "resumes at step", p.Step)
		} else {
			fmt.Println("attempt", j.Attempt, "starts afresh")
		}
		if j.Attempt == 1 {
			p.Step = 2
			if err := j.Checkpoint(ctx, p); err != nil {
				return err
			}
			return worker.JobRetryAt(time.Now(), errors.New("connection reset"))
		}
		return nil
	})
	ctx := context.Background()
	_ = w.Start(ctx)
	defer stopWorker(w)
	res, _ := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "import", MaxAttempts: 2})
	fmt.Println(waitFinal(c, res.Job.ID).State)
	// Output:
	// attempt 1 starts afresh
	// attempt 2 resumes at step 2
	// completed
}
