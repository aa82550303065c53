// Package clienttest is the behaviour suite of package client, run on
// every backend (the daemon's HTTP API, a coordinator on Pebble, etcd) so
// that they cannot drift apart.
package clienttest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/coordinator"
)

// Echo are the arguments of the "echo" kind, which the daemon under test
// must run by completing with its payload as result.
type Echo struct {
	Msg string `json:"msg"`
}

// Kind is "echo".
func (Echo) Kind() string { return "echo" }

// InsertOpts are Echo's defaults: priority 2.
func (Echo) InsertOpts() client.InsertOpts { return client.InsertOpts{Priority: 2} }

// Harness is what a backend's test can do besides making clients, for the
// cases that check what a client reports of it. A nil field skips the
// checks that need it.
type Harness struct {
	// SetPaused pauses (true) or resumes a queue, as an operator does
	// (`leasehold queues pause`, `resume`).
	SetPaused func(ctx context.Context, queue string, paused bool) error
}

// Run runs the suite. newClient returns a client with o (which may be nil)
// of a daemon that runs the kind "echo" on the queue "default"; each call
// may return a new client of the same daemon and namespace.
func Run(t *testing.T, newClient func(t *testing.T, o *client.Options) *client.Client) {
	RunWith(t, newClient, Harness{})
}

