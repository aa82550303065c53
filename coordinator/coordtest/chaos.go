package coordtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/fence"
)

var chaosTests = []suiteTest{
	{"ChaosKeepsInvariantsAtEveryRevision", testChaos},
}

// chaosFor is how long testChaos runs its load.
const chaosFor = 3 * time.Second

// testChaos runs, at once on one namespace: four daemons with two claim
// loops each, whose runs checkpoint and then complete, fail, snooze,
// release, cancel themselves, discard or abandon their jobs; enqueuers
// with shared unique keys; a killer that revokes a daemon's lease now and
// then (the daemon's runs go on writing, as a paused daemon's would); two
// reapers; a promoter; cancels, retries, deletes and bulk cancels of
// random jobs; pauses of the queue, which has a global limit of 3; and the
// loss of the reply of one daemon write in 40. A watch replays the
// namespace revision by revision and checks the safety contract at each
// (chaosChecker.apply). Once the load ends, every lease is revoked and
// reaped: then no job may be left running.
func testChaos(t *testing.T, h *harness) {
	const queue, limit = "q", 3
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ctx, cancel := context.WithTimeout(context.Background(), chaosFor+30*time.Second)
	defer cancel()
	noWait := coordinator.Config{RetryPolicy: func(int, *coordinator.Job) time.Duration { return 0 }}
	h.c = h.coordinator(h.store, noWait)
	if _, _, err := h.c.SetQueueLimit(ctx, queue, limit); err != nil {
		t.Fatal(err)
	}
	start, err := h.store.Range(ctx, kv.RangeRequest{Start: "/", End: "\xff", Limit: 1, KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	chk := newChaosChecker(h.keysRoot(), queue, limit)
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		chk.watch(wctx, h.store, start.Revision+1)
	}()
	defer func() { stopWatch(); <-watched }()

	load, endLoad := context.WithTimeout(ctx, chaosFor)
	defer endLoad()
	var wg sync.WaitGroup
	var stream atomic.Uint64
	spawn := func(f func(r *rand.Rand)) {
		r := rand.New(rand.NewPCG(seed, stream.Add(1)))
		wg.Go(func() { f(r) })
	}
	pause := func(r *rand.Rand, upTo time.Duration) { time.Sleep(time.Duration(r.Int64N(int64(upTo)))) }
	var unexpected sync.Map // what failed that should not have, once each
	loadEnd, _ := load.Deadline()
	note := func(what string, err error) {
		// An error from the load's end is none: etcd's server may answer
		// "request timed out" at the deadline the request carried before
		// the client's timer has ended load.
		if err != nil && load.Err() == nil && time.Now().Before(loadEnd) {
			unexpected.LoadOrStore(what+": "+err.Error(), true)
		}
	}
	ids := &chaosIDs{}

	type daemon struct {
		c    *coordinator.Coordinator
		mu   sync.Mutex
		sess *coordinator.Session
	}
	lossy := &flakyStore{Store: h.store, loseEvery: 40}
	newSession := func(c *coordinator.Coordinator) *coordinator.Session {
		id := fmt.Sprintf("w%d-%s", workerSeq.Add(1), coordinator.NewWorkerID())
		for {
			s, err := c.NewSession(ctx, coordinator.SessionConfig{TTL: time.Minute, Worker: coordinator.WorkerInfo{ID: id}})
			if err == nil || ctx.Err() != nil {
				if err != nil {
					t.Errorf("NewSession: %v", err)
				}
				return s
			}
		}
	}
	daemons := make([]*daemon, 4)
	for i := range daemons {
		// Before any goroutine starts: a failure here returns at once.
		d := &daemon{c: h.coordinator(lossy, noWait)}
		if d.sess = newSession(d.c); d.sess == nil {
			return
		}
		daemons[i] = d
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = d.sess.Close(ctx) // the last one: the others were closed when replaced
		})
	}
	for range 2 {
		spawn(func(r *rand.Rand) {
			for load.Err() == nil {
				p := coordinator.EnqueueParams{Kind: "k", Queue: queue, MaxAttempts: 1 + r.IntN(3)}
				if r.IntN(3) > 0 {
					p.UniqueKey = fmt.Sprintf("key%d", r.IntN(6))
				}
				if r.IntN(5) == 0 {
					p.Unique = &coordinator.UniqueOpts{ByState: []coordinator.State{coordinator.StateCancelled}}
				}
				res, err := h.c.Enqueue(load, p)
				if err == nil {
					ids.add(res.Job.ID)
				}
				note("enqueue", err)
				pause(r, 3*time.Millisecond)
			}
		})
	}

	var runs, lostRuns atomic.Int64
	for _, d := range daemons {
		for range 2 {
			spawn(func(r *rand.Rand) {
				for load.Err() == nil {
					d.mu.Lock()
					s := d.sess
					d.mu.Unlock()
					got, _, err := d.c.Claim(load, s, queue, 1+r.IntN(2), r.IntN(2) == 0)
					if err != nil {
						if _, kerr := h.store.KeepAliveOnce(ctx, s.Lease()); errors.Is(kerr, kv.ErrLeaseNotFound) {
							// Revoked: the daemon starts a new session
							// (the other loop may have already).
							d.mu.Lock()
							if d.sess == s {
								if d.sess = newSession(d.c); d.sess == nil {
									d.mu.Unlock()
									return
								}
								wg.Go(func() { _ = s.Close(ctx) })
							}
							d.mu.Unlock()
							continue
						}
						if !errors.Is(err, errReplyLost) {
							// (A claim whose reply was lost may say
							// so; its jobs stay with the session.)
							note("claim", err)
						}
						pause(r, time.Millisecond)
						continue
					}
					runs.Add(int64(len(got)))
					for _, run := range got {
						rr := rand.New(rand.NewPCG(seed, uint64(run.Token())))
						wg.Go(func() {
							if chaosRun(ctx, rr, run) {
								lostRuns.Add(1)
							}
						})
					}
					if len(got) == 0 {
						pause(r, 2*time.Millisecond)
					}
				}
			})
		}
	}
	spawn(func(r *rand.Rand) {
		for load.Err() == nil {
			pause(r, 200*time.Millisecond)
			d := daemons[r.IntN(len(daemons))]
			d.mu.Lock()
			s := d.sess
			d.mu.Unlock()
			_ = h.store.Revoke(ctx, s.Lease())
		}
	})
	for range 2 {
		c := h.coordinator(h.store, noWait)
		spawn(func(r *rand.Rand) {
			for load.Err() == nil {
				_, err := c.Reap(load, nil, nil)
				note("reap", err)
				pause(r, 5*time.Millisecond)
			}
		})
	}
	spawn(func(r *rand.Rand) {
		for load.Err() == nil {
			_, err := h.c.PromoteDue(load)
			note("promote", err)
			pause(r, 3*time.Millisecond)
		}
	})
	for range 2 {
		spawn(func(r *rand.Rand) {
			for load.Err() == nil {
				id := ids.pick(r)
				if id == "" {
					pause(r, time.Millisecond)
					continue
				}
				var err error
				switch r.IntN(4) {
				case 0, 1:
					_, err = h.c.Cancel(load, id)
				case 2:
					_, err = h.c.Retry(load, id)
				default:
					_, err = h.c.Delete(load, id)
				}
				if errors.Is(err, coordinator.ErrWrongState) || errors.Is(err, coordinator.ErrNotFound) {
					err = nil
				}
				note("cancel, retry or delete", err)
				pause(r, 3*time.Millisecond)
			}
		})
	}
	spawn(func(r *rand.Rand) {
		for load.Err() == nil {
			pause(r, 400*time.Millisecond)
			f := coordinator.CancelFilter{State: coordinator.StateRunning}
			if r.IntN(2) == 0 {
				f = coordinator.CancelFilter{Queue: queue}
			}
			_, err := h.c.CancelMany(load, f)
			note("bulk cancel", err)
		}
	})
	spawn(func(r *rand.Rand) {
		for load.Err() == nil {
			pause(r, 300*time.Millisecond)
			_, _, err := h.c.PauseQueue(load, queue)
			note("pause", err)
			pause(r, 50*time.Millisecond)
			_, _, err = h.c.ResumeQueue(ctx, queue)
			note("resume", err)
		}
	})
	wg.Wait()

	// Every daemon gone: its jobs go back, and nothing may stay running.
	for _, d := range daemons {
		_ = h.store.Revoke(ctx, d.sess.Lease())
	}
	if _, err := h.c.Reap(ctx, nil, nil); err != nil {
		t.Errorf("reap after every lease was revoked: %v", err)
	}
	// A last write in the namespace: once the watch has it, it has
	// everything before it.
	end, err := h.store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put(h.keysRoot()+"chaos-end", nil, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	if !chk.waitFor(ctx, end.Revision) {
		t.Errorf("the watch did not reach revision %d", end.Revision)
	}
	stopWatch()
	<-watched
	chk.checkQuiet()
	unexpected.Range(func(k, _ any) bool { t.Errorf("unexpected error: %s", k); return true })
	t.Logf("%d jobs, %d runs (%d of them refused as lost), %d replies lost, %d revisions checked",
		ids.len(), runs.Load(), lostRuns.Load(), lossy.lost.Load(), chk.revisions)
	for _, e := range chk.errs {
		t.Error(e)
	}
}

