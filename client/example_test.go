package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
)

// SendEmail are the arguments of the "email" kind.
type SendEmail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// Kind names the handler, as River's JobArgs.
func (SendEmail) Kind() string { return "email" }

// InsertOpts are the kind's defaults: its own queue.
func (SendEmail) InsertOpts() client.InsertOpts { return client.InsertOpts{Queue: "mail"} }

// exampleDaemon starts an embedded queue with a worker for "email" and
// returns its coordinator. In production the worker runs in the daemon and
// the client is client.NewHTTP("http://127.0.0.1:7420", nil) (embedded) or
// client.Dial(ctx, client.EtcdConfig{...}, nil) (shared).
func exampleDaemon() (*coordinator.Coordinator, func()) {
	dir, _ := os.MkdirTemp("", "leasehold-client-example")
	store, err := localstore.Open(dir, localstore.Options{Logger: quiet()})
	if err != nil {
		panic(err)
	}
	coord, _ := coordinator.New(store, coordinator.Config{Logger: quiet()})
	// Maintain: retries and delayed jobs become available. Start
	// re-queues what a crashed process left running (embedded mode; a new
	// directory has none).
	w, _ := worker.New(coord, worker.Config{Queues: []string{"mail"}, Maintain: true})
	worker.HandleArgs(w, func(ctx context.Context, j *worker.Job, a SendEmail) error {
		return j.SetResult("sent " + a.Subject + " to " + a.To)
	})
	if err := w.Start(context.Background()); err != nil {
		panic(err)
	}
	return coord, func() {
		// Drain for up to 10 s, then interrupt; then close the store.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
		_ = store.Close()
		_ = os.RemoveAll(dir)
	}
}

