// Package client is for programs that only enqueue and inspect leasehold
// jobs: web handlers, cron scripts, other services. It does not run jobs
// (see package worker for that).
//
// A Client talks to a daemon over its HTTP API (NewHTTP: embedded mode,
// where the daemon owns the data directory), or to the store directly
// (Dial: shared mode, straight to etcd; New: over any coordinator). Both
// behave the same, down to the errors: test them with errors.Is against
// coordinator.ErrInvalid, ErrNotFound, ErrWrongState and ErrConflict (a
// change that kept losing races: safe to retry). A job of a kind that no
// live daemon runs (a typo, a handler never registered) is ErrInvalid on
// both, and nothing is written; with no daemon live at all, any kind is
// accepted (its daemons may start later). A queue is not checked, on
// purpose: a queue that no daemon serves is accepted, and its jobs wait
// until one does, unlike a kind's, which would fail attempt after attempt;
// and its daemons may start after the program that fills it. Check a
// program's queue names once, at start, if need be: Queues lists the
// daemons serving each (see the example of Client.Queues). A store that
// does not answer in time gives an error wrapping
// context.DeadlineExceeded, also through a daemon (its 503 with
// Retry-After): the outcome of a write is then unknown, so insert with a
// unique key to retry without a duplicate. A daemon that refuses a request
// without processing it (beyond its --http-max-connections: a 503 marked
// Leasehold-Not-Processed) has written nothing: the client sends it again
// itself, after the pause the answer's Retry-After asks, up to 5 times
// within 10 s of pauses and the context's deadline, then gives an error
// wrapping ErrBusy, never context.DeadlineExceeded; it is safe to retry
// as it is, without a unique key.
// Any other failure of a change sent to a daemon that may have come after
// the daemon read it (its connection reset or closed before the answer, an
// answer cut short or not the API's, a 5xx without the mark: the store's
// deadline, a proxy's 502 or 504) gives an error wrapping
// ErrOutcomeUnknown, and the change is never sent again by the client:
// insert with a unique key to retry without a duplicate, or look first.
// So does a change sent straight to the store that failed without its
// answer (an etcd member that did not answer a write, etcdkv.ErrNoAnswer;
// the context's end; any failure but the sentinels above and
// kv.ErrNoSpace): as through a daemon, whose answer would be a 5xx
// (ADR 0047).
// InsertMany returns the jobs of the requests that were answered, and its
// error names the jobs that may or may not have been inserted and those
// not sent.
// A method that returns a job returns none with an error (with
// ErrWrongState too: read the job with Get), and List an empty page.
// A payload and metadata are stored as a daemon receives them: JSON
// compacted as encoding/json writes it (<, > and & escaped), a null
// payload as {}.
// A store without room for new jobs (a daemon's disk under its reserve,
// etcd over its quota) gives an error wrapping kv.ErrNoSpace, also through
// a daemon (its 507). A disk's reserve writes nothing; etcd applied the
// writes that took it over its quota, answering them so too, so insert
// with a unique key to retry without a duplicate.
// An insert that an enqueue hook refused (coordinator.Config.EnqueueHooks
// of the coordinator, or of the daemon's program: its 422) wrote nothing:
// its error wraps coordinator.ErrEnqueueRefused, not ErrOutcomeUnknown.
// CancelMany returns, beside its error, the jobs it cancelled before it
// failed, on each route.
//
// Job arguments are typed, as in River: a type with a Kind method is a
// job's arguments, its JSON encoding the job's payload, and it may give its
// own defaults with an InsertOpts method.
//
//	type Email struct{ To string `json:"to"` }
//	func (Email) Kind() string { return "email" }
//
//	res, err := c.Insert(ctx, Email{To: "ada@example.com"}, nil)
//	job, err := c.Wait(ctx, res.Job.ID)
//
// Counts and Queues say how many jobs wait, in each state and in each
// queue: for admission control (refuse work while a queue's backlog is too
// deep) and autoscalers.
//
// Insert middleware (Options.InsertMiddleware) runs around every insert,
// for tracing, logging, metrics or tenancy (stamping Metadata, choosing a
// queue).
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// Args are a job's typed arguments: Kind names the handler that runs it,
// and the value's JSON encoding is the job's payload.
type Args interface {
	Kind() string
}