// chaosRun plays one run: maybe a checkpoint, then an outcome drawn at
// random (or none: the run is abandoned and its job held until its lease
// goes). It reports whether the run found its lease lost.
func chaosRun(ctx context.Context, r *rand.Rand, run *coordinator.Run) (lost bool) {
	time.Sleep(time.Duration(r.Int64N(int64(4 * time.Millisecond))))
	if r.IntN(3) == 0 {
		_ = run.Checkpoint(ctx, []byte(`{"x":1}`))
	}
	var op func() error
	switch x := r.IntN(20); {
	case x < 5:
		op = func() error { return run.Complete(ctx, nil) }
	case x < 10:
		op = func() error { return run.Fail(ctx, errors.New("boom"), coordinator.FailOpts{}) }
	case x < 12:
		op = func() error { return run.Snooze(ctx, 0) }
	case x < 14:
		op = func() error { return run.Release(ctx) }
	case x < 16:
		op = func() error { return run.Cancel(ctx, errors.New("self")) }
	case x < 18:
		op = func() error { return run.Fail(ctx, errors.New("discard"), coordinator.FailOpts{Discard: true}) }
	default:
		return false
	}
	var err error
	for range 6 {
		// A lost reply is retried, as the worker does.
		if err = op(); err == nil || errors.Is(err, fence.ErrLeaseLost) || errors.Is(err, coordinator.ErrUnknownOutcome) {
			break
		}
	}
	return errors.Is(err, fence.ErrLeaseLost)
}

