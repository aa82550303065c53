package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/internal/testutil"
)

// TestRandomOperationsKeepKeysConsistent drives one namespace through a
// random sequence of operations (enqueues, claims, every outcome of a run,
// operators' cancels, retries and deletes, promotion, retention, daemons
// that die and are reaped, stale and forged runs) on a fake clock, keeps a
// model of what each job must be, and after every step reads the whole
// namespace and checks the key layout against the records and the model
// (see modelHarness.check). Its choices come from one seed:
//
//	go test -run TestRandomOperationsKeepKeysConsistent ./coordinator/ -model.seed=N
//
// (or LEASEHOLD_MODEL_SEED=N, which also works with ./...). A failure
// names the seed, the step, the last steps and the keys of the jobs
// involved. Spread claims pick among their candidates
// with the package's own randomness, so a seed replays every step exactly
// only with -model.spread=false. -model.steps sets the number of steps per
// backend.
func TestRandomOperationsKeepKeysConsistent(t *testing.T) {
	seed := modelSeed(t)
	steps := *modelStepsFlag
	if steps <= 0 {
		steps = 400
		if testing.Short() {
			steps = 100
		}
	}
	t.Run("localstore", func(t *testing.T) {
		runModel(t, "localstore", tempLocalstore(t), seed, steps)
	})
	t.Run("etcd", func(t *testing.T) {
		runModel(t, "etcd", tempEtcdStore(t, etcdtest.WithConfig(func(c *embed.Config) { c.UnsafeNoFsync = true })), seed, steps)
	})
}

var (
	modelSeedFlag   = flag.Uint64("model.seed", 0, "seed of TestRandomOperationsKeepKeysConsistent (0: $LEASEHOLD_MODEL_SEED, else a fixed default)")
	modelStepsFlag  = flag.Int("model.steps", 0, "steps per backend of TestRandomOperationsKeepKeysConsistent (0: the default)")
	modelSpreadFlag = flag.Bool("model.spread", true, "let TestRandomOperationsKeepKeysConsistent make spread claims (random picks: false replays a seed exactly)")
)

// modelDefaultSeed is the seed of the default run.
const modelDefaultSeed = 1

func modelSeed(t *testing.T) uint64 {
	if seed, ok := testutil.Seed(t, *modelSeedFlag, "LEASEHOLD_MODEL_SEED"); ok {
		return seed
	}
	return modelDefaultSeed
}

// modelClock is the jobs' clock: it moves only when the test advances it.
// Nothing the test calls waits on After, whose timers never fire. (This is
// an internal test: it cannot use coordtest.Clock, whose package imports
// this one.)
type modelClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *modelClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *modelClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.Now()
	}
	return ch
}

func (c *modelClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// The namespace's queues, kinds and configuration. Queue modelLimited has
// a global limit of modelLimit running jobs.
var (
	modelQueues  = []string{DefaultQueue, "q1", "q2", "lim"}
	modelKinds   = []string{"ka", "kb", "kc"}
	modelUKeys   = []string{"u1", "u2", "u3"}
	modelPayload = []string{`{}`, `{"n":1}`, `{"n":2}`, `{"a":1,"b":[true,null]}`, `{ "b" : [true, null], "a" : 1 }`, `"s"`, `[1,2,3]`}
)

const (
	modelLimited    = "lim"
	modelLimit      = 2
	modelRetention  = 5 * time.Minute
	modelMaxRescues = 1
	modelHistory    = 15
)

func modelRetryPolicy(attempt int, _ *Job) time.Duration {
	return time.Duration(attempt) * 20 * time.Second
}

// modelDaemon is one daemon: its own coordinator and session.
type modelDaemon struct {
	name string
	c    *Coordinator
	sess *Session
	dead bool // its lease was revoked (or its session closed)
}

// modelJob is what the test knows a job must be.
type modelJob struct {
	n            int
	id           string
	kind, queue  string
	state        State
	deleted      bool
	attempt      int
	maxAttempts  int
	rescues      int
	cancelReq    bool // a cancel request waits (running jobs only)
	uniqueKey    string
	uniqueStates []State
	run          *modelRun     // the run that holds it, while running
	tokens       []fence.Token // every run's token, oldest first
}

func (m *modelJob) String() string { return fmt.Sprintf("J%d(%s)", m.n, m.id[len(m.id)-6:]) }

func (m *modelJob) holdsUnique() bool {
	return m.uniqueKey != "" && !m.deleted && (!m.state.Final() || slices.Contains(m.uniqueStates, m.state))
}

// modelRun is a run the test holds.
type modelRun struct {
	n     int
	run   *Run
	job   *modelJob
	d     *modelDaemon
	token fence.Token
	done  bool // a final write was accepted
	lost  bool // a write was refused: the run is over
}

func (r *modelRun) String() string {
	return fmt.Sprintf("R%d[%s %s tok %d]", r.n, r.d.name, r.job, r.token)
}

// modelHarness runs the random steps on one store.
type modelHarness struct {
	t       *testing.T
	backend string
	seed    uint64
	rng     *rand.Rand
	store   kv.Store
	clock   *modelClock
	cfg     Config
	c       *Coordinator // the operators'
	ctx     context.Context

	daemons  []*modelDaemon
	byWorker map[string]*modelDaemon
	jobs     []*modelJob // in creation order
	byID     map[string]*modelJob
	runs     []*modelRun
	paused   map[string]bool

	step    int
	tally   map[string]int // what the steps did, for the log
	history []string
	prev    *modelScan
	skipped map[string]int // invariants left out (findings), by name
}

func runModel(t *testing.T, backend string, store kv.Store, seed uint64, steps int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	clock := &modelClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	h := &modelHarness{
		t: t, backend: backend, seed: seed, store: store, clock: clock, ctx: ctx,
		rng:      rand.New(rand.NewPCG(seed, 0x6c656173)),
		byWorker: map[string]*modelDaemon{},
		byID:     map[string]*modelJob{},
		paused:   map[string]bool{},
		skipped:  map[string]int{},
		tally:    map[string]int{},
	}
	h.cfg = Config{
		Clock:       clock,
		Logger:      slog.New(slog.DiscardHandler),
		Namespace:   "model",
		Retention:   modelRetention,
		MaxRescues:  modelMaxRescues,
		RetryPolicy: modelRetryPolicy,
	}
	h.c = h.newCoordinator()
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		for _, d := range h.daemons {
			_ = d.sess.Close(cctx)
		}
	})
	if _, _, err := h.c.SetQueueLimit(ctx, modelLimited, modelLimit); err != nil {
		t.Fatal(err)
	}
	for range 2 + h.rng.IntN(2) {
		h.startDaemon()
	}
	h.check(false)
	for h.step = 1; h.step <= steps; h.step++ {
		desc, noWrite := h.randomStep()
		h.record(desc)
		h.check(noWrite)
	}
	for name, n := range h.skipped {
		t.Logf("finding %s: left out of the check %d times", name, n)
	}
	t.Logf("seed %d: %d steps, %d jobs, %d runs, %d daemons; %v", seed, steps, len(h.jobs), len(h.runs), len(h.daemons), h.tally)
}