// ArgsWithOpts are arguments that give their own insert defaults (a queue,
// a priority, uniqueness); InsertOpts given to Insert override them field
// by field.
type ArgsWithOpts interface {
	Args
	InsertOpts() InsertOpts
}

// RawArgs are untyped arguments: a kind and a JSON payload. A payload
// that is not valid JSON is refused by Insert with an error wrapping
// coordinator.ErrInvalid; an empty one is {}.
type RawArgs struct {
	KindName string
	Payload  json.RawMessage
}

// Kind returns r.KindName.
func (r RawArgs) Kind() string { return r.KindName }

// MarshalJSON returns the payload ({} when empty).
func (r RawArgs) MarshalJSON() ([]byte, error) {
	if len(r.Payload) == 0 {
		return []byte("{}"), nil
	}
	return r.Payload, nil
}

// InsertOpts are the options of one insert. Zero fields take the
// defaults (of the arguments' own InsertOpts, then of the queue).
type InsertOpts struct {
	Queue       string
	Priority    int
	ScheduledAt time.Time
	MaxAttempts int
	Timeout     time.Duration
	// UniqueKey and Unique make the insert idempotent; see
	// coordinator.UniqueOpts.
	UniqueKey string
	Unique    *coordinator.UniqueOpts
	Metadata  json.RawMessage
}

// InsertParams is one job of InsertMany.
type InsertParams struct {
	Args Args
	Opts *InsertOpts
}

// InsertResult says what an insert did: Existed is true when a job with the
// same unique key was returned instead of inserting a new one.
type InsertResult struct {
	Job     *Job
	Existed bool
}

// Aliases of the coordinator's types, so that callers need not import it.
type (
	Job              = coordinator.Job
	ListParams       = coordinator.ListParams
	ListPage         = coordinator.ListPage
	CancelFilter     = coordinator.CancelFilter
	CancelManyResult = coordinator.CancelManyResult
	State            = coordinator.State
	QueueInfo        = coordinator.QueueInfo
	QueueListParams  = coordinator.QueueListParams
	QueuePage        = coordinator.QueuePage
)

// InsertFunc inserts jobs (the next step of an InsertMiddleware).
type InsertFunc func(ctx context.Context, ps []coordinator.EnqueueParams) ([]InsertResult, error)

// InsertMiddleware wraps every insert of a client: it may change the jobs
// (set Metadata, a Queue), refuse them, or observe the result.
type InsertMiddleware func(next InsertFunc) InsertFunc

// Options configure a Client. The zero value is fine.
type Options struct {
	// InsertMiddleware wraps every insert, the first outermost.
	InsertMiddleware []InsertMiddleware
	// Token is sent as a bearer token to a daemon that requires one
	// (HTTP only); white space around it is ignored.
	Token string
	// HTTPTimeout bounds one HTTP request that is not a wait. Default
	// 30s; a negative one is refused by NewHTTP.
	HTTPTimeout time.Duration
	// HTTPClient sends the requests of a client from NewHTTP: give one
	// whose Transport trusts your CA (a daemon started with --tls-cert
	// and a private certificate), presents a client certificate or uses a
	// proxy. Leave its Timeout 0: it would bound waits' long polls too
	// (HTTPTimeout bounds the other requests). Close leaves its idle
	// connections alone. Default: a client of its own.
	HTTPClient *http.Client
}