// chaosIDs are the ids of the jobs enqueued so far.
type chaosIDs struct {
	mu  sync.Mutex
	ids []string
}

func (c *chaosIDs) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.ids, id) {
		c.ids = append(c.ids, id)
	}
}

func (c *chaosIDs) pick(r *rand.Rand) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ids) == 0 {
		return ""
	}
	return c.ids[r.IntN(len(c.ids))]
}

func (c *chaosIDs) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

// chaosChecker replays a namespace's changes revision by revision and
// checks, at each, what the safety contract promises.
type chaosChecker struct {
	root, queue string
	limit       int

	jobs    map[string]*coordinator.Job
	jobRev  map[string]int64 // the mod revision of each record
	owners  map[string]kv.KeyValue
	slots   map[string]bool
	uniques map[string]string // unique key → the job id its key holds
	cancels map[string]bool
	running map[string]bool // running-index keys
	paused  bool
	tokens  map[string]int64 // each job's highest token

	errs      []string
	revisions int

	mu      sync.Mutex
	reached int64
	moved   chan struct{} // closed and replaced when reached grows
}

func newChaosChecker(root, queue string, limit int) *chaosChecker {
	return &chaosChecker{root: root, queue: queue, limit: limit,
		jobs: map[string]*coordinator.Job{}, jobRev: map[string]int64{}, owners: map[string]kv.KeyValue{},
		slots: map[string]bool{}, uniques: map[string]string{}, cancels: map[string]bool{},
		running: map[string]bool{}, tokens: map[string]int64{}, moved: make(chan struct{})}
}

func (c *chaosChecker) fail(format string, a ...any) {
	if len(c.errs) < 30 {
		c.errs = append(c.errs, fmt.Sprintf(format, a...))
	}
}

// watch applies the namespace's changes from revision from on, one
// revision at a time, until ctx ends.
func (c *chaosChecker) watch(ctx context.Context, store kv.Store, from int64) {
	var rev int64
	var batch []kv.Event
	flush := func() {
		if len(batch) > 0 {
			c.apply(rev, batch)
			batch = nil
			c.mu.Lock()
			c.reached = rev
			close(c.moved)
			c.moved = make(chan struct{})
			c.mu.Unlock()
		}
	}
	for resp := range store.Watch(ctx, c.root, from) {
		if resp.Err != nil {
			if ctx.Err() == nil {
				c.fail("watch: %v", resp.Err)
			}
			return
		}
		for _, ev := range resp.Events {
			if ev.KV.ModRevision != rev {
				flush()
			}
			rev = ev.KV.ModRevision
			batch = append(batch, ev)
		}
		flush()
	}
}

