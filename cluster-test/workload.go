package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// jobSpec is one job the workload enqueues: of the history kind, or of
// execKind.
type jobSpec struct {
	// Kind is execKind or "" (the history kind).
	Kind        string        `json:"kind,omitempty"`
	MS          int           `json:"ms"`
	FailTimes   int           `json:"fail_times"`
	MaxAttempts int           `json:"max_attempts"`
	Delay       time.Duration `json:"delay"`
	// Queue is limitedQueue or "" (the default queue).
	Queue string `json:"queue,omitempty"`
	// UniqueKey, if set, is one of uniqueKeys keys: a live job with it
	// is returned instead of a new one.
	UniqueKey string `json:"unique_key,omitempty"`
}

// uniqueKeys is how many unique keys the workload's unique jobs share
// (uk-0 ...): few, so that enqueues often find a live job with theirs.
const uniqueKeys = 3

// limitedQueue is the queue under queue control: a global limit of
// queueLimit running jobs across all daemons, set before the workload
// starts, and paused now and then (workload.pauseLoop). Every daemon
// serves it.
const (
	limitedQueue = "limited"
	queueLimit   = 2
)

// tickName is a periodic schedule that every daemon declares: a history
// job of 20 ms every tickEvery (tickSpec), enqueued by the maintenance
// leader of the moment.
const (
	tickName  = "tick"
	tickSpec  = "@every 1s"
	tickEvery = time.Second
)

// execShare is the share of the workload's jobs of execKind.
const execShare = 0.17

func (s jobSpec) kind() string {
	if s.Kind != "" {
		return s.Kind
	}
	return "history"
}

func (s jobSpec) payload() json.RawMessage {
	if s.Kind == execKind {
		b, _ := json.Marshal(map[string]int{"ms": s.MS})
		return b
	}
	b, _ := json.Marshal(map[string]int{"ms": s.MS, "fail_times": s.FailTimes})
	return b
}