// backend is what a Client runs on: the HTTP API or a coordinator.
type backend interface {
	insert(ctx context.Context, ps []coordinator.EnqueueParams) ([]InsertResult, error)
	get(ctx context.Context, id string) (*Job, error)
	list(ctx context.Context, p ListParams) (ListPage, error)
	cancel(ctx context.Context, id string) (*Job, error)
	cancelMany(ctx context.Context, f CancelFilter) (CancelManyResult, error)
	retry(ctx context.Context, id string) (*Job, error)
	remove(ctx context.Context, id string) (*Job, error)
	wait(ctx context.Context, id string) (*Job, error)
	counts(ctx context.Context) (map[State]int, error)
	queues(ctx context.Context) ([]QueueInfo, error)
	queuePage(ctx context.Context, p QueueListParams) (QueuePage, error)
	close() error
}

// Client enqueues and inspects jobs. It is safe for concurrent use.
type Client struct {
	b      backend
	insert InsertFunc
}

func newClient(b backend, o *Options) *Client {
	c := &Client{b: b, insert: b.insert}
	if o != nil {
		for i := len(o.InsertMiddleware) - 1; i >= 0; i-- {
			c.insert = o.InsertMiddleware[i](c.insert)
		}
	}
	return c
}

// New returns a client over a coordinator (any store: embedded tests,
// or an etcd store the caller manages). Close does not close the store.
func New(coord *coordinator.Coordinator, o *Options) *Client {
	return newClient(coordBackend{c: coord}, o)
}

// EtcdConfig says how to reach etcd (shared mode).
type EtcdConfig struct {
	etcdkv.Config
	// Namespace of the queues. Default: coordinator.DefaultNamespace.
	Namespace string
	// Limits are the servers' --max-txn-ops and --max-request-bytes when
	// they were started with larger values than etcd's defaults: larger
	// payloads and batches then fit (see etcdkv.Options). Dial lets the
	// client send requests that large unless Config.MaxCallSendMsgSize
	// says otherwise.
	Limits etcdkv.Options
	// MaxPayloadBytes is the daemons' --max-payload when they run with
	// one: Insert refuses larger payloads, as they do. Default: theirs,
	// 1 MiB or what fits the store's request limit (Limits) twice; a
	// value over that fit is refused by Dial (see
	// coordinator.Config.MaxPayloadBytes).
	MaxPayloadBytes int
}

// Dial connects to etcd and returns a client on it (shared mode: no daemon
// in between). Close releases the connection.
func Dial(ctx context.Context, cfg EtcdConfig, o *Options) (*Client, error) {
	if cfg.MaxPayloadBytes < 0 {
		// Before the dial, and in the caller's terms: coordinator.New
		// would name its own Config's field.
		return nil, fmt.Errorf("%w: client.EtcdConfig.MaxPayloadBytes is negative: want 0 (the daemons' default) or more", coordinator.ErrInvalid)
	}
	if cfg.Limits.MaxRequestBytes > 0 && cfg.MaxCallSendMsgSize == 0 {
		cfg.MaxCallSendMsgSize = max(2<<20, cfg.Limits.MaxRequestBytes+etcdkv.RequestBytesMargin)
	}
	cli, err := etcdkv.Dial(ctx, cfg.Config)
	if err != nil {
		return nil, err
	}
	store := etcdkv.New(cli, cfg.Limits)
	coord, err := coordinator.New(store, coordinator.Config{Namespace: cfg.Namespace, MaxPayloadBytes: cfg.MaxPayloadBytes})
	if err != nil {
		_ = store.Close()
		_ = cli.Close()
		return nil, err
	}
	return newClient(coordBackend{c: coord, closeFn: func() error {
		err := store.Close()
		if cerr := cli.Close(); err == nil {
			err = cerr
		}
		return err
	}}, o), nil
}

// Close releases what the client holds (an etcd connection, idle HTTP
// connections).
func (c *Client) Close() error { return c.b.close() }