// Insert typed arguments, then wait for the job to finish.
func Example() {
	coord, stop := exampleDaemon()
	defer stop()
	c := client.New(coord, nil)
	defer c.Close()
	ctx := context.Background()

	res, err := c.Insert(ctx, SendEmail{To: "ada@example.com", Subject: "welcome"}, nil)
	if err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	j, err := c.Wait(wctx, res.Job.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(j.Queue, j.State, string(j.Result))
	// Output: mail completed "sent welcome to ada@example.com"
}

// Batch insert, with uniqueness by arguments: the second insert of the
// same arguments returns the first job.
func ExampleClient_InsertMany() {
	coord, stop := exampleDaemon()
	defer stop()
	c := client.New(coord, nil)
	ctx := context.Background()
	later := &client.InsertOpts{ScheduledAt: time.Now().Add(time.Hour), Unique: &coordinator.UniqueOpts{ByArgs: true}}
	rs, _ := c.InsertMany(ctx, []client.InsertParams{
		{Args: SendEmail{To: "a@example.com", Subject: "digest"}, Opts: later},
		{Args: SendEmail{To: "b@example.com", Subject: "digest"}, Opts: later},
	})
	again, _ := c.Insert(ctx, SendEmail{To: "a@example.com", Subject: "digest"}, later)
	fmt.Println(len(rs), rs[0].Existed, again.Existed, again.Job.ID == rs[0].Job.ID)
	n, _ := c.CancelMany(ctx, client.CancelFilter{Queue: "mail", State: coordinator.StateScheduled})
	fmt.Println("cancelled", n.Cancelled)
	// Output:
	// 2 false true true
	// cancelled 2
}

// Insert middleware runs around every insert: here it stamps a trace id
// into the job's metadata, which worker middleware can read.
func ExampleInsertMiddleware() {
	coord, stop := exampleDaemon()
	defer stop()
	trace := func(next client.InsertFunc) client.InsertFunc {
		return func(ctx context.Context, ps []coordinator.EnqueueParams) ([]client.InsertResult, error) {
			for i := range ps {
				ps[i].Metadata = json.RawMessage(`{"trace_id":"4bf92f35"}`)
			}
			return next(ctx, ps)
		}
	}
	c := client.New(coord, &client.Options{InsertMiddleware: []client.InsertMiddleware{trace}})
	res, _ := c.Insert(context.Background(), SendEmail{To: "ada@example.com"}, &client.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
	fmt.Println(string(res.Job.Metadata))
	// Output: {"trace_id":"4bf92f35"}
}

// Admission control: refuse new work while a queue's backlog (its jobs
// ready to run and not yet taken) is too deep. Here no daemon serves the
// queue "newsletter", so its backlog only grows. Queues reads every
// available job's index entry: a busy program polls it every few seconds
// rather than before each insert.
func ExampleClient_Queues() {
	coord, stop := exampleDaemon()
	defer stop()
	c := client.New(coord, nil)
	ctx := context.Background()
	backlog := func(queue string) int {
		qs, err := c.Queues(ctx)
		if err != nil {
			panic(err)
		}
		for _, q := range qs {
			if q.Name == queue {
				return q.Available
			}
		}
		return 0 // not known: no job waits in it
	}
	const maxBacklog = 2
	for _, to := range []string{"a@example.com", "b@example.com", "c@example.com"} {
		if n := backlog("newsletter"); n >= maxBacklog {
			fmt.Println("refused", to+":", n, "jobs wait")
			continue
		}
		if _, err := c.Insert(ctx, SendEmail{To: to, Subject: "news"}, &client.InsertOpts{Queue: "newsletter"}); err != nil {
			panic(err)
		}
		fmt.Println("enqueued", to)
	}
	qs, _ := c.Queues(ctx)
	for _, q := range qs {
		fmt.Println(q.Name, q.Available, "available,", len(q.Workers), "daemon(s), paused:", q.Paused)
	}
	// Output:
	// enqueued a@example.com
	// enqueued b@example.com
	// refused c@example.com: 2 jobs wait
	// mail 0 available, 1 daemon(s), paused: false
	// newsletter 2 available, 0 daemon(s), paused: false
}

// Insert does not check queues (a job in a queue that no daemon serves
// waits until one does, and its daemons may start after the program): a
// program that wants to know checks its queue names once, at start, as
// here. "newsletter" has no daemon yet.
func ExampleClient_Queues_served() {
	coord, stop := exampleDaemon()
	defer stop()
	c := client.New(coord, nil)
	qs, err := c.Queues(context.Background())
	if err != nil {
		panic(err)
	}
	served := map[string]bool{}
	for _, q := range qs {
		served[q.Name] = len(q.Workers) > 0
	}
	for _, name := range []string{"mail", "newsletter"} {
		if !served[name] {
			fmt.Println(name + ": no live daemon serves it; its jobs wait until one does")
			continue
		}
		fmt.Println(name + ": served")
	}
	// Output:
	// mail: served
	// newsletter: no live daemon serves it; its jobs wait until one does
}

// Every queue, a page at a time: with tens of thousands of queues, each
// answer (and the client's memory) stays one page, where Queues answers
// them all at once. Here five newsletter queues wait with a job each,
// beside "mail", which the daemon serves; pages of two.
func ExampleClient_QueuePage() {
	coord, stop := exampleDaemon()
	defer stop()
	c := client.New(coord, nil)
	ctx := context.Background()
	for i := range 5 {
		opts := &client.InsertOpts{Queue: fmt.Sprintf("newsletter-%d", i)}
		if _, err := c.Insert(ctx, SendEmail{To: "list@example.com", Subject: "news"}, opts); err != nil {
			panic(err)
		}
	}
	p := client.QueueListParams{Limit: 2}
	for {
		page, err := c.QueuePage(ctx, p)
		if err != nil {
			// A daemon from before paging (errors.ErrUnsupported):
			// upgrade it, or call Queues.
			panic(err)
		}
		var line []string
		for _, q := range page.Queues {
			line = append(line, fmt.Sprintf("%s (%d available)", q.Name, q.Available))
		}
		fmt.Println(strings.Join(line, ", "))
		if page.Next == "" {
			break
		}
		p.After = page.Next
	}
	// Output:
	// mail (0 available), newsletter-0 (1 available)
	// newsletter-1 (1 available), newsletter-2 (1 available)
	// newsletter-3 (1 available), newsletter-4 (1 available)
}

// The number of jobs in each state, as a gauge for an autoscaler (or a
// dashboard) would poll it.
func ExampleClient_Counts() {
	coord, stop := exampleDaemon()
	defer stop()
	c := client.New(coord, nil)
	ctx := context.Background()
	later := &client.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)}
	rs, _ := c.InsertMany(ctx, []client.InsertParams{
		{Args: SendEmail{To: "a@example.com", Subject: "reminder"}, Opts: later},
		{Args: SendEmail{To: "b@example.com", Subject: "reminder"}, Opts: later},
	})
	if _, err := c.Cancel(ctx, rs[1].Job.ID); err != nil {
		panic(err)
	}
	counts, err := c.Counts(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(coordinator.StateScheduled, counts[coordinator.StateScheduled])
	fmt.Println(coordinator.StateCancelled, counts[coordinator.StateCancelled])
	fmt.Println(coordinator.StateAvailable, counts[coordinator.StateAvailable])
	// Output:
	// scheduled 1
	// cancelled 1
	// available 0
}
