package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/clienttest"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/apiserver"
	"go.etcd.io/etcd/server/v3/embed"
)

// lossyStore is a store whose write transactions, while armed, are
// applied but answered as etcdkv answers a write whose member did not
// answer in time (ErrNoAnswer, wrapping context.DeadlineExceeded), or,
// hanging, not answered until the caller's context ends.
type lossyStore struct {
	kv.Store
	mode atomic.Value // "", "no answer", "hang"
	// only, if set, arms the mode for the writes that touch a key
	// holding it alone.
	only atomic.Value
}

func (s *lossyStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	mode, _ := s.mode.Load().(string)
	only, _ := s.only.Load().(string)
	if mode == "" || !writes(&t) || only != "" && !touches(&t, only) {
		return s.Store.Txn(ctx, t)
	}
	if _, err := s.Store.Txn(context.WithoutCancel(ctx), t); err != nil {
		return kv.TxnResult{}, err
	}
	if mode == "hang" {
		<-ctx.Done()
		return kv.TxnResult{}, fmt.Errorf("etcdkv: txn: %w", ctx.Err())
	}
	return kv.TxnResult{}, fmt.Errorf("%w to a txn within 3s (a member may hang, or the cluster may have lost its quorum; the write may still be applied): %w", etcdkv.ErrNoAnswer, context.DeadlineExceeded)
}

func writes(t *kv.Txn) bool {
	for _, ops := range [][]kv.Op{t.Then, t.Else} {
		for _, o := range ops {
			if o.Type == kv.OpPut || o.Type == kv.OpDelete || o.Type == kv.OpTxn && writes(o.Txn) {
				return true
			}
		}
	}
	return false
}

// touches reports whether t writes or reads a key that holds part.
func touches(t *kv.Txn, part string) bool {
	for _, ops := range [][]kv.Op{t.Then, t.Else} {
		for _, o := range ops {
			if strings.Contains(o.Key, part) || o.Type == kv.OpTxn && touches(o.Txn, part) {
				return true
			}
		}
	}
	return false
}

// route is one way of the client to the store: its client and a tag of
// its own for the queues and unique keys of its cases, so that the two
// routes' jobs, in one store, do not meet.
type route struct {
	name string
	c    *client.Client
	tag  string
}

// twoRoutes returns a client of a daemon's HTTP API (shared mode, as
// the daemon serves it) and a client straight on etcd, over one store
// and namespace where a daemon runs the kind echo (on the queue default),
// and the store, whose writes can be made to lose their answers.
func twoRoutes(t *testing.T) ([2]route, *lossyStore) {
	return twoRoutesOn(t, nil, etcdkv.Options{}, 0)
}