// params turns typed arguments and options into enqueue parameters.
func params(p InsertParams) (coordinator.EnqueueParams, error) {
	if p.Args == nil {
		return coordinator.EnqueueParams{}, fmt.Errorf("%w: nil job arguments", coordinator.ErrInvalid)
	}
	if r, ok := p.Args.(*RawArgs); ok && r == nil {
		return coordinator.EnqueueParams{}, fmt.Errorf("%w: nil job arguments", coordinator.ErrInvalid)
	}
	payload, err := json.Marshal(p.Args)
	if err != nil {
		if rerr := rawArgsError(p.Args); rerr != nil {
			return coordinator.EnqueueParams{}, rerr
		}
		return coordinator.EnqueueParams{}, fmt.Errorf("%w: encode %s arguments: %v: give them a type that encoding/json can encode", coordinator.ErrInvalid, p.Args.Kind(), err)
	}
	var o InsertOpts
	if d, ok := p.Args.(ArgsWithOpts); ok {
		o = d.InsertOpts()
	}
	if p.Opts != nil {
		o = merge(o, *p.Opts)
	}
	return coordinator.EnqueueParams{
		Kind: p.Args.Kind(), Payload: payload, Queue: o.Queue, Priority: o.Priority, ScheduledAt: o.ScheduledAt,
		MaxAttempts: o.MaxAttempts, Timeout: o.Timeout, UniqueKey: o.UniqueKey, Unique: o.Unique, Metadata: o.Metadata,
	}, nil
}

// rawArgsError is the refusal of RawArgs (non-nil) whose payload is not
// JSON, which json.Marshal reported through its own error about calling
// MarshalJSON: one line that says where and what to do. It is nil for
// other arguments, and for RawArgs whose payload is JSON.
func rawArgsError(a Args) error {
	var r RawArgs
	switch v := a.(type) {
	case RawArgs:
		r = v
	case *RawArgs:
		r = *v
	default:
		return nil
	}
	var se *json.SyntaxError
	if err := json.Unmarshal(r.Payload, new(json.RawMessage)); len(r.Payload) == 0 || !errors.As(err, &se) {
		return nil
	}
	return fmt.Errorf("%w: RawArgs payload of kind %s is not valid JSON (at byte %d: %s): pass JSON text as Payload (an object, say), or none for {}",
		coordinator.ErrInvalid, r.KindName, se.Offset, se.Error())
}

// merge returns base with every non-zero field of over.
func merge(base, over InsertOpts) InsertOpts {
	if over.Queue != "" {
		base.Queue = over.Queue
	}
	if over.Priority != 0 {
		base.Priority = over.Priority
	}
	if !over.ScheduledAt.IsZero() {
		base.ScheduledAt = over.ScheduledAt
	}
	if over.MaxAttempts != 0 {
		base.MaxAttempts = over.MaxAttempts
	}
	if over.Timeout != 0 {
		base.Timeout = over.Timeout
	}
	if over.UniqueKey != "" {
		base.UniqueKey = over.UniqueKey
	}
	if over.Unique != nil {
		base.Unique = over.Unique
	}
	if len(over.Metadata) > 0 {
		base.Metadata = over.Metadata
	}
	return base
}

// Insert enqueues one job of args (opts may be nil) and returns once it is
// durable. A kind that no live daemon runs is ErrInvalid (see the package
// doc). With a unique key or options that match an existing job, that
// job is returned with Existed set and nothing is written.
func (c *Client) Insert(ctx context.Context, args Args, opts *InsertOpts) (*InsertResult, error) {
	rs, err := c.InsertMany(ctx, []InsertParams{{Args: args, Opts: opts}})
	if err != nil {
		return nil, err
	}
	if len(rs) != 1 {
		// An insert middleware passed on no job, or several.
		return nil, fmt.Errorf("client: insert of one job returned %d results: check the insert middleware", len(rs))
	}
	return &rs[0], nil
}