// waitFor waits until the watch has applied revision rev, a revision of
// the namespace, or ctx ends.
func (c *chaosChecker) waitFor(ctx context.Context, rev int64) bool {
	for {
		c.mu.Lock()
		reached, moved := c.reached, c.moved
		c.mu.Unlock()
		if reached >= rev {
			return true
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return false
		}
	}
}

// apply applies the events of revision rev and checks the state after it.
func (c *chaosChecker) apply(rev int64, evs []kv.Event) {
	c.revisions++
	type change struct {
		old, new *coordinator.Job
		oldRev   int64
	}
	changed := map[string]*change{}
	cancelBefore := maps.Clone(c.cancels)
	claimed := map[string]bool{} // ownership keys put at rev
	for _, ev := range evs {
		rest := strings.TrimPrefix(ev.KV.Key, c.root)
		del := ev.Type == kv.EventDelete
		switch {
		case strings.HasPrefix(rest, "j/"):
			id := rest[len("j/"):]
			ch := changed[id]
			if ch == nil {
				ch = &change{old: c.jobs[id], oldRev: c.jobRev[id]}
				changed[id] = ch
			}
			ch.new = nil
			delete(c.jobs, id)
			delete(c.jobRev, id)
			if del {
				continue
			}
			j, err := coordinator.DecodeJob(ev.KV.Key, ev.KV.Value)
			if err != nil {
				c.fail("rev %d: job %s: %v", rev, id, err)
				continue
			}
			c.jobs[id], c.jobRev[id], ch.new = j, ev.KV.ModRevision, j
		case strings.HasPrefix(rest, "o/"):
			id := rest[len("o/"):]
			if del {
				delete(c.owners, id)
			} else {
				c.owners[id], claimed[id] = ev.KV, true
			}
		case strings.HasPrefix(rest, "qm/s/"):
			setIf(c.slots, ev.KV.Key, !del)
		case strings.HasPrefix(rest, "qm/c/"+c.queue):
			c.paused = !del && strings.Contains(string(ev.KV.Value), `"paused":true`)
		case strings.HasPrefix(rest, "u/"):
			if del {
				delete(c.uniques, rest[len("u/"):])
			} else {
				c.uniques[rest[len("u/"):]] = string(ev.KV.Value)
			}
		case strings.HasPrefix(rest, "c/"):
			setIf(c.cancels, rest[len("c/"):], !del)
		case strings.HasPrefix(rest, "r/"):
			setIf(c.running, rest[len("r/"):], !del)
		}
	}

	// Promise 1 and the queue's limit: never more runs than slots.
	if n := len(c.owners); n > c.limit || len(c.slots) > c.limit {
		c.fail("rev %d: %d runs and %d slots of queue %s, whose limit is %d", rev, n, len(c.slots), c.queue, c.limit)
	}
	if c.paused {
		for id := range claimed {
			c.fail("rev %d: job %s claimed while its queue is paused", rev, id)
		}
	}
	// One live job per unique key, and the key names it.
	holders := map[string][]string{}
	for id, j := range c.jobs {
		if j.UniqueKey != "" && (!j.State.Final() || slices.Contains(j.UniqueStates, j.State)) {
			holders[j.UniqueKey] = append(holders[j.UniqueKey], id)
		}
	}
	for k, ids := range holders {
		if len(ids) > 1 {
			c.fail("rev %d: unique key %q held by %d jobs %v", rev, k, len(ids), ids)
		} else if c.uniques[k] != ids[0] {
			c.fail("rev %d: job %s holds unique key %q, whose key names %q", rev, ids[0], k, c.uniques[k])
		}
	}
	for k, id := range c.uniques {
		if len(holders[k]) == 0 {
			c.fail("rev %d: unique key %q names job %s, which does not hold it", rev, k, id)
		}
	}
	// Promise 4: a cancel request lives beside a running job only.
	for id := range c.cancels {
		if j := c.jobs[id]; j == nil || j.State != coordinator.StateRunning {
			c.fail("rev %d: cancel request of job %s, which is not running", rev, id)
		}
	}
	for id, ch := range changed {
		c.checkChange(rev, id, ch.old, ch.new, ch.oldRev, cancelBefore[id])
	}
}