// twoRoutesOn is twoRoutes on a server started with opts, its store
// given limits and its coordinators maxPayload.
func twoRoutesOn(t *testing.T, opts []etcdtest.Option, limits etcdkv.Options, maxPayload int) ([2]route, *lossyStore) {
	t.Helper()
	const ns = "routes"
	srv := etcdtest.Start(t, opts...)
	base := etcdkv.New(srv.Client(t), limits)
	t.Cleanup(func() { _ = base.Close() })
	runEcho(t, base, ns)
	lossy := &lossyStore{Store: base}

	coord, err := coordinator.New(lossy, coordinator.Config{Namespace: ns, Logger: quiet(), MaxPayloadBytes: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	api := apiserver.New(apiserver.Config{
		Coord: coord, Kinds: map[string]apiserver.PayloadCheck{"echo": nil}, Shared: true,
		MaxPayload: coord.MaxPayloadBytes(), Logger: quiet(),
	})
	hs := httptest.NewServer(api)
	t.Cleanup(func() {
		api.StopWaits()
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := api.StopProbe(ctx); err != nil {
			t.Errorf("stop the store probe: %v", err)
		}
	})
	hc, err := client.NewHTTP(hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hc.Close() })

	direct, err := coordinator.New(lossy, coordinator.Config{Namespace: ns, Logger: quiet(), MaxPayloadBytes: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	ec := client.New(direct, nil)
	t.Cleanup(func() { _ = ec.Close() })
	return [2]route{{"http", hc, "tagH"}, {"etcd", ec, "tagE"}}, lossy
}

// sentinels are the errors a caller tests with errors.Is.
var sentinels = []struct {
	name string
	err  error
}{
	{"ErrInvalid", coordinator.ErrInvalid},
	{"ErrNotFound", coordinator.ErrNotFound},
	{"ErrWrongState", coordinator.ErrWrongState},
	{"ErrConflict", coordinator.ErrConflict},
	{"ErrNoSpace", kv.ErrNoSpace},
	{"ErrBusy", client.ErrBusy},
	{"ErrOutcomeUnknown", client.ErrOutcomeUnknown},
	{"DeadlineExceeded", context.DeadlineExceeded},
	{"Canceled", context.Canceled},
	{"ErrUnsupported", errors.ErrUnsupported},
}

func describeErr(err error) string {
	if err == nil {
		return "no error"
	}
	var is []string
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			is = append(is, s.name)
		}
	}
	if len(is) == 0 {
		return "error (no sentinel)"
	}
	return "error " + strings.Join(is, "+")
}

var ulidRE = regexp.MustCompile(`[0-9A-HJKMNP-TV-Z]{26}`)

// describeJob says what a caller sees of j, the same on each route for
// the same case: ids, the route's tag and times are replaced by what
// they are (times relative to at, the scheduled time the cases use).
func describeJob(j *client.Job, tag string, at time.Time) string {
	if j == nil {
		return "nil"
	}
	when := func(t time.Time) string {
		switch {
		case t.IsZero():
			return "zero"
		case t.Equal(at):
			return "at/" + t.Location().String()
		case t.Sub(j.CreatedAt).Abs() < time.Minute:
			return "now/" + t.Location().String()
		}
		return "other/" + t.Location().String()
	}
	ptr := func(t *time.Time) string {
		if t == nil {
			return "nil"
		}
		return when(*t)
	}
	s := fmt.Sprintf("{kind %s queue %s priority %d state %s payload %s attempt %d/%d errors %d(nil %t) created %s scheduled %s attempted %s finalized %s owner %q token %d checkpoint %s result %s timeout %d unique %q states %v cancel_requested %t metadata %s}",
		j.Kind, j.Queue, j.Priority, j.State, j.Payload, j.Attempt, j.MaxAttempts, len(j.Errors), j.Errors == nil,
		when(j.CreatedAt), when(j.ScheduledAt), ptr(j.AttemptedAt), ptr(j.FinalizedAt), j.Owner, j.Token,
		j.Checkpoint, j.Result, j.TimeoutMS, j.UniqueKey, j.UniqueStates, j.CancelRequested, j.Metadata)
	return strings.ReplaceAll(ulidRE.ReplaceAllString(s, "ID"), tag, "TAG")
}

func describe(v any, tag string, at time.Time) string {
	var s string
	switch v := v.(type) {
	case nil:
		return "nothing"
	case *client.Job:
		return describeJob(v, tag, at)
	case *client.InsertResult:
		if v == nil {
			return "nil"
		}
		return fmt.Sprintf("existed %t %s", v.Existed, describeJob(v.Job, tag, at))
	case []client.InsertResult:
		parts := []string{fmt.Sprintf("%d results (nil %t)", len(v), v == nil)}
		for _, r := range v {
			parts = append(parts, describe(&r, tag, at))
		}
		return strings.Join(parts, "; ")
	case client.ListPage:
		parts := []string{fmt.Sprintf("%d jobs (nil %t) next %q", len(v.Jobs), v.Jobs == nil, v.Next)}
		for _, j := range v.Jobs {
			parts = append(parts, describeJob(j, tag, at))
		}
		s = strings.Join(parts, "; ")
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			if err, ok := x.(error); ok || x == nil {
				parts[i] = describeErr(err)
				continue
			}
			parts[i] = describe(x, tag, at)
		}
		return "[" + strings.Join(parts, " | ") + "]"
	case client.QueuePage:
		s = fmt.Sprintf("%d queues (nil %t) next %q: %+v", len(v.Queues), v.Queues == nil, v.Next, v.Queues)
	default:
		s = fmt.Sprintf("%+v", v)
	}
	return strings.ReplaceAll(ulidRE.ReplaceAllString(s, "ID"), tag, "TAG")
}