// InsertMany enqueues jobs in as few requests (transactions) as fit. Bad
// input in any of them refuses them all, and nothing is written; except
// over HTTP when the jobs need several requests (over 1,000 jobs or 16 MiB
// encoded), which the daemon checks one at a time: an error in a later one
// is returned with the results of the jobs inserted before it. A job with
// the unique key of an earlier one is answered with that job, Existed set.
func (c *Client) InsertMany(ctx context.Context, ps []InsertParams) ([]InsertResult, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	eps := make([]coordinator.EnqueueParams, len(ps))
	for i, p := range ps {
		ep, err := params(p)
		if err != nil {
			if len(ps) > 1 {
				return nil, fmt.Errorf("job %d: %w", i, err)
			}
			return nil, err
		}
		eps[i] = ep
	}
	return c.insert(ctx, eps)
}

// Get returns a job (ErrNotFound if there is none).
func (c *Client) Get(ctx context.Context, id string) (*Job, error) {
	if err := coordinator.ValidateID(id); err != nil {
		return nil, err
	}
	return noJobOnError(c.b.get(ctx, id))
}

// List returns one page of jobs; pass ListPage.Next as ListParams.After
// for the next. A page may come back short with Next set (it ends after
// about 16 MiB of records), and a filtered one even empty (it ends after
// looking at 10,000 jobs): page on until Next is empty, not until a page
// has fewer jobs than asked for.
func (c *Client) List(ctx context.Context, p ListParams) (ListPage, error) {
	page, err := c.b.list(ctx, p)
	if err != nil {
		return ListPage{}, err
	}
	return page, nil
}

// Cancel cancels a job: at once if it is not running; a running job gets a
// cancel request its daemon honours (Job.CancelRequested). A finished job
// is ErrWrongState.
func (c *Client) Cancel(ctx context.Context, id string) (*Job, error) {
	if err := coordinator.ValidateID(id); err != nil {
		return nil, err
	}
	return noJobOnError(c.b.cancel(ctx, id))
}

// CancelMany cancels every unfinished job that matches f.
func (c *Client) CancelMany(ctx context.Context, f CancelFilter) (CancelManyResult, error) {
	return c.b.cancelMany(ctx, f)
}

// Retry makes a discarded or cancelled job available again now (see
// coordinator.Coordinator.Retry); other states are ErrWrongState.
func (c *Client) Retry(ctx context.Context, id string) (*Job, error) {
	if err := coordinator.ValidateID(id); err != nil {
		return nil, err
	}
	return noJobOnError(c.b.retry(ctx, id))
}

// Delete deletes a finished job now; an unfinished one is ErrWrongState.
func (c *Client) Delete(ctx context.Context, id string) (*Job, error) {
	if err := coordinator.ValidateID(id); err != nil {
		return nil, err
	}
	return noJobOnError(c.b.remove(ctx, id))
}

// Wait blocks until job id is final (completed, discarded or cancelled)
// and returns it, or returns ctx's error. It returns the first final
// state it sees: a retry after that is not waited for.
func (c *Client) Wait(ctx context.Context, id string) (*Job, error) {
	if err := coordinator.ValidateID(id); err != nil {
		return nil, err
	}
	return noJobOnError(c.b.wait(ctx, id))
}

// Counts returns the number of jobs in each state, every state included
// (0 when none is in it). A job that changes state while Counts reads may
// be missed (see coordinator.Coordinator.Counts): fine for a gauge. It
// reads one index entry per job, finished jobs included, so poll it (every
// few seconds, say) rather than call it before every insert.
func (c *Client) Counts(ctx context.Context) (map[State]int, error) {
	return c.b.counts(ctx)
}

// Queues returns the known queues, sorted by name: those configured (a
// pause, a limit), those a live daemon serves and those with jobs
// available. Each comes with its configuration, its jobs ready to run now
// (Available, the backlog that admission control watches; jobs scheduled
// for later or waiting to retry are not counted), the slots of its limit
// held by running jobs, and the live daemons that serve it. It reads one
// index entry per available job, so poll it rather than call it before
// every insert.
func (c *Client) Queues(ctx context.Context) ([]QueueInfo, error) {
	return c.b.queues(ctx)
}