// JobInfo is what the workload did with one job.
type JobInfo struct {
	ID         string    `json:"id"`
	Spec       jobSpec   `json:"spec"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	// Cancels are the cancel requests sent for the job.
	Cancels []CancelReq `json:"cancels,omitempty"`
}

// CancelReq is one cancel request and what the store answered.
type CancelReq struct {
	At     time.Time `json:"at"`
	Result string    `json:"result"` // the state returned, or the error
	// Acked is when the answer came back (zero in runs saved before it
	// was recorded).
	Acked time.Time `json:"acked,omitzero"`
}

// target is where the workload sends its requests.
type target interface {
	enqueue(ctx context.Context, specs []jobSpec) ([]string, error)
	cancel(ctx context.Context, id string) (string, error)
	// queue pauses or resumes queue q (op "pause" or "resume"), or, with
	// op "", sets its global limit to limit.
	queue(ctx context.Context, q, op string, limit int) error
	list(ctx context.Context) (map[string]*coordinator.Job, error)
	close()
}

// sharedTarget talks to etcd directly through the coordinator package, on
// its own connection to all members (not through the daemons' proxies).
type sharedTarget struct {
	store *etcdkv.Store
	coord *coordinator.Coordinator
}

func newSharedTarget(cli *clientv3.Client, ns string) (*sharedTarget, error) {
	store := etcdkv.New(cli, etcdkv.Options{})
	c, err := coordinator.New(store, coordinator.Config{Namespace: ns, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	return &sharedTarget{store: store, coord: c}, nil
}

func (t *sharedTarget) enqueue(ctx context.Context, specs []jobSpec) ([]string, error) {
	now := time.Now()
	ps := make([]coordinator.EnqueueParams, len(specs))
	for i, s := range specs {
		ps[i] = coordinator.EnqueueParams{Kind: s.kind(), Payload: s.payload(), MaxAttempts: s.MaxAttempts, Queue: s.Queue, UniqueKey: s.UniqueKey}
		if s.Delay > 0 {
			ps[i].ScheduledAt = now.Add(s.Delay)
		}
	}
	res, err := t.coord.EnqueueBatch(ctx, ps)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids, nil
}

func (t *sharedTarget) cancel(ctx context.Context, id string) (string, error) {
	j, err := t.coord.Cancel(ctx, id)
	if err != nil {
		return "", err
	}
	if j.CancelRequested {
		return "cancel-requested", nil
	}
	return string(j.State), nil
}

func (t *sharedTarget) queue(ctx context.Context, q, op string, limit int) error {
	var err error
	switch op {
	case "pause":
		_, _, err = t.coord.PauseQueue(ctx, q)
	case "resume":
		_, _, err = t.coord.ResumeQueue(ctx, q)
	default:
		_, _, err = t.coord.SetQueueLimit(ctx, q, limit)
	}
	return err
}

func (t *sharedTarget) list(ctx context.Context) (map[string]*coordinator.Job, error) {
	out := map[string]*coordinator.Job{}
	after := ""
	for {
		page, err := t.coord.List(ctx, coordinator.ListParams{Limit: coordinator.MaxListLimit, After: after})
		if err != nil {
			return nil, err
		}
		for _, j := range page.Jobs {
			out[j.ID] = j
		}
		if page.Next == "" {
			return out, nil
		}
		after = page.Next
	}
}

func (t *sharedTarget) close() { _ = t.store.Close() }

// httpTarget talks to the embedded daemon's HTTP API (the store directory
// is locked by the daemon).
type httpTarget struct {
	addr func() string
	hc   *http.Client
}

func (t *httpTarget) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+t.addr()+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, out)
}

func (t *httpTarget) enqueue(ctx context.Context, specs []jobSpec) ([]string, error) {
	type createReq struct {
		Kind        string          `json:"kind"`
		Payload     json.RawMessage `json:"payload"`
		Delay       string          `json:"delay,omitempty"`
		MaxAttempts int             `json:"max_attempts,omitempty"`
		Queue       string          `json:"queue,omitempty"`
		UniqueKey   string          `json:"unique_key,omitempty"`
	}
	reqs := make([]createReq, len(specs))
	for i, s := range specs {
		reqs[i] = createReq{Kind: s.kind(), Payload: s.payload(), MaxAttempts: s.MaxAttempts, Queue: s.Queue, UniqueKey: s.UniqueKey}
		if s.Delay > 0 {
			reqs[i].Delay = s.Delay.String()
		}
	}
	var resp struct {
		Jobs []*coordinator.Job `json:"jobs"`
	}
	if err := t.do(ctx, "POST", "/v1/jobs/batch", map[string]any{"jobs": reqs}, &resp); err != nil {
		return nil, err
	}
	ids := make([]string, len(resp.Jobs))
	for i, j := range resp.Jobs {
		ids[i] = j.ID
	}
	return ids, nil
}

func (t *httpTarget) cancel(ctx context.Context, id string) (string, error) {
	var resp struct {
		Job *coordinator.Job `json:"job"`
	}
	if err := t.do(ctx, "POST", "/v1/jobs/"+id+"/cancel", nil, &resp); err != nil {
		return "", err
	}
	if resp.Job.CancelRequested {
		return "cancel-requested", nil
	}
	return string(resp.Job.State), nil
}

func (t *httpTarget) queue(ctx context.Context, q, op string, limit int) error {
	var out json.RawMessage
	if op == "" {
		return t.do(ctx, "PUT", "/v1/queues/"+q+"/limit?force=true", map[string]int{"limit": limit}, &out)
	}
	return t.do(ctx, "POST", "/v1/queues/"+q+"/"+op+"?force=true", nil, &out)
}

func (t *httpTarget) list(ctx context.Context) (map[string]*coordinator.Job, error) {
	out := map[string]*coordinator.Job{}
	after := ""
	for {
		var page coordinator.ListPage
		q := url.Values{"limit": {fmt.Sprint(coordinator.MaxListLimit)}}
		if after != "" {
			q.Set("after", after)
		}
		if err := t.do(ctx, "GET", "/v1/jobs?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		for _, j := range page.Jobs {
			out[j.ID] = j
		}
		if page.Next == "" {
			return out, nil
		}
		after = page.Next
	}
}

func (t *httpTarget) close() { t.hc.CloseIdleConnections() }

// workload enqueues jobs at a steady rate and cancels some of them,
// until its context ends.
type workload struct {
	h   *harness
	t   target
	rng *rand.Rand
	mu  sync.Mutex

	jobs  map[string]*JobInfo
	order []string
	// queueOps are the pauses and resumes of limitedQueue, in order.
	queueOps []QueueOp
	// uniqueHits counts enqueues answered with a job enqueued before.
	uniqueHits atomic.Int64
	inFl       atomic.Int64
	enqErrs    atomic.Int64
	skipped    atomic.Int64
	cancels    atomic.Int64
}

func newWorkload(h *harness, t target, seed uint64) *workload {
	return &workload{h: h, t: t, rng: rand.New(rand.NewPCG(seed, 0x776f726b)), jobs: map[string]*JobInfo{}}
}

// spec draws one job: execShare of them of execKind, 0.5 to 6 s of
// work; the others of the history kind, mostly short, some long; some
// fail once and are retried, some fail until discarded; some are delayed.
func (w *workload) spec() jobSpec {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.rng
	if r.Float64() < execShare {
		return jobSpec{Kind: execKind, MS: 500 + r.IntN(5500), MaxAttempts: 25}
	}
	s := jobSpec{MaxAttempts: 25}
	switch x := r.Float64(); {
	case x < 0.6:
		s.MS = 50 + r.IntN(750)
	case x < 0.9:
		s.MS = 800 + r.IntN(1700)
	default:
		s.MS = 2500 + r.IntN(2500)
	}
	switch x := r.Float64(); {
	case x < 0.08:
		s.FailTimes = 1
	case x < 0.11:
		s.FailTimes, s.MaxAttempts = 2, 2 // discarded after its second attempt
	}
	if r.Float64() < 0.1 {
		s.Delay = time.Duration(1000+r.IntN(7000)) * time.Millisecond
	}
	if r.Float64() < 0.1 {
		// Short, so that the limit binds only in bursts (after a
		// pause, say) rather than building a backlog.
		s.Queue, s.MS = limitedQueue, 50+r.IntN(350)
	}
	if r.Float64() < 0.05 {
		// One shape for all: an enqueue answered with an earlier job
		// of its key keeps that job's spec.
		s = jobSpec{MS: 2000, MaxAttempts: 25, UniqueKey: fmt.Sprintf("uk-%d", r.IntN(uniqueKeys))}
	}
	return s
}

func (w *workload) run(ctx context.Context, rate float64) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(2)
	go func() { defer wg.Done(); w.cancelLoop(ctx) }()
	go func() { defer wg.Done(); w.pauseLoop(ctx) }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	acc := 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		acc += rate / 10
		n := int(acc)
		if n == 0 {
			continue
		}
		acc -= float64(n)
		if w.inFl.Load() >= 4 {
			w.skipped.Add(int64(n)) // the store is stalled: do not pile up
			continue
		}
		specs := make([]jobSpec, n)
		for i := range specs {
			specs[i] = w.spec()
		}
		w.inFl.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.inFl.Add(-1)
			ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 8*time.Second)
			defer cancel()
			at := time.Now()
			ids, err := w.t.enqueue(ectx, specs)
			if err != nil {
				w.enqErrs.Add(1)
				return
			}
			w.mu.Lock()
			for i, id := range ids {
				if w.jobs[id] != nil {
					// A unique key's live job, enqueued earlier.
					w.uniqueHits.Add(1)
					continue
				}
				w.jobs[id] = &JobInfo{ID: id, Spec: specs[i], EnqueuedAt: at}
				w.order = append(w.order, id)
			}
			w.mu.Unlock()
		}()
	}
}

// cancelLoop cancels a random recent job about once a second: some are
// queued (delayed ones especially), most are running or about to.
func (w *workload) cancelLoop(ctx context.Context) {
	for {
		w.mu.Lock()
		d := time.Duration(500+w.rng.IntN(1000)) * time.Millisecond
		var id string
		if n := len(w.order); n > 0 {
			id = w.order[n-1-w.rng.IntN(min(n, 150))]
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		if id == "" {
			continue
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 8*time.Second)
		at := time.Now()
		res, err := w.t.cancel(cctx, id)
		acked := time.Now()
		cancel()
		if err != nil {
			res = "error: " + err.Error()
		}
		w.cancels.Add(1)
		w.mu.Lock()
		w.jobs[id].Cancels = append(w.jobs[id].Cancels, CancelReq{At: at, Result: res, Acked: acked})
		w.mu.Unlock()
	}
}

// QueueOp is one pause or resume of limitedQueue and its answer.
type QueueOp struct {
	Op    string    `json:"op"`
	At    time.Time `json:"at"`
	Acked time.Time `json:"acked"`
	// Tries counts the requests sent: a store without quorum refuses some.
	Tries int `json:"tries"`
}

// pauseLoop pauses limitedQueue for 1-4 s every 10-20 s. A pause is
// retried until the store takes it, and so is the resume that follows,
// after ctx ends too: a queue left paused would leave its jobs queued.
func (w *workload) pauseLoop(ctx context.Context) {
	for {
		w.mu.Lock()
		wait := time.Duration(10000+w.rng.IntN(10000)) * time.Millisecond
		hold := time.Duration(1000+w.rng.IntN(3000)) * time.Millisecond
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		paused := w.queueOp(ctx, "pause")
		if paused {
			select {
			case <-ctx.Done():
			case <-time.After(hold):
			}
		}
		// Also after a pause cut short by ctx: its answer may have been
		// lost after the store took it.
		w.queueOp(context.WithoutCancel(ctx), "resume")
		if !paused {
			return
		}
	}
}

// queueOp sends op for limitedQueue until the store takes it or ctx ends
// (a resume is given 2 minutes: longer than any fault lasts). It reports
// whether the store took it. A request in flight when ctx ends is let
// finish: cut off, a pause could still land after the resume that
// follows, which would find the queue running, write nothing, and leave
// it paused for good.
func (w *workload) queueOp(ctx context.Context, op string) bool {
	qo := QueueOp{Op: op, At: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		qo.Tries++
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := w.t.queue(rctx, limitedQueue, op, -1)
		rcancel()
		if err == nil {
			qo.Acked = time.Now()
			w.mu.Lock()
			w.queueOps = append(w.queueOps, qo)
			w.mu.Unlock()
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	if op == "resume" {
		w.h.logf("could not resume queue %s for 2 minutes: its jobs stay queued", limitedQueue)
	}
	return false
}

func (w *workload) snapshot() map[string]*JobInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]*JobInfo, len(w.jobs))
	for k, v := range w.jobs {
		c := *v
		out[k] = &c
	}
	return out
}

func (w *workload) queueOpsSnapshot() []QueueOp {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.queueOps)
}

func (w *workload) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.jobs)
}