// The client's two routes, a daemon's HTTP API and etcd itself, answer
// the same calls on the same store alike: the same results (jobs as
// stored, defaults, unique keys' existed answers, pages), the same
// sentinel errors, and the same results alongside an error.
func TestRoutesAgree(t *testing.T) {
	routes, lossy := twoRoutes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	at := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	later := func(o client.InsertOpts) *client.InsertOpts { o.ScheduledAt = at; return &o }
	const unknownID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"

	// insert returns the id of a new job scheduled at at in queue q.
	insert := func(c *client.Client, q string) (string, error) {
		res, err := c.Insert(ctx, clienttest.Echo{Msg: "x"}, later(client.InsertOpts{Queue: q}))
		if err != nil {
			return "", err
		}
		return res.Job.ID, nil
	}
	cancelled := func(c *client.Client, q string) (string, error) {
		id, err := insert(c, q)
		if err == nil {
			_, err = c.Cancel(ctx, id)
		}
		return id, err
	}
	type call func(c *client.Client, tag string) (any, error)
	cases := []struct {
		name string
		run  call
	}{
		{"insert defaults", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, client.RawArgs{KindName: "echo"}, later(client.InsertOpts{}))
		}},
		{"insert typed with options", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, clienttest.Echo{Msg: "<b>&"}, later(client.InsertOpts{
				Queue: tag + "-q", MaxAttempts: 3, Timeout: 1500 * time.Millisecond,
				Metadata: json.RawMessage(`{"a": "<b>", "n": 1.50}`),
			}))
		}},
		{"insert raw payload with blanks", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, client.RawArgs{KindName: "echo", Payload: json.RawMessage(` { "b" : [1, 2] } `)}, later(client.InsertOpts{}))
		}},
		{"insert null payload", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, client.RawArgs{KindName: "echo", Payload: json.RawMessage(`null`)}, later(client.InsertOpts{}))
		}},
		{"insert payload not JSON", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, client.RawArgs{KindName: "echo", Payload: json.RawMessage(`{`)}, nil)
		}},
		{"insert payload too large", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, client.RawArgs{KindName: "echo", Payload: json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`)}, nil)
		}},
		{"insert payload over the store's fit", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, client.RawArgs{KindName: "echo", Payload: json.RawMessage(`"` + strings.Repeat("x", 700<<10) + `"`)}, nil)
		}},
		{"insert metadata not JSON", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, clienttest.Echo{}, &client.InsertOpts{Metadata: json.RawMessage(`{`)})
		}},
		{"insert unknown kind", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, client.RawArgs{KindName: "no-such-kind"}, nil)
		}},
		{"insert bad kind", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, client.RawArgs{KindName: "bad kind"}, nil)
		}},
		{"insert bad queue", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, clienttest.Echo{}, &client.InsertOpts{Queue: "bad queue"})
		}},
		{"insert queue dot", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, clienttest.Echo{}, &client.InsertOpts{Queue: ".."})
		}},
		{"insert bad priority", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, clienttest.Echo{}, &client.InsertOpts{Priority: -1})
		}},
		{"insert bad max attempts", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, clienttest.Echo{}, &client.InsertOpts{MaxAttempts: -1})
		}},
		{"insert timeout under 1ms", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, clienttest.Echo{}, &client.InsertOpts{Timeout: 500 * time.Microsecond})
		}},
		{"insert scheduled past 2262", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, clienttest.Echo{}, &client.InsertOpts{ScheduledAt: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)})
		}},
		{"insert unique state unfinished", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, clienttest.Echo{}, &client.InsertOpts{Unique: &coordinator.UniqueOpts{ByState: []coordinator.State{coordinator.StateRunning}}})
		}},
		{"insert unique state unknown", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, clienttest.Echo{}, &client.InsertOpts{Unique: &coordinator.UniqueOpts{ByState: []coordinator.State{"done"}}})
		}},
		{"insert unique period negative", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, clienttest.Echo{}, &client.InsertOpts{Unique: &coordinator.UniqueOpts{ByPeriod: -time.Hour}})
		}},
		{"insert unique key too long", func(c *client.Client, tag string) (any, error) {
			return c.Insert(ctx, clienttest.Echo{}, &client.InsertOpts{UniqueKey: strings.Repeat("k", 300)})
		}},
		{"insert unique options twice", func(c *client.Client, tag string) (any, error) {
			o := later(client.InsertOpts{Queue: tag + "-u", Unique: &coordinator.UniqueOpts{ByQueue: true, ByArgs: true, ByPeriod: time.Hour, ByState: []coordinator.State{coordinator.StateCompleted}}})
			first, err := c.Insert(ctx, clienttest.Echo{Msg: "u"}, o)
			if err != nil {
				return first, err
			}
			again, err := c.Insert(ctx, clienttest.Echo{Msg: "u"}, o)
			return []client.InsertResult{*first, *again}, err
		}},
		{"insert unique key twice", func(c *client.Client, tag string) (any, error) {
			o := later(client.InsertOpts{UniqueKey: tag + "-key"})
			first, err := c.Insert(ctx, clienttest.Echo{Msg: "k"}, o)
			if err != nil {
				return first, err
			}
			again, err := c.Insert(ctx, clienttest.Echo{Msg: "other"}, o)
			return []client.InsertResult{*first, *again}, err
		}},
		{"insert many with a key twice", func(c *client.Client, tag string) (any, error) {
			o := later(client.InsertOpts{UniqueKey: tag + "-batch"})
			return c.InsertMany(ctx, []client.InsertParams{{Args: clienttest.Echo{Msg: "1"}, Opts: o}, {Args: clienttest.Echo{Msg: "2"}, Opts: o}, {Args: clienttest.Echo{Msg: "3"}, Opts: later(client.InsertOpts{})}})
		}},
		{"insert many with a bad job", func(c *client.Client, tag string) (any, error) {
			q := tag + "-bad"
			rs, err := c.InsertMany(ctx, []client.InsertParams{{Args: clienttest.Echo{}, Opts: &client.InsertOpts{Queue: q}}, {Args: clienttest.Echo{}, Opts: &client.InsertOpts{Queue: q, Priority: 7}}})
			page, lerr := c.List(ctx, client.ListParams{Queue: q})
			return []any{rs, page, lerr}, err
		}},
		{"insert many with an unknown kind", func(c *client.Client, tag string) (any, error) {
			return c.InsertMany(ctx, []client.InsertParams{{Args: clienttest.Echo{}}, {Args: client.RawArgs{KindName: "no-such-kind"}}})
		}},
		{"insert many with nil arguments", func(c *client.Client, tag string) (any, error) {
			return c.InsertMany(ctx, []client.InsertParams{{Args: clienttest.Echo{}}, {}})
		}},
		{"get", func(c *client.Client, tag string) (any, error) {
			id, err := insert(c, tag+"-get")
			if err != nil {
				return nil, err
			}
			return c.Get(ctx, id)
		}},
		{"get bad id", func(c *client.Client, tag string) (any, error) { return c.Get(ctx, "nope") }},
		{"get lower-case id", func(c *client.Client, tag string) (any, error) { return c.Get(ctx, strings.ToLower(unknownID)) }},
		{"get unknown id", func(c *client.Client, tag string) (any, error) { return c.Get(ctx, unknownID) }},
		{"list pages", func(c *client.Client, tag string) (any, error) {
			q := tag + "-list"
			for range 3 {
				if _, err := insert(c, q); err != nil {
					return nil, err
				}
			}
			var out []any
			for _, p := range []client.ListParams{{Queue: q, Limit: 2}, {Queue: q, Kind: "echo", State: coordinator.StateScheduled, Limit: 2}} {
				first, err := c.List(ctx, p)
				if err != nil {
					return first, err
				}
				p.After = first.Next
				second, err := c.List(ctx, p)
				out = append(out, first, second, err)
			}
			return out, nil
		}},
		{"list limit negative", func(c *client.Client, tag string) (any, error) { return c.List(ctx, client.ListParams{Limit: -1}) }},
		{"list limit over the maximum", func(c *client.Client, tag string) (any, error) {
			return c.List(ctx, client.ListParams{Limit: coordinator.MaxListLimit + 1})
		}},
		{"list bad state", func(c *client.Client, tag string) (any, error) { return c.List(ctx, client.ListParams{State: "done"}) }},
		{"list bad kind", func(c *client.Client, tag string) (any, error) {
			return c.List(ctx, client.ListParams{Kind: "bad kind"})
		}},
		{"list bad queue", func(c *client.Client, tag string) (any, error) {
			return c.List(ctx, client.ListParams{Queue: "bad queue"})
		}},
		{"list bad cursor", func(c *client.Client, tag string) (any, error) {
			return c.List(ctx, client.ListParams{After: "not a cursor"})
		}},
		{"list bad cursor of a state", func(c *client.Client, tag string) (any, error) {
			return c.List(ctx, client.ListParams{State: coordinator.StateAvailable, After: unknownID})
		}},
		{"cancel twice", func(c *client.Client, tag string) (any, error) {
			id, err := insert(c, tag+"-cancel")
			if err != nil {
				return nil, err
			}
			j, err := c.Cancel(ctx, id)
			if err != nil {
				return j, err
			}
			j2, err := c.Cancel(ctx, id)
			return []any{j, j2}, err
		}},
		{"cancel unknown id", func(c *client.Client, tag string) (any, error) { return c.Cancel(ctx, unknownID) }},
		{"cancel bad id", func(c *client.Client, tag string) (any, error) { return c.Cancel(ctx, "nope") }},
		{"cancel many by queue", func(c *client.Client, tag string) (any, error) {
			q := tag + "-many"
			for range 2 {
				if _, err := insert(c, q); err != nil {
					return nil, err
				}
			}
			return c.CancelMany(ctx, client.CancelFilter{Queue: q})
		}},
		{"cancel many finished state", func(c *client.Client, tag string) (any, error) {
			return c.CancelMany(ctx, client.CancelFilter{State: coordinator.StateCompleted})
		}},
		{"cancel many unknown state", func(c *client.Client, tag string) (any, error) {
			return c.CancelMany(ctx, client.CancelFilter{State: "done"})
		}},
		{"cancel many bad kind", func(c *client.Client, tag string) (any, error) {
			return c.CancelMany(ctx, client.CancelFilter{Kind: "bad kind"})
		}},
		{"cancel many bad queue", func(c *client.Client, tag string) (any, error) {
			return c.CancelMany(ctx, client.CancelFilter{Queue: "bad queue"})
		}},
		{"retry cancelled, then retry available", func(c *client.Client, tag string) (any, error) {
			id, err := cancelled(c, tag+"-rq")
			if err != nil {
				return nil, err
			}
			j, err := c.Retry(ctx, id)
			if err != nil {
				return j, err
			}
			j2, err := c.Retry(ctx, id)
			_, _ = c.Cancel(ctx, id)
			return []any{j, j2}, err
		}},
		{"retry scheduled", func(c *client.Client, tag string) (any, error) {
			id, err := insert(c, tag+"-rs")
			if err != nil {
				return nil, err
			}
			j, err := c.Retry(ctx, id)
			_, _ = c.Cancel(ctx, id)
			return j, err
		}},
		{"retry unknown id", func(c *client.Client, tag string) (any, error) { return c.Retry(ctx, unknownID) }},
		{"delete unfinished", func(c *client.Client, tag string) (any, error) {
			id, err := insert(c, tag+"-del")
			if err != nil {
				return nil, err
			}
			return c.Delete(ctx, id)
		}},
		{"delete cancelled, then again", func(c *client.Client, tag string) (any, error) {
			id, err := cancelled(c, tag+"-del2")
			if err != nil {
				return nil, err
			}
			j, err := c.Delete(ctx, id)
			if err != nil {
				return j, err
			}
			j2, err := c.Delete(ctx, id)
			return []any{j, j2}, err
		}},
		{"wait finished", func(c *client.Client, tag string) (any, error) {
			id, err := cancelled(c, tag+"-wait")
			if err != nil {
				return nil, err
			}
			return c.Wait(ctx, id)
		}},
		{"wait unknown id", func(c *client.Client, tag string) (any, error) { return c.Wait(ctx, unknownID) }},
		{"wait past its context", func(c *client.Client, tag string) (any, error) {
			id, err := insert(c, tag+"-wait2")
			if err != nil {
				return nil, err
			}
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			return c.Wait(wctx, id)
		}},
		{"counts", func(c *client.Client, tag string) (any, error) { return c.Counts(ctx) }},
		{"queues", func(c *client.Client, tag string) (any, error) { return c.Queues(ctx) }},
		{"queue pages", func(c *client.Client, tag string) (any, error) {
			first, err := c.QueuePage(ctx, client.QueueListParams{Limit: 2})
			if err != nil {
				return first, err
			}
			second, err := c.QueuePage(ctx, client.QueueListParams{Limit: 2, After: first.Next})
			return []any{first, second}, err
		}},
		{"queue page limit negative", func(c *client.Client, tag string) (any, error) {
			return c.QueuePage(ctx, client.QueueListParams{Limit: -1})
		}},
		{"queue page bad cursor", func(c *client.Client, tag string) (any, error) {
			return c.QueuePage(ctx, client.QueueListParams{After: "bad queue"})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]string
			for i, r := range routes {
				v, err := tc.run(r.c, r.tag)
				got[i] = describeErr(err) + " with " + describe(v, r.tag, at)
				if err != nil {
					t.Logf("%s: %v", r.name, err)
				}
			}
			if got[0] != got[1] {
				t.Errorf("the routes differ:\n%s: %s\n%s: %s", routes[0].name, got[0], routes[1].name, got[1])
			}
		})
	}

	// A bulk cancel whose write of its last job loses its answer, after
	// it cancelled the queue's available jobs: it returns, beside its
	// error, what it cancelled before, on each route (over HTTP it
	// returned 0 and 0, the daemon's error answer carrying no counts).
	t.Run("cancel many failing part way", func(t *testing.T) {
		var got [2]string
		for i, r := range routes {
			q := r.tag + "-part"
			for range 3 {
				if _, err := r.c.Insert(ctx, clienttest.Echo{}, &client.InsertOpts{Queue: q}); err != nil {
					t.Fatal(err)
				}
			}
			// Scheduled: in the timers index, which the cancel reads
			// after the queue's available jobs.
			last, err := insert(r.c, q)
			if err != nil {
				t.Fatal(err)
			}
			lossy.only.Store(last)
			lossy.mode.Store("no answer")
			res, err := r.c.CancelMany(ctx, client.CancelFilter{Queue: q})
			lossy.mode.Store("")
			lossy.only.Store("")
			got[i] = describeErr(err) + " with " + describe(res, r.tag, at)
			t.Logf("%s: %+v, %v", r.name, res, err)
			if !errors.Is(err, client.ErrOutcomeUnknown) || res != (client.CancelManyResult{Cancelled: 3}) {
				t.Errorf("%s: %+v, %v; want 3 cancelled and an error wrapping client.ErrOutcomeUnknown", r.name, res, err)
			}
		}
		if got[0] != got[1] {
			t.Errorf("the routes differ:\n%s: %s\n%s: %s", routes[0].name, got[0], routes[1].name, got[1])
		}
	})

	// Changes whose answers are lost: applied, but the caller cannot
	// know it. Each must say so, and the same way, on each route.
	for _, mode := range []string{"no answer", "hang"} {
		changes := []struct {
			name string
			run  func(ctx context.Context, c *client.Client, id, tag string) (any, error)
		}{
			{"insert", func(ctx context.Context, c *client.Client, id, tag string) (any, error) {
				return c.Insert(ctx, clienttest.Echo{}, later(client.InsertOpts{Queue: tag + "-lost"}))
			}},
			{"insert many", func(ctx context.Context, c *client.Client, id, tag string) (any, error) {
				return c.InsertMany(ctx, []client.InsertParams{{Args: clienttest.Echo{}, Opts: later(client.InsertOpts{Queue: tag + "-lost"})}, {Args: clienttest.Echo{}, Opts: later(client.InsertOpts{Queue: tag + "-lost"})}})
			}},
			{"cancel", func(ctx context.Context, c *client.Client, id, tag string) (any, error) { return c.Cancel(ctx, id) }},
			{"cancel many", func(ctx context.Context, c *client.Client, id, tag string) (any, error) {
				return c.CancelMany(ctx, client.CancelFilter{Queue: tag + "-lost"})
			}},
			{"retry", func(ctx context.Context, c *client.Client, id, tag string) (any, error) { return c.Retry(ctx, id) }},
			{"delete", func(ctx context.Context, c *client.Client, id, tag string) (any, error) { return c.Delete(ctx, id) }},
		}
		for _, ch := range changes {
			t.Run(mode+"/"+ch.name, func(t *testing.T) {
				var got [2]string
				for i, r := range routes {
					// A job of its own: cancelled for retry and delete,
					// scheduled for the others.
					var id string
					var err error
					if ch.name == "retry" || ch.name == "delete" {
						id, err = cancelled(r.c, r.tag+"-lost")
					} else {
						id, err = insert(r.c, r.tag+"-lost")
					}
					if err != nil {
						t.Fatal(err)
					}
					d := 2 * time.Second
					if mode == "hang" {
						d = 300 * time.Millisecond
					}
					cctx, cancel := context.WithTimeout(ctx, d)
					lossy.mode.Store(mode)
					v, err := ch.run(cctx, r.c, id, r.tag)
					lossy.mode.Store("")
					cancel()
					got[i] = describeErr(err) + " with " + describe(v, r.tag, at)
					t.Logf("%s: %v", r.name, err)
					if !errors.Is(err, client.ErrOutcomeUnknown) {
						t.Errorf("%s: %v, want an error wrapping client.ErrOutcomeUnknown", r.name, err)
					}
				}
				if got[0] != got[1] {
					t.Errorf("the routes differ:\n%s: %s\n%s: %s", routes[0].name, got[0], routes[1].name, got[1])
				}
			})
		}
	}
}

// A change that the store refuses as too large (its --max-request-bytes is
// below what the client was told) wrote nothing: ErrInvalid on each route,
// as the daemon's 413, and not of unknown outcome.
func TestRoutesAgreeOnTooLarge(t *testing.T) {
	routes, _ := twoRoutesOn(t, []etcdtest.Option{etcdtest.WithConfig(func(c *embed.Config) { c.MaxRequestBytes = 512 << 10 })},
		etcdkv.Options{MaxRequestBytes: 8 << 20}, 2<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got [2]string
	for i, r := range routes {
		_, err := r.c.Insert(ctx, client.RawArgs{KindName: "echo", Payload: json.RawMessage(`"` + strings.Repeat("x", 600<<10) + `"`)}, nil)
		t.Logf("%s: %v", r.name, err)
		got[i] = describeErr(err)
	}
	if got[0] != got[1] || got[0] != "error ErrInvalid" {
		t.Errorf("a job over the store's request limit: %s over %s, %s over %s; want ErrInvalid on each", got[0], routes[0].name, got[1], routes[1].name)
	}
}