// QueuePage returns one page of the known queues (as Queues) in name
// order: those named after p.After, at most p.Limit of them (0: 100; at
// most coordinator.MaxListLimit). Pass QueuePage.Next as
// QueueListParams.After for the next page; Next is empty on the last.
// As List pages jobs, pages are read one at a time: a queue known from the
// first page to the last is on exactly one, one that becomes known or
// unknown meanwhile on at most one. A page bounds the answer (and the
// client's memory), not the reading: each page still reads every queue's
// configuration, the live daemons and the available index. A daemon from
// before queue paging (2026-12-06) cannot answer it: the error wraps
// errors.ErrUnsupported and says to upgrade it, or to call Queues.
func (c *Client) QueuePage(ctx context.Context, p QueueListParams) (QueuePage, error) {
	return c.b.queuePage(ctx, p)
}

// noJobOnError returns no job with an error, on every route: the
// coordinator returns the job as it is with ErrWrongState, which a
// daemon's 409 does not carry (read it with Get).
func noJobOnError(j *Job, err error) (*Job, error) {
	if err != nil {
		return nil, err
	}
	return j, nil
}

// coordBackend runs on a coordinator.
type coordBackend struct {
	c       *coordinator.Coordinator
	closeFn func() error
}

func (b coordBackend) insert(ctx context.Context, ps []coordinator.EnqueueParams) ([]InsertResult, error) {
	ps = asSent(ps)
	if err := b.checkKinds(ctx, ps); err != nil {
		return nil, unknownOutcome(err, true)
	}
	rs, err := b.c.EnqueueBatch(ctx, ps)
	if err != nil {
		err = unknownOutcome(err, true)
		if len(ps) > 1 && errors.Is(err, ErrOutcomeUnknown) {
			err = fmt.Errorf("jobs 0 to %d may or may not have been inserted: %w", len(ps)-1, err)
		}
		return nil, err
	}
	out := make([]InsertResult, len(rs))
	for i, r := range rs {
		j := r.Job
		if j != nil && (j.Checkpoint == nil || j.Result == nil) {
			// A new job, as built: as stored (and read by Get, or
			// through a daemon), its checkpoint and result are null.
			c := *j
			if c.Checkpoint == nil {
				c.Checkpoint = jsonNull
			}
			if c.Result == nil {
				c.Result = jsonNull
			}
			j = &c
		}
		out[i] = InsertResult{Job: j, Existed: r.Existed}
	}
	return out, nil
}

// jsonNull is the JSON null.
var jsonNull = json.RawMessage("null")

// asSent returns ps as a daemon receives them from a client (the JSON
// encoding of its request, see toWire): a payload and metadata that are
// JSON compacted, as encoding/json writes them (<, > and & escaped), and
// a null payload left out (the default, {}). Text that is not JSON is
// left for the coordinator to refuse. ps is not changed.
func asSent(ps []coordinator.EnqueueParams) []coordinator.EnqueueParams {
	out := slices.Clone(ps)
	for i := range out {
		p := &out[i]
		p.Payload, p.Metadata = encoded(p.Payload), encoded(p.Metadata)
		if string(p.Payload) == "null" {
			p.Payload = nil
		}
	}
	return out
}

// encoded returns raw as encoding/json writes it in a value, or raw when
// it is empty or not JSON.
func encoded(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return raw
	}
	enc, err := json.Marshal(raw)
	if err != nil {
		return raw
	}
	return enc
}