func (h *modelHarness) newCoordinator() *Coordinator {
	c, err := New(h.store, h.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (h *modelHarness) startDaemon() *modelDaemon {
	name := fmt.Sprintf("d%d", len(h.daemons)+1)
	c := h.newCoordinator()
	// The session's clock is the real one: the jobs' clock jumps by minutes,
	// and an etcd lease must be renewed in real time.
	sess, err := c.NewSession(h.ctx, SessionConfig{TTL: 60 * time.Second, Worker: WorkerInfo{ID: "model-" + name}})
	if err != nil {
		h.t.Fatalf("NewSession: %v", err)
	}
	d := &modelDaemon{name: name, c: c, sess: sess}
	h.daemons = append(h.daemons, d)
	h.byWorker[sess.WorkerID()] = d
	return d
}

func (h *modelHarness) count(what string, n int) { h.tally[what] += n }

func (h *modelHarness) record(desc string) {
	line := fmt.Sprintf("step %d: %s", h.step, desc)
	h.history = append(h.history, line)
	if len(h.history) > modelHistory {
		h.history = h.history[len(h.history)-modelHistory:]
	}
}

// fatalf fails the test with the seed, the step and the last steps.
func (h *modelHarness) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s\n%s", fmt.Sprintf(format, args...), h.context())
}

func (h *modelHarness) context() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backend %s, seed %d, step %d (rerun: go test -run 'TestRandomOperationsKeepKeysConsistent/%s' ./coordinator/ -model.seed=%d -model.spread=%t",
		h.backend, h.seed, h.step, h.backend, h.seed, *modelSpreadFlag)
	if *modelSpreadFlag {
		b.WriteString("; spread claims pick at random, so the steps after the first one may differ")
	}
	b.WriteString(")\nlast steps:\n")
	for _, l := range h.history {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// failStep fails the test in the middle of step desc.
func (h *modelHarness) failStep(desc, format string, args ...any) {
	h.t.Helper()
	h.record(desc + " [failed here]")
	h.fatalf(format, args...)
}

// weighted picks an index by weight.
func (h *modelHarness) weighted(ws []int) int {
	total := 0
	for _, w := range ws {
		total += w
	}
	n := h.rng.IntN(total)
	for i, w := range ws {
		if n < w {
			return i
		}
		n -= w
	}
	return len(ws) - 1
}

func (h *modelHarness) live() []*modelDaemon {
	var out []*modelDaemon
	for _, d := range h.daemons {
		if !d.dead {
			out = append(out, d)
		}
	}
	return out
}

func (h *modelHarness) dead() []*modelDaemon {
	var out []*modelDaemon
	for _, d := range h.daemons {
		if d.dead {
			out = append(out, d)
		}
	}
	return out
}

// pickBusyDaemon returns a live daemon, mostly one that runs jobs.
func (h *modelHarness) pickBusyDaemon() *modelDaemon {
	var busy []*modelDaemon // once per job it runs
	for _, m := range h.jobs {
		if !m.deleted && m.state == StateRunning && !m.run.d.dead {
			busy = append(busy, m.run.d)
		}
	}
	if len(busy) > 0 && h.rng.IntN(4) > 0 {
		return busy[h.rng.IntN(len(busy))]
	}
	live := h.live()
	return live[h.rng.IntN(len(live))]
}

// pickJob returns a job, mostly a live one; nil when there is none.
func (h *modelHarness) pickJob() *modelJob {
	if len(h.jobs) == 0 {
		return nil
	}
	var live []*modelJob
	for _, m := range h.jobs {
		if !m.deleted {
			live = append(live, m)
		}
	}
	if len(live) > 0 && h.rng.IntN(10) > 0 {
		return live[h.rng.IntN(len(live))]
	}
	return h.jobs[h.rng.IntN(len(h.jobs))]
}

func (h *modelHarness) randomStep() (desc string, noWrite bool) {
	ops := []struct {
		w  int
		fn func() (string, bool)
	}{
		{14, h.opEnqueue},
		{5, h.opEnqueueBatch},
		{24, h.opClaim},
		{1, h.opClaimDead},
		{28, h.opRunWrite},
		{2, h.opForgedRun},
		{5, h.opCancel},
		{2, h.opCancelMany},
		{7, h.opRetry},
		{4, h.opDelete},
		{5, h.opAdvance},
		{4, h.opPromote},
		{3, h.opPurge},
		{2, h.opKill},
		{4, h.opReap},
		{2, h.opPause},
		{3, h.opReleaseOrphans},
	}
	ws := make([]int, len(ops))
	for i, o := range ops {
		ws[i] = o.w
	}
	return ops[h.weighted(ws)].fn()
}

// genParams returns random enqueue parameters.
func (h *modelHarness) genParams(now time.Time) EnqueueParams {
	r := h.rng
	p := EnqueueParams{Kind: modelKinds[r.IntN(len(modelKinds))], Queue: modelQueues[r.IntN(len(modelQueues))]}
	if p.Queue == DefaultQueue && r.IntN(2) == 0 {
		p.Queue = ""
	}
	p.Priority = r.IntN(5)
	switch r.IntN(10) {
	case 0, 1, 2:
		p.ScheduledAt = now.Add(time.Duration(1+r.IntN(300)) * time.Second)
	case 3:
		p.ScheduledAt = now.Add(-time.Duration(1+r.IntN(300)) * time.Second)
	}
	p.MaxAttempts = []int{0, 1, 1, 2, 3}[r.IntN(5)]
	p.Payload = json.RawMessage(modelPayload[r.IntN(len(modelPayload))])
	if r.IntN(4) == 0 {
		p.Payload = nil
	}
	switch r.IntN(8) {
	case 0, 1:
		p.UniqueKey = modelUKeys[r.IntN(len(modelUKeys))]
	case 2, 3:
		u := &UniqueOpts{ByArgs: r.IntN(2) == 0, ByQueue: r.IntN(2) == 0}
		if r.IntN(3) == 0 {
			u.ByPeriod = 5 * time.Minute
		}
		for _, st := range []State{StateCompleted, StateDiscarded, StateCancelled} {
			if r.IntN(2) == 0 {
				u.ByState = append(u.ByState, st)
			}
		}
		p.Unique = u
		if r.IntN(3) == 0 {
			p.UniqueKey = modelUKeys[r.IntN(len(modelUKeys))]
		}
	}
	return p
}

// uniqueKeyOf returns the unique key an enqueue of p at now asks for.
func (h *modelHarness) uniqueKeyOf(p EnqueueParams, now time.Time) string {
	q := p
	if err := q.normalize(h.c.cfg.MaxPayloadBytes); err != nil {
		h.t.Fatalf("generated params are invalid: %v", err)
	}
	return deriveUniqueKey(&q, now)
}

// holder returns the job that holds unique key k, per the model.
func (h *modelHarness) holder(k string) *modelJob {
	for _, m := range h.jobs {
		if m.uniqueKey == k && m.holdsUnique() {
			return m
		}
	}
	return nil
}

func describeParams(p EnqueueParams, now time.Time) string {
	s := fmt.Sprintf("%s/%s p%d max%d", p.Kind, p.Queue, p.Priority, p.MaxAttempts)
	if p.ScheduledAt.After(now) {
		s += fmt.Sprintf(" in %s", p.ScheduledAt.Sub(now))
	}
	if p.UniqueKey != "" {
		s += " key=" + p.UniqueKey
	}
	if p.Unique != nil {
		s += fmt.Sprintf(" unique{args %t queue %t period %s states %v}", p.Unique.ByArgs, p.Unique.ByQueue, p.Unique.ByPeriod, p.Unique.ByState)
	}
	return s
}

func (h *modelHarness) opEnqueue() (string, bool) {
	now := h.clock.Now()
	p := h.genParams(now)
	return h.enqueue([]EnqueueParams{p}, false)
}

func (h *modelHarness) opEnqueueBatch() (string, bool) {
	now := h.clock.Now()
	ps := make([]EnqueueParams, 2+h.rng.IntN(3))
	for i := range ps {
		ps[i] = h.genParams(now)
	}
	return h.enqueue(ps, true)
}

// enqueue enqueues ps (as a batch when batch) and checks the result against
// the unique keys the model says are held.
func (h *modelHarness) enqueue(ps []EnqueueParams, batch bool) (string, bool) {
	now := h.clock.Now()
	keys := make([]string, len(ps))
	dup := false
	seen := map[string]bool{}
	var descs []string
	for i, p := range ps {
		keys[i] = h.uniqueKeyOf(p, now)
		if keys[i] != "" && seen[keys[i]] {
			dup = true
		}
		seen[keys[i]] = keys[i] != ""
		descs = append(descs, describeParams(p, now))
	}
	desc := "enqueue " + strings.Join(descs, "; ")
	var res []EnqueueResult
	var err error
	if batch {
		desc = "batch " + desc
		res, err = h.c.EnqueueBatch(h.ctx, ps)
	} else {
		var r EnqueueResult
		if r, err = h.c.Enqueue(h.ctx, ps[0]); err == nil {
			res = []EnqueueResult{r}
		}
	}
	if dup {
		if !errors.Is(err, ErrInvalid) {
			h.failStep(desc, "a batch with one unique key twice: err = %v, want ErrInvalid", err)
		}
		h.count("enqueue refused (key twice)", 1)
		return desc + " -> ErrInvalid (unique key twice)", true
	}
	if err != nil {
		h.failStep(desc, "enqueue: %v", err)
	}
	var outs []string
	wrote := false
	for i, r := range res {
		if r.Job == nil {
			h.failStep(desc, "enqueue result %d has no job", i)
		}
		if hm := h.holder(keys[i]); keys[i] != "" && hm != nil {
			if !r.Existed || r.Job.ID != hm.id || r.Job.State != hm.state {
				h.failStep(desc, "job %d: unique key %q is held by %s (%s): got existed=%t job %s %s", i, keys[i], hm, hm.state, r.Existed, r.Job.ID, r.Job.State)
			}
			outs = append(outs, "existed "+hm.String())
			h.count("enqueue existed", 1)
			continue
		}
		if r.Existed {
			h.failStep(desc, "job %d: unique key %q held by no job, but the enqueue returned existing job %s (%s)", i, keys[i], r.Job.ID, r.Job.State)
		}
		want := StateAvailable
		if ps[i].ScheduledAt.After(now) {
			want = StateScheduled
		}
		if r.Job.State != want || r.Job.UniqueKey != keys[i] {
			h.failStep(desc, "job %d: new job is %s with unique key %q, want %s and %q", i, r.Job.State, r.Job.UniqueKey, want, keys[i])
		}
		if h.byID[r.Job.ID] != nil {
			h.failStep(desc, "job %d: new job %s has the id of an earlier one", i, r.Job.ID)
		}
		m := &modelJob{
			n: len(h.jobs) + 1, id: r.Job.ID, kind: r.Job.Kind, queue: r.Job.Queue, state: want,
			maxAttempts: r.Job.MaxAttempts, uniqueKey: r.Job.UniqueKey, uniqueStates: r.Job.UniqueStates,
		}
		h.jobs = append(h.jobs, m)
		h.byID[m.id] = m
		wrote = true
		h.count("enqueue new", 1)
		outs = append(outs, fmt.Sprintf("new %s %s", m, m.state))
	}
	return desc + " -> " + strings.Join(outs, ", "), !wrote
}

// available returns the model's available jobs of queue.
func (h *modelHarness) available(queue string) []*modelJob {
	var out []*modelJob
	for _, m := range h.jobs {
		if !m.deleted && m.state == StateAvailable && m.queue == queue {
			out = append(out, m)
		}
	}
	return out
}

func (h *modelHarness) opClaim() (string, bool) {
	live := h.live()
	d := live[h.rng.IntN(len(live))]
	queue := modelQueues[h.rng.IntN(len(modelQueues))]
	n := 1 + h.rng.IntN(3)
	spread := h.rng.IntN(3) == 0 && *modelSpreadFlag
	desc := fmt.Sprintf("claim %s %s n=%d spread=%t", d.name, queue, n, spread)
	avail := h.available(queue)
	want := min(n, len(avail))
	if queue == modelLimited {
		want = min(want, modelLimit-h.prev.slotsOf(queue))
	}
	if h.paused[queue] {
		want = 0
	}
	runs, st, err := d.c.Claim(h.ctx, d.sess, queue, n, spread)
	if err != nil {
		h.failStep(desc, "claim: %v", err)
	}
	if len(runs) != want {
		h.failStep(desc, "claim took %d jobs (stats %+v), want %d: the model has %d available in %s", len(runs), st, want, len(avail), queue)
	}
	if !spread {
		// Highest priority, then oldest, first: the queue's index order.
		head := h.prev.availableOrder(queue)
		for i, r := range runs {
			if i >= len(head) || r.Job().ID != head[i] {
				h.failStep(desc, "claim %d took %s; the queue's index begins %v", i, r.Job().ID, head[:min(len(head), want)])
			}
		}
	}
	var outs []string
	for _, r := range runs {
		j := r.Job()
		m := h.byID[j.ID]
		if m == nil || m.deleted || m.state != StateAvailable || m.queue != queue {
			h.failStep(desc, "claim took %s, which the model has as %v", j.ID, m)
		}
		m.state = StateRunning
		m.attempt++
		if j.Attempt != m.attempt || j.Owner != d.sess.WorkerID() || j.Token != r.Token() {
			h.failStep(desc, "claimed %s: run's job has attempt %d owner %s token %d; want attempt %d owner %s token %d", m, j.Attempt, j.Owner, j.Token, m.attempt, d.sess.WorkerID(), r.Token())
		}
		if len(m.tokens) > 0 && r.Token() <= m.tokens[len(m.tokens)-1] {
			h.failStep(desc, "claimed %s with token %d, not above its last %d", m, r.Token(), m.tokens[len(m.tokens)-1])
		}
		mr := &modelRun{n: len(h.runs) + 1, run: r, job: m, d: d, token: r.Token()}
		m.run = mr
		m.tokens = append(m.tokens, r.Token())
		h.runs = append(h.runs, mr)
		outs = append(outs, mr.String())
	}
	h.count("claimed", len(runs))
	return fmt.Sprintf("%s -> %v", desc, outs), len(runs) == 0
}

// opClaimDead claims through a daemon whose lease is gone: nothing may be
// taken.
func (h *modelHarness) opClaimDead() (string, bool) {
	dead := h.dead()
	if len(dead) == 0 {
		return h.opClaim()
	}
	d := dead[h.rng.IntN(len(dead))]
	queue := modelQueues[h.rng.IntN(len(modelQueues))]
	desc := fmt.Sprintf("claim through dead %s %s", d.name, queue)
	runs, _, err := d.c.Claim(h.ctx, d.sess, queue, 2, false)
	if len(runs) > 0 {
		h.failStep(desc, "a dead session claimed %d jobs (err %v)", len(runs), err)
	}
	h.count("claim through dead", 1)
	return fmt.Sprintf("%s -> %v", desc, err), true
}

// runAction is one write through a run.
type runAction struct {
	name    string
	invalid bool // refused before anything is sent (ErrInvalid)
	do      func(ctx context.Context, r *Run) error
	// apply records the accepted write in the model.
	apply func(m *modelJob)
}

func (h *modelHarness) randomRunAction() runAction {
	r := h.rng
	now := h.clock.Now()
	// again is a write that would run the job again: a pending cancel
	// request makes it cancelled instead, with the attempt kept.
	again := func(m *modelJob, st State, attemptDelta int) {
		if m.cancelReq {
			finalize(m, StateCancelled)
			return
		}
		m.attempt += attemptDelta
		finalize(m, st)
	}
	switch h.weighted([]int{4, 1, 5, 1, 5, 3, 1, 3, 4}) {
	case 0:
		cp := json.RawMessage(fmt.Sprintf(`{"step":%d}`, r.IntN(100)))
		return runAction{name: "checkpoint " + string(cp), do: func(ctx context.Context, run *Run) error { return run.Checkpoint(ctx, cp) }, apply: func(*modelJob) {}}
	case 1:
		return runAction{name: "checkpoint (bad JSON)", invalid: true, do: func(ctx context.Context, run *Run) error { return run.Checkpoint(ctx, json.RawMessage(`{"x":`)) }}
	case 2:
		var res json.RawMessage
		if r.IntN(2) == 0 {
			res = json.RawMessage(`{"ok":true}`)
		}
		return runAction{name: "complete", do: func(ctx context.Context, run *Run) error { return run.Complete(ctx, res) }, apply: func(m *modelJob) { finalize(m, StateCompleted) }}
	case 3:
		return runAction{name: "complete (bad JSON)", invalid: true, do: func(ctx context.Context, run *Run) error { return run.Complete(ctx, json.RawMessage(`nope`)) }}
	case 4:
		var o FailOpts
		name := "fail"
		switch r.IntN(5) {
		case 0:
			o.Discard, name = true, "fail discard"
		case 1:
			o.MaxAttempts, name = 1+r.IntN(3), "fail max"
			name += strconv.Itoa(o.MaxAttempts)
		case 2:
			o.RetryAt = now.Add(time.Duration(r.IntN(120)-20) * time.Second)
			name = fmt.Sprintf("fail retry-at %s", o.RetryAt.Sub(now))
		}
		return runAction{name: name, do: func(ctx context.Context, run *Run) error { return run.Fail(ctx, errors.New("boom"), o) }, apply: func(m *modelJob) {
			if o.MaxAttempts > 0 {
				m.maxAttempts = o.MaxAttempts
			}
			if o.Discard || m.attempt >= m.maxAttempts {
				finalize(m, StateDiscarded)
				return
			}
			again(m, StateRetryable, 0)
		}}
	case 5:
		d := time.Duration(0)
		st := StateAvailable
		if r.IntN(2) == 0 {
			d, st = time.Duration(1+r.IntN(200))*time.Second, StateScheduled
		}
		return runAction{name: fmt.Sprintf("snooze %s", d), do: func(ctx context.Context, run *Run) error { return run.Snooze(ctx, d) }, apply: func(m *modelJob) { again(m, st, -1) }}
	case 6:
		return runAction{name: "snooze -1s", invalid: true, do: func(ctx context.Context, run *Run) error { return run.Snooze(ctx, -time.Second) }}
	case 7:
		var cause error
		if r.IntN(2) == 0 {
			cause = errors.New("stop")
		}
		return runAction{name: "cancel", do: func(ctx context.Context, run *Run) error { return run.Cancel(ctx, cause) }, apply: func(m *modelJob) { finalize(m, StateCancelled) }}
	default:
		return runAction{name: "release", do: func(ctx context.Context, run *Run) error { return run.Release(ctx) }, apply: func(m *modelJob) { again(m, StateAvailable, -1) }}
	}
}

// current reports whether r is the run that holds its job now.
func (r *modelRun) current() bool {
	return !r.job.deleted && r.job.state == StateRunning && r.job.run == r
}

func (h *modelHarness) opRunWrite() (string, bool) {
	// Mostly a run that holds its job; else a stale one, mostly one not
	// yet refused (its daemon died: the store's fence decides), or one
	// that ended or was refused before.
	var active, fresh, stale []*modelRun
	for _, r := range h.runs {
		switch {
		case !r.done && !r.lost && !r.d.dead && r.current():
			active = append(active, r)
		case !r.done && !r.lost:
			fresh = append(fresh, r)
		default:
			stale = append(stale, r)
		}
	}
	var r *modelRun
	switch {
	case len(active) > 0 && (len(fresh)+len(stale) == 0 || h.rng.IntN(100) < 85):
		r = active[h.rng.IntN(len(active))]
	case len(fresh) > 0 && (len(stale) == 0 || h.rng.IntN(2) == 0):
		r = fresh[h.rng.IntN(len(fresh))]
	case len(stale) > 0 && (len(active) > 0 || h.rng.IntN(2) == 0):
		r = stale[h.rng.IntN(len(stale))]
	default:
		return h.opClaim()
	}
	a := h.randomRunAction()
	desc := fmt.Sprintf("%s %s", r, a.name)
	var want string
	switch {
	case a.invalid:
		want = "invalid"
	case r.done:
		want = "ended"
	case r.lost || r.d.dead || !r.current():
		want = "lost"
	default:
		want = "accepted"
	}
	desc += " (expect " + want + ")"
	before := r.job.state
	err := a.do(h.ctx, r.run)
	var got string
	switch {
	case err == nil:
		got = "accepted"
	case errors.Is(err, ErrInvalid):
		got = "invalid"
	case errors.Is(err, fence.ErrLeaseLost):
		got = "lost"
	case errors.Is(err, ErrWrongState):
		got = "ended"
	default:
		h.failStep(desc, "run write: %v", err)
	}
	if got != want {
		// At most one accepted outcome per run (a run that ended refuses
		// every later write), and a stale run's writes are refused.
		h.failStep(desc, "run write %s: got %s (%v), want %s; job %s is %s, run done=%t lost=%t daemon dead=%t current=%t",
			a.name, got, err, want, r.job, before, r.done, r.lost, r.d.dead, r.current())
	}
	h.count("run "+strings.Fields(a.name)[0]+" "+got, 1)
	switch got {
	case "accepted":
		a.apply(r.job)
		if r.job.state != StateRunning {
			r.done = true
		}
		if j := r.run.Job(); j.State != r.job.state || j.Attempt != r.job.attempt {
			h.failStep(desc, "after the write the run's job is %s attempt %d; the model says %s attempt %d", j.State, j.Attempt, r.job.state, r.job.attempt)
		}
		return fmt.Sprintf("%s -> %s: %s -> %s", desc, got, before, r.job.state), false
	case "lost":
		r.lost = true
	}
	return fmt.Sprintf("%s -> %s (%v)", desc, got, err), true
}

// opForgedRun writes through a run forged from an earlier token of a job,
// on a live session, as a daemon that kept a stale handle would: every
// write must be refused, naming the token the ownership key has now.
func (h *modelHarness) opForgedRun() (string, bool) {
	var cands []*modelJob
	for _, m := range h.jobs {
		if !m.deleted && len(m.tokens) > 0 && (m.state != StateRunning || len(m.tokens) > 1) {
			cands = append(cands, m)
		}
	}
	if len(cands) == 0 {
		return h.opRunWrite()
	}
	m := cands[h.rng.IntN(len(cands))]
	old := m.tokens[h.rng.IntN(len(m.tokens))]
	if m.state == StateRunning {
		old = m.tokens[h.rng.IntN(len(m.tokens)-1)]
	}
	live := h.live()
	d := live[h.rng.IntN(len(live))]
	rec := *h.prev.recs[m.id]
	rec.State, rec.Owner, rec.Token, rec.FinalizedAt = StateRunning, d.sess.WorkerID(), old, nil
	run := h.c.newRun(d.sess, &rec)
	// Mostly a checkpoint: a write that leaves the job running must be
	// fenced as surely as an outcome.
	a := h.randomRunAction()
	for a.invalid || (h.rng.IntN(2) == 0 && !strings.HasPrefix(a.name, "checkpoint")) {
		a = h.randomRunAction()
	}
	desc := fmt.Sprintf("forged run of %s (%s) with old token %d via %s: %s", m, m.state, old, d.name, a.name)
	err := a.do(h.ctx, run)
	var lost *fence.LostError
	if !errors.As(err, &lost) {
		h.failStep(desc, "forged run's write: err = %v, want ErrLeaseLost", err)
	}
	var cur int64
	if o, ok := h.prev.byKey[h.c.keys.owner(m.id)]; ok {
		cur = o.CreateRevision
	}
	if lost.Current != cur {
		h.failStep(desc, "forged run's write refused naming token %d; the ownership key's is %d", lost.Current, cur)
	}
	h.count("forged run lost", 1)
	return desc + " -> lost", true
}

// randomID returns the id of a job, or one of no job, or a malformed one.
func (h *modelHarness) randomID() (string, *modelJob) {
	switch h.rng.IntN(25) {
	case 0:
		return "01ARZ3NDEKTSV4RRFFQ69G5FAV", nil
	case 1:
		return "not-an-id", nil
	}
	m := h.pickJob()
	if m == nil {
		return "01ARZ3NDEKTSV4RRFFQ69G5FAV", nil
	}
	return m.id, m
}

// randomIDIn is randomID, but mostly a job in one of states.
func (h *modelHarness) randomIDIn(states ...State) (string, *modelJob) {
	var cands []*modelJob
	for _, m := range h.jobs {
		if !m.deleted && slices.Contains(states, m.state) {
			cands = append(cands, m)
		}
	}
	if len(cands) == 0 || h.rng.IntN(3) == 0 {
		return h.randomID()
	}
	m := cands[h.rng.IntN(len(cands))]
	return m.id, m
}

// finalize records that m is now in st, a state other than running: no run
// holds it, and no cancel request waits.
func finalize(m *modelJob, st State) {
	m.state = st
	m.cancelReq = false
	m.run = nil
}

func (h *modelHarness) opCancel() (string, bool) {
	// Running jobs half the time: a cancel request must survive what the
	// run, a reap or an orphans' release does next.
	id, m := h.randomIDIn(StateRunning)
	if h.rng.IntN(2) == 0 {
		id, m = h.randomIDIn(StateAvailable, StateScheduled, StateRetryable)
	}
	desc := "cancel " + id
	if m != nil {
		desc = fmt.Sprintf("cancel %s (%s)", m, m.state)
	}
	j, err := h.c.Cancel(h.ctx, id)
	if out, ok := h.noSuchJob(desc, id, m, err); ok {
		return out, true
	}
	switch {
	case m.state.Final():
		if !errors.Is(err, ErrWrongState) || j == nil || j.State != m.state {
			h.failStep(desc, "cancel of a %s job: %v, %v; want ErrWrongState", m.state, j, err)
		}
		h.count(strings.Fields(desc)[0]+" wrong state", 1)
		return desc + " -> wrong state", true
	case err != nil:
		h.failStep(desc, "cancel: %v", err)
	case m.state == StateRunning:
		if !j.CancelRequested || j.State != StateRunning {
			h.failStep(desc, "cancel of a running job returned %s, cancel requested %t", j.State, j.CancelRequested)
		}
		m.cancelReq = true
		h.count("cancel requested", 1)
		return desc + " -> requested", false
	}
	if j.State != StateCancelled {
		h.failStep(desc, "cancel of a %s job returned it %s", m.state, j.State)
	}
	finalize(m, StateCancelled)
	h.count("cancel cancelled", 1)
	return desc + " -> cancelled", false
}

func (h *modelHarness) opCancelMany() (string, bool) {
	var f CancelFilter
	if h.rng.IntN(2) == 0 {
		f.State = []State{StateScheduled, StateAvailable, StateRunning, StateRetryable, StateCompleted}[h.rng.IntN(5)]
	}
	// Mostly narrow: a filter that matches everything leaves little to run.
	if h.rng.IntN(4) > 0 {
		f.Kind = modelKinds[h.rng.IntN(len(modelKinds))]
	}
	if h.rng.IntN(4) > 0 || f.Kind == "" {
		f.Queue = modelQueues[h.rng.IntN(len(modelQueues))]
	}
	desc := fmt.Sprintf("cancel many %+v", f)
	res, err := h.c.CancelMany(h.ctx, f)
	if f.State.Final() {
		if !errors.Is(err, ErrInvalid) {
			h.failStep(desc, "err = %v, want ErrInvalid", err)
		}
		h.count(strings.Fields(desc)[0]+" invalid", 1)
		return desc + " -> invalid", true
	}
	if err != nil {
		h.failStep(desc, "cancel many: %v", err)
	}
	var want CancelManyResult
	var hit []*modelJob
	for _, m := range h.jobs {
		if m.deleted || m.state.Final() || (f.State != "" && m.state != f.State) || (f.Kind != "" && m.kind != f.Kind) || (f.Queue != "" && m.queue != f.Queue) {
			continue
		}
		hit = append(hit, m)
		if m.state == StateRunning {
			want.CancelRequested++
		} else {
			want.Cancelled++
		}
	}
	if res != want {
		h.failStep(desc, "cancel many = %+v, want %+v (jobs %v)", res, want, hit)
	}
	for _, m := range hit {
		if m.state == StateRunning {
			m.cancelReq = true
		} else {
			finalize(m, StateCancelled)
		}
	}
	h.count("cancel many: cancelled", res.Cancelled)
	h.count("cancel many: requested", res.CancelRequested)
	return fmt.Sprintf("%s -> %+v %v", desc, res, hit), len(hit) == 0
}

func (h *modelHarness) opRetry() (string, bool) {
	id, m := h.randomIDIn(StateDiscarded, StateCancelled)
	switch h.rng.IntN(4) {
	case 0:
		id, m = h.randomIDIn(StateScheduled, StateRetryable)
	case 1:
		// One that gave up its unique key: the retry must take it
		// again, or be refused if another job holds it now.
		var gave []*modelJob
		for _, c := range h.jobs {
			if c.uniqueKey != "" && !c.deleted && c.state.Final() && !c.holdsUnique() && c.state != StateCompleted {
				gave = append(gave, c)
			}
		}
		if len(gave) > 0 {
			m = gave[h.rng.IntN(len(gave))]
			id = m.id
		}
	}
	desc := "retry " + id
	if m != nil {
		desc = fmt.Sprintf("retry %s (%s)", m, m.state)
	}
	j, err := h.c.Retry(h.ctx, id)
	if out, ok := h.noSuchJob(desc, id, m, err); ok {
		return out, true
	}
	switch {
	case m.state == StateRunning || m.state == StateAvailable || m.state == StateCompleted:
		if !errors.Is(err, ErrWrongState) {
			h.failStep(desc, "retry of a %s job: err = %v, want ErrWrongState", m.state, err)
		}
		h.count(strings.Fields(desc)[0]+" wrong state", 1)
		return desc + " -> wrong state", true
	}
	if m.uniqueKey != "" && !m.holdsUnique() {
		if hm := h.holder(m.uniqueKey); hm != nil {
			if !errors.Is(err, ErrWrongState) || !strings.Contains(err.Error(), hm.id) {
				h.failStep(desc, "retry of a job whose unique key %s holds: err = %v, want ErrWrongState naming it", hm, err)
			}
			h.count("retry refused (key held)", 1)
			return fmt.Sprintf("%s -> wrong state (key held by %s)", desc, hm), true
		}
	}
	if err != nil || j.State != StateAvailable {
		h.failStep(desc, "retry: %v, %v", j, err)
	}
	if m.uniqueKey != "" && !m.holdsUnique() {
		h.count("retry took its key back", 1)
	}
	if m.state.Final() {
		if m.attempt >= m.maxAttempts {
			m.maxAttempts = m.attempt + 1
		}
		m.rescues = 0
	}
	m.state = StateAvailable
	h.count("retry available", 1)
	return desc + " -> available", false
}

func (h *modelHarness) opDelete() (string, bool) {
	id, m := h.randomIDIn(StateCompleted, StateDiscarded, StateCancelled)
	desc := "delete " + id
	if m != nil {
		desc = fmt.Sprintf("delete %s (%s)", m, m.state)
	}
	j, err := h.c.Delete(h.ctx, id)
	if out, ok := h.noSuchJob(desc, id, m, err); ok {
		return out, true
	}
	switch {
	case !m.state.Final():
		if !errors.Is(err, ErrWrongState) {
			h.failStep(desc, "delete of a %s job: err = %v, want ErrWrongState", m.state, err)
		}
		h.count(strings.Fields(desc)[0]+" wrong state", 1)
		return desc + " -> wrong state", true
	case err != nil || j.ID != m.id:
		h.failStep(desc, "delete: %v, %v", j, err)
	}
	m.deleted = true
	h.count("delete deleted", 1)
	return desc + " -> deleted", false
}

// opAdvance moves the clock: a little, a lot (past retention), or, as the
// maintenance loop sleeps, to exactly when the next job falls due.
func (h *modelHarness) opAdvance() (string, bool) {
	now := h.clock.Now()
	d := time.Duration(h.rng.IntN(90)) * time.Second
	switch h.rng.IntN(5) {
	case 0:
		d = time.Duration(3+h.rng.IntN(30)) * time.Minute
	case 1, 2:
		var next time.Time
		for _, j := range h.prev.recs {
			if (j.State == StateScheduled || j.State == StateRetryable) && j.ScheduledAt.After(now) && (next.IsZero() || j.ScheduledAt.Before(next)) {
				next = j.ScheduledAt
			}
		}
		if !next.IsZero() {
			d = next.Sub(now)
		}
	}
	h.clock.advance(d)
	return fmt.Sprintf("advance clock %s", d), true
}

func (h *modelHarness) opPromote() (string, bool) {
	now := h.clock.Now()
	return h.bulkStep("promote due", "promoted", h.c.PromoteDue, func(m *modelJob) bool {
		return (m.state == StateScheduled || m.state == StateRetryable) && !h.prev.recs[m.id].ScheduledAt.After(now)
	}, func(m *modelJob) { m.state = StateAvailable })
}

func (h *modelHarness) opPurge() (string, bool) {
	cutoff := h.clock.Now().Add(-modelRetention)
	return h.bulkStep("purge finished", "purged", h.c.PurgeFinished, func(m *modelJob) bool {
		return m.state.Final() && h.prev.recs[m.id].FinalizedAt.Before(cutoff)
	}, func(m *modelJob) { m.deleted = true })
}

// bulkStep runs call, a bulk operation that must touch exactly the jobs
// (not deleted) that match picks, applies done to each of them in the
// model and tallies them under tally.
func (h *modelHarness) bulkStep(what, tally string, call func(context.Context) (int, error), picks func(*modelJob) bool, done func(*modelJob)) (string, bool) {
	var want []*modelJob
	for _, m := range h.jobs {
		if !m.deleted && picks(m) {
			want = append(want, m)
		}
	}
	n, err := call(h.ctx)
	desc := fmt.Sprintf("%s (want %v)", what, want)
	if err != nil || n != len(want) {
		h.failStep(desc, "%s = %d, %v; want %d", what, n, err, len(want))
	}
	for _, m := range want {
		done(m)
	}
	h.count(tally, n)
	return fmt.Sprintf("%s -> %d", desc, n), n == 0
}

// opKill ends a daemon: its lease revoked (a crash whose lease ran out) or
// its session closed. A new daemon starts when fewer than two are left.
func (h *modelHarness) opKill() (string, bool) {
	d := h.pickBusyDaemon()
	how := "revoke"
	if h.rng.IntN(3) == 0 {
		how = "close"
		if err := d.sess.Close(h.ctx); err != nil {
			h.failStep("kill "+d.name, "close: %v", err)
		}
	} else if err := h.store.Revoke(h.ctx, d.sess.Lease()); err != nil {
		h.failStep("kill "+d.name, "revoke: %v", err)
	}
	d.dead = true
	desc := fmt.Sprintf("kill %s (%s)", d.name, how)
	h.count("kill "+how, 1)
	if len(h.live()) < 2 || h.rng.IntN(2) == 0 {
		desc += "; start " + h.startDaemon().name
	}
	return desc, false
}

// noSuchJob checks an operator's call on id when id names no job (a
// malformed id, or a job deleted or never made): err must say so. ok is
// false when id names a job.
func (h *modelHarness) noSuchJob(desc, id string, m *modelJob, err error) (string, bool) {
	h.t.Helper()
	switch {
	case id == "not-an-id":
		if !errors.Is(err, ErrInvalid) {
			h.failStep(desc, "err = %v, want ErrInvalid", err)
		}
		h.count(strings.Fields(desc)[0]+" invalid", 1)
		return desc + " -> invalid", true
	case m == nil || m.deleted:
		if !errors.Is(err, ErrNotFound) {
			h.failStep(desc, "err = %v, want ErrNotFound", err)
		}
		h.count(strings.Fields(desc)[0]+" not found", 1)
		return desc + " -> not found", true
	}
	return "", false
}

func (h *modelHarness) opReap() (string, bool) {
	// All running jobs without an ownership key, or the running jobs
	// named (a daemon that saw a peer die names them): then the reap
	// itself must leave those whose owner lives.
	var ids []string
	desc := "reap all"
	if h.rng.IntN(2) == 0 {
		for _, m := range h.jobs {
			if !m.deleted && m.state == StateRunning && h.rng.IntN(2) == 0 {
				ids = append(ids, m.id)
			}
		}
		if ids == nil {
			ids = []string{}
		}
		desc = fmt.Sprintf("reap %d ids", len(ids))
	}
	// mine, as a daemon passes the jobs it runs itself: never reaped.
	var mine func(string) bool
	var kept []string
	if h.rng.IntN(4) == 0 {
		for _, m := range h.jobs {
			if !m.deleted && m.state == StateRunning && h.rng.IntN(2) == 0 {
				kept = append(kept, m.id)
			}
		}
		mine = func(id string) bool { return slices.Contains(kept, id) }
		desc += fmt.Sprintf(", %d mine", len(kept))
	}
	var reaped []*modelJob
	owned := 0 // running jobs of live daemons the reap must leave
	for _, m := range h.jobs {
		if m.deleted || m.state != StateRunning || (ids != nil && !slices.Contains(ids, m.id)) || slices.Contains(kept, m.id) {
			continue
		}
		if m.run.d.dead {
			reaped = append(reaped, m)
		} else {
			owned++
		}
	}
	if owned > 0 && ids != nil {
		h.count("reap naming live runs", 1)
	}
	c := h.c
	if live := h.live(); h.rng.IntN(2) == 0 {
		c = live[h.rng.IntN(len(live))].c
	}
	n, err := c.Reap(h.ctx, ids, mine)
	desc += fmt.Sprintf(" (want %v)", reaped)
	if err != nil || n != len(reaped) {
		h.failStep(desc, "reap = %d, %v; want %d", n, err, len(reaped))
	}
	var outs []string
	for _, m := range reaped {
		m.rescues++
		switch {
		case m.cancelReq:
			finalize(m, StateCancelled)
		case m.rescues > modelMaxRescues:
			finalize(m, StateDiscarded)
		default:
			m.attempt--
			finalize(m, StateAvailable)
		}
		outs = append(outs, fmt.Sprintf("%s %s", m, m.state))
		h.count("reaped to "+string(m.state), 1)
	}
	return fmt.Sprintf("%s -> %v", desc, outs), n == 0
}

// opPause pauses a queue, or mostly resumes a paused one: a queue paused
// for long would leave its jobs out of the rest of the run.
func (h *modelHarness) opPause() (string, bool) {
	q := modelQueues[h.rng.IntN(len(modelQueues))]
	var paused []string
	for _, p := range modelQueues {
		if h.paused[p] {
			paused = append(paused, p)
		}
	}
	if len(paused) > 0 && h.rng.IntN(4) > 0 {
		q = paused[h.rng.IntN(len(paused))]
	}
	var changed bool
	var err error
	if h.paused[q] {
		_, changed, err = h.c.ResumeQueue(h.ctx, q)
	} else {
		_, changed, err = h.c.PauseQueue(h.ctx, q)
	}
	desc := fmt.Sprintf("pause %s: %t", q, !h.paused[q])
	if err != nil || !changed {
		h.failStep(desc, "pause/resume: changed %t, %v", changed, err)
	}
	h.paused[q] = !h.paused[q]
	h.count("pause/resume", 1)
	return desc, false
}

// opReleaseOrphans has a live daemon forget some of its runs, as a claim
// whose reply was lost would leave them, and give them back: each is
// released under its own token (a pending cancel request makes it
// cancelled), and the forgotten run, which the test keeps, is stale.
func (h *modelHarness) opReleaseOrphans() (string, bool) {
	d := h.pickBusyDaemon()
	var forgotten []*modelJob
	for _, m := range h.jobs {
		if !m.deleted && m.state == StateRunning && m.run.d == d && h.rng.IntN(2) == 0 {
			forgotten = append(forgotten, m)
		}
	}
	desc := fmt.Sprintf("release orphans of %s (want %v)", d.name, forgotten)
	n, err := d.c.ReleaseOrphans(h.ctx, d.sess, func(id string) bool {
		return !slices.ContainsFunc(forgotten, func(m *modelJob) bool { return m.id == id })
	})
	if err != nil || n != len(forgotten) {
		h.failStep(desc, "release orphans = %d, %v; want %d", n, err, len(forgotten))
	}
	var outs []string
	for _, m := range forgotten {
		if m.cancelReq {
			finalize(m, StateCancelled)
		} else {
			m.attempt--
			finalize(m, StateAvailable)
		}
		outs = append(outs, fmt.Sprintf("%s %s", m, m.state))
		h.count("orphan released to "+string(m.state), 1)
	}
	return fmt.Sprintf("%s -> %v", desc, outs), n == 0
}