// checkChange checks one job's move at rev from old to new.
func (c *chaosChecker) checkChange(rev int64, id string, old, new *coordinator.Job, oldRev int64, cancelRequested bool) {
	wasRunning := old != nil && old.State == coordinator.StateRunning
	if new != nil && new.State == coordinator.StateRunning {
		// Promise 2: the token is the ownership key's create revision,
		// and grows with every claim.
		tok := tokenAt(new, c.jobRev[id])
		if own, ok := c.owners[id]; !ok {
			c.fail("rev %d: job %s running without its ownership key", rev, id)
		} else if own.CreateRevision != tok {
			c.fail("rev %d: job %s running with token %d, its ownership key created at %d", rev, id, tok, own.CreateRevision)
		}
		switch {
		case !wasRunning:
			if tok <= c.tokens[id] {
				c.fail("rev %d: job %s claimed with token %d, not above its last %d", rev, id, tok, c.tokens[id])
			}
			c.tokens[id] = tok
			if new.Attempt > new.MaxAttempts || old != nil && new.Attempt != old.Attempt+1 {
				c.fail("rev %d: job %s claimed at attempt %d of %d (was %d)", rev, id, new.Attempt, new.MaxAttempts, attemptOf(old))
			}
		case tokenAt(old, oldRev) != tok:
			// Promise 3: a running record is rewritten by its own run only.
			c.fail("rev %d: job %s's running record rewritten from token %d to %d", rev, id, tokenAt(old, oldRev), tok)
		}
	}
	if wasRunning && (new == nil || new.State != coordinator.StateRunning) {
		if _, ok := c.owners[id]; ok {
			c.fail("rev %d: job %s left running but kept its ownership key", rev, id)
		}
		switch {
		case new == nil:
			c.fail("rev %d: running job %s deleted", rev, id)
		case cancelRequested && !new.State.Final():
			// ADR 0017: a pending cancel outranks running again.
			c.fail("rev %d: job %s, whose cancel was requested, went from running to %s", rev, id, new.State)
		case new.State == coordinator.StateDiscarded && new.Attempt < new.MaxAttempts && new.Rescues <= coordinator.DefaultMaxRescues &&
			(len(new.Errors) == 0 || !strings.Contains(new.Errors[len(new.Errors)-1].Error, "discard")):
			// Discarded only by its last attempt, by its handler, or
			// past the rescue limit.
			c.fail("rev %d: job %s discarded at attempt %d of %d", rev, id, new.Attempt, new.MaxAttempts)
		}
	}
	if old != nil && old.State.Final() && new != nil && new.State.Final() {
		// Promise 9: at most one accepted outcome per run.
		c.fail("rev %d: final job %s rewritten from %s to %s", rev, id, old.State, new.State)
	}
	if old != nil && old.State == coordinator.StateCompleted && new != nil {
		c.fail("rev %d: completed job %s moved to %s", rev, id, new.State)
	}
	if new != nil && new.State != coordinator.StateRunning && c.running[id] {
		c.fail("rev %d: job %s is %s but keeps its running-index key", rev, id, new.State)
	}
}

// checkQuiet checks the state once every lease is gone and reaped.
func (c *chaosChecker) checkQuiet() {
	for id, j := range c.jobs {
		if j.State == coordinator.StateRunning {
			c.fail("job %s still running after every lease was revoked and reaped", id)
		}
	}
	if len(c.owners) > 0 || len(c.slots) > 0 || len(c.cancels) > 0 || len(c.running) > 0 {
		c.fail("left after every lease was revoked and reaped: %d ownership keys, %d slots, %d cancel requests, %d running-index keys",
			len(c.owners), len(c.slots), len(c.cancels), len(c.running))
	}
}

// tokenAt is j's fencing token, its record written at modRev: the record's
// own, or, for records that leave it out, the revision of the claim that
// wrote them.
func tokenAt(j *coordinator.Job, modRev int64) int64 {
	if j.Token != 0 {
		return int64(j.Token)
	}
	return modRev
}

func attemptOf(j *coordinator.Job) int {
	if j == nil {
		return 0
	}
	return j.Attempt
}

func setIf(m map[string]bool, k string, on bool) {
	if on {
		m[k] = true
	} else {
		delete(m, k)
	}
}