// unknownOutcome returns the error of a change sent to the store as a
// daemon's client reports it (ErrOutcomeUnknown, ADR 0041): an error that
// is not the store's or the coordinator's answer (a write whose answer
// was lost, etcdkv.ErrNoAnswer; the context's end while it was in flight;
// any other failure) leaves the change in doubt. insert says whether the
// change inserts jobs, for the advice. A change the store refused as
// too large is ErrInvalid, as a daemon's 413.
func unknownOutcome(err error, insert bool) error {
	if errors.Is(err, kv.ErrTxnTooLarge) && !errors.Is(err, coordinator.ErrInvalid) {
		// Nothing written, as a daemon's 413 (ErrInvalid) says.
		return fmt.Errorf("%w: the store refused the change as too large (its --max-request-bytes is below EtcdConfig.Limits.MaxRequestBytes?): pass the servers' value there, with a MaxPayloadBytes that fits it, or send less: %w", coordinator.ErrInvalid, err)
	}
	for _, answer := range []error{coordinator.ErrInvalid, coordinator.ErrNotFound, coordinator.ErrWrongState,
		coordinator.ErrConflict, coordinator.ErrEnqueueRefused, kv.ErrNoSpace, kv.ErrTxnTooLarge, kv.ErrClosed} {
		if err == nil || errors.Is(err, answer) {
			return err
		}
	}
	return fmt.Errorf("%w: %w: %s", err, ErrOutcomeUnknown, unknownAdvice(insert))
}

// checkKinds refuses, as the daemon's API does, a job of a kind that no
// live daemon runs: while daemons are live, such a job would only fail
// attempt after attempt ("no handler for kind") until discarded. With no
// daemon live (they may start later), every kind is accepted. Kinds that
// are not valid names are left to the coordinator's own check.
func (b coordBackend) checkKinds(ctx context.Context, ps []coordinator.EnqueueParams) error {
	var kinds []string
	read := false
	for i, p := range ps {
		if coordinator.ValidateKind(p.Kind) != nil {
			continue
		}
		if !read {
			live, err := b.c.LiveKinds(ctx)
			if err != nil {
				return err
			}
			if len(live) == 0 {
				return nil
			}
			kinds, read = live, true
		}
		if slices.Contains(kinds, p.Kind) {
			continue
		}
		err := fmt.Errorf("%w: unknown kind %s: the live daemons run %s: register a handler for it or check its spelling",
			coordinator.ErrInvalid, p.Kind, strings.Join(kinds, ", "))
		if len(ps) > 1 {
			return fmt.Errorf("job %d: %w", i, err)
		}
		return err
	}
	return nil
}

func (b coordBackend) get(ctx context.Context, id string) (*Job, error) { return b.c.Get(ctx, id) }
func (b coordBackend) list(ctx context.Context, p ListParams) (ListPage, error) {
	return b.c.List(ctx, p)
}
func (b coordBackend) cancel(ctx context.Context, id string) (*Job, error) {
	j, err := b.c.Cancel(ctx, id)
	return j, unknownOutcome(err, false)
}
func (b coordBackend) cancelMany(ctx context.Context, f CancelFilter) (CancelManyResult, error) {
	res, err := b.c.CancelMany(ctx, f)
	return res, unknownOutcome(err, false)
}
func (b coordBackend) retry(ctx context.Context, id string) (*Job, error) {
	j, err := b.c.Retry(ctx, id)
	return j, unknownOutcome(err, false)
}
func (b coordBackend) remove(ctx context.Context, id string) (*Job, error) {
	j, err := b.c.Delete(ctx, id)
	return j, unknownOutcome(err, false)
}
func (b coordBackend) wait(ctx context.Context, id string) (*Job, error) { return b.c.Wait(ctx, id) }
func (b coordBackend) counts(ctx context.Context) (map[State]int, error) {
	return b.c.Counts(ctx)
}
func (b coordBackend) queues(ctx context.Context) ([]QueueInfo, error) {
	return b.c.Queues(ctx)
}
func (b coordBackend) queuePage(ctx context.Context, p QueueListParams) (QueuePage, error) {
	page, err := b.c.QueuePage(ctx, p)
	if err == nil && page.Queues == nil {
		page.Queues = []QueueInfo{}
	}
	return page, err
}
func (b coordBackend) close() error {
	if b.closeFn != nil {
		return b.closeFn()
	}
	return nil
}