// RunWith runs the suite as Run does, with the checks that h allows.
func RunWith(t *testing.T, newClient func(t *testing.T, o *client.Options) *client.Client, h Harness) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newClient(t, nil)
	// The jobs of a run stay (finished) until retention deletes them: a
	// queue and unique payload of this run's own keep a later run on the
	// same daemon from counting them.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	later := "later-" + run

	t.Run("InsertWaitTypedArgs", func(t *testing.T) {
		res, err := c.Insert(ctx, Echo{Msg: "hi"}, &client.InsertOpts{MaxAttempts: 3})
		if err != nil || res.Existed || res.Job.Kind != "echo" || res.Job.Priority != 2 || res.Job.MaxAttempts != 3 {
			t.Fatalf("Insert = %+v, %v", res, err)
		}
		j, err := c.Wait(ctx, res.Job.ID)
		if err != nil || j.State != coordinator.StateCompleted {
			t.Fatalf("Wait = %+v, %v", j, err)
		}
		var got Echo
		if err := json.Unmarshal(j.Result, &got); err != nil || got.Msg != "hi" {
			t.Fatalf("result %s", j.Result)
		}
	})

	t.Run("InsertManyGetList", func(t *testing.T) {
		at := time.Now().Add(time.Hour)
		ps := []client.InsertParams{
			{Args: Echo{Msg: "1"}, Opts: &client.InsertOpts{ScheduledAt: at, Queue: later}},
			{Args: Echo{Msg: "2"}, Opts: &client.InsertOpts{ScheduledAt: at, Queue: later}},
			{Args: client.RawArgs{KindName: "echo", Payload: json.RawMessage(`{"msg":"3"}`)}, Opts: &client.InsertOpts{ScheduledAt: at, Queue: later, Priority: 4}},
		}
		rs, err := c.InsertMany(ctx, ps)
		if err != nil || len(rs) != 3 {
			t.Fatalf("InsertMany = %v, %v", rs, err)
		}
		for _, r := range rs {
			j, err := c.Get(ctx, r.Job.ID)
			if err != nil || j.State != coordinator.StateScheduled || j.Queue != later {
				t.Fatalf("Get = %+v, %v", j, err)
			}
		}
		if rs[2].Job.Priority != 4 || string(rs[2].Job.Payload) != `{"msg":"3"}` {
			t.Fatalf("raw args job: %+v", rs[2].Job)
		}
		page, err := c.List(ctx, client.ListParams{Queue: later, Kind: "echo", Limit: 10})
		if err != nil || len(page.Jobs) != 3 {
			t.Fatalf("List = %d jobs, %v", len(page.Jobs), err)
		}
		res, err := c.CancelMany(ctx, client.CancelFilter{Queue: later})
		if err != nil || res.Cancelled != 3 {
			t.Fatalf("CancelMany = %+v, %v", res, err)
		}
	})

	t.Run("UniqueByArgs", func(t *testing.T) {
		opts := &client.InsertOpts{ScheduledAt: time.Now().Add(time.Hour), Unique: &coordinator.UniqueOpts{ByArgs: true}}
		first, err := c.Insert(ctx, Echo{Msg: "once-" + run}, opts)
		if err != nil || first.Existed {
			t.Fatalf("first = %+v, %v", first, err)
		}
		again, err := c.Insert(ctx, Echo{Msg: "once-" + run}, opts)
		if err != nil || !again.Existed || again.Job.ID != first.Job.ID {
			t.Fatalf("again = %+v, %v", again, err)
		}
		if _, err := c.Cancel(ctx, first.Job.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("CancelRetryDelete", func(t *testing.T) {
		res, err := c.Insert(ctx, Echo{Msg: "later"}, &client.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		id := res.Job.ID
		if j, err := c.Cancel(ctx, id); err != nil || j.State != coordinator.StateCancelled {
			t.Fatalf("Cancel = %+v, %v", j, err)
		}
		if _, err := c.Cancel(ctx, id); !errors.Is(err, coordinator.ErrWrongState) {
			t.Fatalf("second Cancel: %v, want ErrWrongState", err)
		}
		if _, err := c.Delete(ctx, res.Job.ID); err != nil {
			t.Fatalf("Delete cancelled: %v", err)
		}
		if _, err := c.Get(ctx, id); !errors.Is(err, coordinator.ErrNotFound) {
			t.Fatalf("Get deleted: %v, want ErrNotFound", err)
		}
		res, err = c.Insert(ctx, Echo{Msg: "again"}, &client.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Delete(ctx, res.Job.ID); !errors.Is(err, coordinator.ErrWrongState) {
			t.Fatalf("Delete scheduled: %v, want ErrWrongState", err)
		}
		if _, err := c.Cancel(ctx, res.Job.ID); err != nil {
			t.Fatal(err)
		}
		if j, err := c.Retry(ctx, res.Job.ID); err != nil || j.State != coordinator.StateAvailable {
			t.Fatalf("Retry = %+v, %v", j, err)
		}
		j, err := c.Wait(ctx, res.Job.ID)
		if err != nil || j.State != coordinator.StateCompleted {
			t.Fatalf("retried job: %+v, %v", j, err)
		}
		if _, err := c.Retry(ctx, res.Job.ID); !errors.Is(err, coordinator.ErrWrongState) {
			t.Fatalf("Retry completed: %v, want ErrWrongState", err)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		if _, err := c.Insert(ctx, client.RawArgs{KindName: "bad kind"}, nil); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("bad kind: %v", err)
		}
		// A kind that no live daemon runs (a typo, a handler not
		// registered) is refused on every backend, as the daemon's API
		// refuses it: it would only fail attempt after attempt. A batch
		// with one is refused whole.
		if _, err := c.Insert(ctx, client.RawArgs{KindName: "no-such-kind"}, nil); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("kind no live daemon runs: %v", err)
		}
		if _, err := c.InsertMany(ctx, []client.InsertParams{{Args: Echo{Msg: "unwritten"}}, {Args: client.RawArgs{KindName: "no-such-kind"}}}); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("batch with a kind no live daemon runs: %v", err)
		}
		if page, err := c.List(ctx, client.ListParams{Kind: "no-such-kind", Limit: 10}); err != nil || len(page.Jobs) != 0 {
			t.Errorf("jobs of a refused kind: %d, %v", len(page.Jobs), err)
		}
		if _, err := c.Insert(ctx, Echo{}, &client.InsertOpts{Priority: 9}); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("bad priority: %v", err)
		}
		if _, err := c.Insert(ctx, Echo{}, &client.InsertOpts{Timeout: -time.Second}); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("negative timeout: %v", err)
		}
		if _, err := c.Insert(ctx, Echo{}, &client.InsertOpts{Unique: &coordinator.UniqueOpts{ByPeriod: -time.Hour}}); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("negative unique period: %v", err)
		}
		// Over HTTP, JSON encoding would turn the bad bytes into U+FFFD:
		// another key, maybe a live job's, and no error.
		if _, err := c.Insert(ctx, Echo{}, &client.InsertOpts{UniqueKey: "k\xff"}); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("unique key not UTF-8: %v", err)
		}
		if _, err := c.Insert(ctx, client.RawArgs{KindName: "echo", Payload: json.RawMessage("{\"msg\":\"\xff\"}")}, nil); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("payload not UTF-8: %v", err)
		}
		if _, err := c.Get(ctx, "nope"); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("bad id: %v", err)
		}
		if _, err := c.Get(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV"); !errors.Is(err, coordinator.ErrNotFound) {
			t.Errorf("unknown id: %v", err)
		}
		if _, err := c.List(ctx, client.ListParams{State: "done"}); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("bad state: %v", err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer wcancel()
		res, err := c.Insert(ctx, Echo{}, &client.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(wctx, res.Job.ID); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait past its context: %v", err)
		}
		if _, err := c.Cancel(ctx, res.Job.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("InsertMiddleware", func(t *testing.T) {
		var seen atomic.Int32
		tenant := func(next client.InsertFunc) client.InsertFunc {
			return func(ctx context.Context, ps []coordinator.EnqueueParams) ([]client.InsertResult, error) {
				for i := range ps {
					ps[i].Metadata = json.RawMessage(`{"tenant":"acme"}`)
				}
				seen.Add(int32(len(ps)))
				return next(ctx, ps)
			}
		}
		mc := newClient(t, &client.Options{InsertMiddleware: []client.InsertMiddleware{tenant}})
		res, err := mc.Insert(ctx, Echo{Msg: "tenanted"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		j, err := mc.Wait(ctx, res.Job.ID)
		if err != nil || string(j.Metadata) != `{"tenant":"acme"}` || seen.Load() != 1 {
			t.Fatalf("job %+v (%v), middleware saw %d", j, err, seen.Load())
		}
	})

	// The counts are the namespace's: this run's jobs are told apart by
	// the change they make. Every job of the cases above is final by now,
	// and the jobs below go to queues of this run's own that no daemon
	// serves, so nothing else moves meanwhile.
	t.Run("Counts", func(t *testing.T) {
		q := "counts-" + run
		before, err := c.Counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(before) != len(coordinator.States) {
			t.Errorf("Counts = %v: want every state", before)
		}
		at := time.Now().Add(time.Hour)
		now, later := &client.InsertOpts{Queue: q}, &client.InsertOpts{Queue: q, ScheduledAt: at}
		rs, err := c.InsertMany(ctx, []client.InsertParams{
			{Args: Echo{Msg: "c1"}, Opts: now}, {Args: Echo{Msg: "c2"}, Opts: now},
			{Args: Echo{Msg: "c3"}, Opts: later}, {Args: Echo{Msg: "c4"}, Opts: later}, {Args: Echo{Msg: "c5"}, Opts: later},
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Cancel(ctx, rs[4].Job.ID); err != nil {
			t.Fatal(err)
		}
		after, err := c.Counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[client.State]int{coordinator.StateAvailable: 2, coordinator.StateScheduled: 2, coordinator.StateCancelled: 1}
		for _, st := range coordinator.States {
			if d := after[st] - before[st]; d != want[st] {
				t.Errorf("%s: %d before the inserts, %d after: a change of %d, want %d", st, before[st], after[st], d, want[st])
			}
		}
		if _, err := c.CancelMany(ctx, client.CancelFilter{Queue: q}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Queues", func(t *testing.T) {
		qa, qb := "queue-a-"+run, "queue-b-"+run
		rs, err := c.InsertMany(ctx, []client.InsertParams{
			{Args: Echo{Msg: "a1"}, Opts: &client.InsertOpts{Queue: qa}},
			{Args: Echo{Msg: "a2"}, Opts: &client.InsertOpts{Queue: qa}},
			{Args: Echo{Msg: "b1"}, Opts: &client.InsertOpts{Queue: qb}},
			// Not available yet: not in the backlog.
			{Args: Echo{Msg: "b2"}, Opts: &client.InsertOpts{Queue: qb, ScheduledAt: time.Now().Add(time.Hour)}},
		})
		if err != nil || len(rs) != 4 {
			t.Fatalf("InsertMany = %v, %v", rs, err)
		}
		t.Cleanup(func() {
			for _, q := range []string{qa, qb} {
				if _, err := c.CancelMany(ctx, client.CancelFilter{Queue: q}); err != nil {
					t.Error(err)
				}
			}
		})
		if h.SetPaused != nil {
			if err := h.SetPaused(ctx, qb, true); err != nil {
				t.Fatal(err)
			}
			// The queue stays configured (and listed), as any paused
			// and resumed queue does, but not paused.
			t.Cleanup(func() {
				if err := h.SetPaused(ctx, qb, false); err != nil {
					t.Error(err)
				}
			})
		}
		qs, err := c.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.IsSortedFunc(qs, func(x, y client.QueueInfo) int { return strings.Compare(x.Name, y.Name) }) {
			t.Errorf("Queues not sorted by name: %+v", qs)
		}
		byName := map[string]client.QueueInfo{}
		for _, q := range qs {
			byName[q.Name] = q
		}
		a, okA := byName[qa]
		b, okB := byName[qb]
		if !okA || !okB {
			t.Fatalf("Queues = %+v: want %s and %s", qs, qa, qb)
		}
		if a.Available != 2 || a.Paused || a.PausedAt != nil || a.Workers == nil || len(a.Workers) != 0 {
			t.Errorf("%s: %+v, want 2 available, not paused, no workers", qa, a)
		}
		if b.Available != 1 || len(b.Workers) != 0 {
			t.Errorf("%s: %+v, want 1 available (the scheduled job is not), no workers", qb, b)
		}
		if h.SetPaused != nil && (!b.Paused || b.PausedAt == nil) {
			t.Errorf("%s: %+v, want paused", qb, b)
		}
		if def, ok := byName[coordinator.DefaultQueue]; !ok || len(def.Workers) == 0 || slices.Contains(def.Workers, "") {
			t.Errorf("%s: %+v (listed: %v), want the daemon that serves it", coordinator.DefaultQueue, def, ok)
		}

		// QueuePage: the same queues, two at a time, each once; the last
		// page without Next.
		var paged []string
		after := ""
		for range len(qs) + 1 {
			page, err := c.QueuePage(ctx, client.QueueListParams{Limit: 2, After: after})
			if err != nil {
				t.Fatalf("QueuePage after %q: %v", after, err)
			}
			if len(page.Queues) > 2 || page.Queues == nil {
				t.Fatalf("QueuePage after %q: %+v, want at most 2 queues, not nil", after, page)
			}
			for _, q := range page.Queues {
				paged = append(paged, q.Name)
				if q.Workers == nil || q.Name == qa && q.Available != 2 {
					t.Errorf("QueuePage: %+v, want as Queues lists it", q)
				}
			}
			if after = page.Next; after == "" {
				break
			}
		}
		var names []string
		for _, q := range qs {
			names = append(names, q.Name)
		}
		if !slices.Equal(paged, names) {
			t.Errorf("QueuePage, two at a time: %v, want what Queues lists, %v", paged, names)
		}
		if _, err := c.QueuePage(ctx, client.QueueListParams{Limit: coordinator.MaxListLimit + 1}); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("QueuePage with limit %d: %v, want ErrInvalid", coordinator.MaxListLimit+1, err)
		}
	})
}
