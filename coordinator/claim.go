package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/fence"
)

// ClaimStats says what one Claim call saw, for metrics and back-off.
type ClaimStats struct {
	// Candidates is how many available jobs were tried.
	Candidates int
	// Conflicts is how many of them someone else took first.
	Conflicts int
	// Held is true when the queue is paused or its global limit is
	// reached: claiming again is useless until that changes (see
	// WatchQueues).
	Held bool
}

// Claim takes up to n available jobs of queue for sess, highest priority and
// oldest first; fewer when their records, payloads included, would take more
// than Config.MaxClaimBytes (but always one, when one is available). Each
// job moves from available to running only through a compare-and-set on its
// record's modification revision; the revision of the claiming transaction
// is the run's fencing token and the creation revision of its ownership key,
// which hangs on the session's lease.
//
// When several daemons contend for the same head of a queue, spread makes
// each pick candidates at random from a window larger than n, so that they
// do not all race for the same jobs.
//
// A claim ends with its session: one that the store holds (an outage, a
// hung connection) must not hold the claims of the next session, which
// wait for its reads of the queue. It then fails with ErrSessionExpired;
// what it may have claimed hangs on the ended session's lease.
func (c *Coordinator) Claim(ctx context.Context, sess *Session, queue string, n int, spread bool) ([]*Run, ClaimStats, error) {
	ctx, unbound := sess.bound(ctx)
	defer unbound()
	for {
		runs, st, back, err := c.claim(ctx, sess, queue, n, spread)
		if err != nil && ctx.Err() != nil && sess.Ctx().Err() != nil {
			return nil, st, fmt.Errorf("coordinator: claim: %w", ErrSessionExpired)
		}
		if len(runs) > 0 && sess.lapsed() {
			// Answered after the session's deadline, on either of its
			// clocks (ADR 0042): the lease may have expired since the
			// claim committed, and another daemon may run its jobs.
			// No run is handed out; the jobs hang on the lease, and
			// its revoke or expiry lets them be reaped.
			c.log.Warn("claim answered after its session's validity deadline: no run started; its jobs are re-queued once the lease is gone",
				slog.String("queue", queue), slog.Int("jobs", len(runs)), slog.Int64("lease", int64(sess.lease)))
			return nil, st, fmt.Errorf("coordinator: claim: answered after the session's validity deadline: %w", ErrSessionExpired)
		}
		if back == nil {
			return runs, st, err
		}
		// Claims in flight try every free slot of the queue's global
		// limit: wait for one to end (a slot it did not get is free
		// again, and no watch event says so). Or read again at once.
		select {
		case <-back:
		case <-ctx.Done():
			return nil, st, fmt.Errorf("coordinator: claim: %w", ctx.Err())
		}
	}
}

// claimAgain, returned by claim, says to try again at once.
var claimAgain = func() <-chan struct{} { c := make(chan struct{}); close(c); return c }()

// claim is one try of Claim. When claims in flight of this coordinator
// try every free slot of the queue's global limit, it claims nothing and
// returns a channel closed when one of them ends; claimAgain when it has
// reset the floor for a read from the queue's start.
func (c *Coordinator) claim(ctx context.Context, sess *Session, queue string, n int, spread bool) ([]*Run, ClaimStats, <-chan struct{}, error) {
	var st ClaimStats
	if n <= 0 {
		return nil, st, nil, nil
	}
	if !sess.Valid() {
		return nil, st, nil, fmt.Errorf("coordinator: claim: %w", ErrSessionExpired)
	}
	// The queue's configuration: a paused queue is not claimed from, and
	// a global limit bounds the claim to the free slots. Every claim
	// compares the configuration's revision, so a pause that lands while
	// the claim is in flight refuses it.
	conf, confRev, err := c.queueConfig(ctx, queue)
	if err != nil {
		return nil, st, nil, err
	}
	if conf.Paused {
		st.Held = true
		return nil, st, nil, nil
	}
	confGuard := kv.ModRevisionIs(c.keys.queueConf(queue), kv.Equal, confRev)
	start := c.keys.queue(queue)
	// Claims of one queue read one at a time, each from where the one
	// before moved the floor, and skipping the jobs (and the global-limit
	// slots) that claims of this coordinator still in flight try: two
	// claims in flight would otherwise race for the same jobs and slots.
	// The lock is released before the claim commits.
	unlock, err := c.floors.lockReads(ctx, queue)
	if err != nil {
		return nil, st, nil, fmt.Errorf("coordinator: claim: %w", err)
	}
	defer unlock()
	// A claim takes no more jobs than fit in c.cfg.MaxClaimBytes (below),
	// and when the queue's entries were large at the last read, it asks
	// for no more than that many, and reads no more: each entry carries
	// its job's record, payload included.
	fit := c.floors.fitting(queue, c.cfg.MaxClaimBytes)
	n = min(n, fit)
	var slots []string
	var slotGuard *kv.Cmp
	if conf.Limit > 0 {
		free, guard, err := c.freeSlots(ctx, queue, conf.Limit, n+c.floors.slotsTried(queue), spread, confRev)
		if err != nil {
			return nil, st, nil, err
		}
		if len(free) == 0 {
			st.Held = true
			return nil, st, nil, nil
		}
		var back <-chan struct{}
		if guard != nil {
			// Slots at or above the limit are held: one job, under the
			// guard (see freeSlots).
			n, slotGuard = 1, guard
		}
		if slots, back = c.floors.freeSlots(queue, free, n); len(slots) == 0 {
			return nil, st, back, nil
		}
		n = len(slots)
	}
	window := n
	if spread {
		window = min(4*n, 512, fit)
	}
	fs, tracked := c.floors.start(queue)
	if fs.key > start {
		start = fs.key
	}
	end := kv.PrefixEnd(c.keys.queue(queue))
	ahead := window
	if c.limits.RangeCountsAll {
		ahead = max(window, min(readAhead*n, fit))
	}
	busy := c.floors.pendingFrom(queue, start)
	// One read to the queue's end, unless ranges cost every key to their
	// end and the tail may be long (readAvailable); none when the floor
	// knows the tail is empty.
	var avail []kv.KeyValue
	var seen string
	var readRev int64
	tail := 0
	whole := !c.limits.RangeCountsAll || fs.tail >= 0 && fs.tail < ahead+busy
	if fs.tail != 0 {
		avail, seen, readRev, tail, err = c.readAvailable(ctx, queue, start, fs.horizon, end, window+busy, ahead+busy, whole, true)
	}
	if err == nil && tracked && fs.tail != 0 && readRev < fs.lowRev {
		// The watch saw a job become available at a revision this read
		// predates, before the claim began: etcd tells watchers of a write
		// just before reads can see it. A read that missed the job must
		// not move the floor past it; read again, linearizably (after the
		// member has applied every committed write).
		avail, seen, readRev, tail, err = c.readAvailable(ctx, queue, start, fs.horizon, end, window+busy, ahead+busy, whole, false)
	}
	if err != nil {
		return nil, st, nil, fmt.Errorf("coordinator: list available jobs of queue %s: %w", queue, err)
	}
	// Only a read that saw every job the floor was lowered to moves it.
	moves := tracked && fs.tail != 0 && readRev >= fs.lowRev
	read := avail
	c.floors.read(queue, read)
	avail = c.floors.dropPending(queue, avail)
	if start != c.keys.queue(queue) && c.floors.dueFullRead(queue, c.clock.Now()) {
		// Every way a job becomes available lowers the floor (the
		// watch), and so does every candidate a claim did not get
		// (below); still, now and then (fullReadEvery) read from the
		// queue's start, so that the floor could only delay a job, never
		// hide it: also while jobs wait past the floor, or a queue that
		// never runs dry would keep a hidden job for ever. Rarely: such a
		// read steps over the deleted entry of every job claimed since
		// the store last compacted, in etcd's index and in Pebble.
		c.floors.reset(queue)
		unlock()
		return nil, st, claimAgain, nil
	}
	if len(avail) == 0 {
		if moves {
			// Nothing from the floor to the queue's end at the read's
			// revision: a job that becomes available later lowers the
			// floor (and this advance goes no further than it), so claims
			// skip everything read here until then, not just until the
			// next full read.
			c.floors.advance(queue, end, "", fs.epoch, 0)
		}
		return nil, st, nil, nil
	}
	cands := avail
	if len(cands) > n {
		if spread {
			// A copy: read stays in key order, for the floor.
			cands = slices.Clone(cands)
			spreadOrder(cands, sess)
		}
		cands = cands[:n]
	}
	// The candidates past the byte bound are left as those past n are:
	// not tried, so the floor stays before them.
	cands = withinBytes(cands, c.cfg.MaxClaimBytes)
	// A job that another claim of this session still tries, under an
	// older index entry (the job was claimed and given back meanwhile),
	// waits until that claim is resolved; the floor stays before it.
	cands, taken := sess.takeJobs(cands)
	defer sess.untakeJobs(taken)
	if len(cands) == 0 {
		return nil, st, nil, nil
	}
	st.Candidates = len(cands)

	// Each available index entry carries the job's record: the claim
	// compares on the entry itself, which any change of the job rewrites
	// or deletes.
	// No two claims of a session share a time: a claim whose reply is
	// lost knows its records by it (resolveClaims).
	now := sess.claimTime(c.clock.Now().UTC())
	owner := sess.WorkerID()
	var units []unit
	var jobs []*Job
	var ukeys []string // each unit's index entry
	slotOf := map[string]string{}
	for i := range cands {
		x := &cands[i]
		j, err := DecodeJob(x.Key, x.Value)
		if err != nil {
			c.log.Error("skipping corrupt available-index entry", slog.Any("err", err))
			continue
		}
		if j.State != StateAvailable {
			continue
		}
		j.State = StateRunning
		j.Attempt++
		j.AttemptedAt = &now
		j.Owner = owner
		j.Token = 0 // the claim's revision; see decodeKV
		t := kv.Txn{
			If: []kv.Cmp{kv.ModRevisionIs(x.Key, kv.Equal, x.ModRevision), confGuard},
			Then: []kv.Op{
				kv.Delete(x.Key),
				kv.Put(c.keys.job(j.ID), encodeJob(j), 0),
				kv.Put(c.keys.owner(j.ID), []byte(owner), sess.lease),
				kv.Put(c.keys.running(j.ID), runningValue(owner, j.Queue), 0),
			},
		}
		if slots != nil {
			// The slot hangs on the session's lease: a dead daemon's
			// share of the limit is freed with its lease.
			s := slots[len(units)]
			slotOf[j.ID] = s
			t.If = append(t.If, kv.Missing(s))
			t.Then = append(t.Then, kv.Put(s, []byte(j.ID), sess.lease))
			if slotGuard != nil {
				// No other claim of a slot since this one read them.
				t.If = append(t.If, *slotGuard)
				t.Then = append(t.Then, kv.Put(c.keys.slotsGen(queue), []byte(j.ID), 0))
			}
		}
		units = append(units, unit{txn: t})
		jobs = append(jobs, j)
		ukeys = append(ukeys, x.Key)
	}
	if len(units) == 0 {
		return nil, st, nil, nil
	}
	tried := make(map[string]bool, len(cands))
	for _, x := range cands {
		tried[x.Key] = true
	}
	if moves {
		// Every candidate tried will be gone from the index (claimed by us
		// or by someone else), and so will those claims in flight try;
		// the floor moves to the first key read that is neither, before
		// the claim commits, so that a claim of this queue started
		// meanwhile reads on from there.
		next := read[len(read)-1].Key + "\x00"
		for _, x := range avail { // read less what claims in flight try, in key order
			if !tried[x.Key] {
				next = x.Key
				break
			}
		}
		after := -1 // entries from next to the end
		if tail >= 0 {
			before := 0
			for before < len(read) && read[before].Key < next {
				before++
			}
			after = tail - before
		}
		c.floors.advance(queue, next, seen, fs.epoch, after)
	}
	used := slots[:min(len(slots), len(units))] // each unit's slot, in order
	c.floors.hold(queue, tried, used)
	unlock()
	results, _, err := c.runUnits(ctx, units)
	var runs []*Run
	if err != nil {
		// The reply may be lost while the claim committed: find out from
		// the ownership keys, never by claiming again; even if the caller
		// gave up meanwhile, but not past the session's end (a store that
		// cannot be reached would hold the claim, and a worker's Stop that
		// waits for it, for as long as the outage). Runs of an ended
		// session could write nothing, and its lease takes the claim back.
		rctx, rcancel := sess.bound(context.WithoutCancel(ctx))
		runs, rerr := c.resolveClaims(rctx, sess, jobs, now)
		rcancel()
		// The candidates not resolved may still be available: the next
		// claim reads from the queue's start. They are held until now: a
		// claim of this coordinator that took one meanwhile would look to
		// resolveClaims like this claim's, landed after all.
		c.floors.release(queue, tried, used, "", true)
		if rerr != nil {
			return nil, st, nil, fmt.Errorf("coordinator: claim: %w (and resolving it: %v)", err, rerr)
		}
		for _, r := range runs {
			r.slot = slotOf[r.job.ID]
		}
		if len(runs) > 0 {
			c.log.Warn("claim reply lost; resolved from ownership keys", slog.Int("claimed", len(runs)), slog.Any("err", err))
			return runs, st, nil, nil
		}
		return nil, st, nil, fmt.Errorf("coordinator: claim: %w", err)
	}
	lost := ""
	for i, r := range results {
		if r == nil || !r.Succeeded {
			st.Conflicts++
			if k := ukeys[i]; lost == "" || k < lost {
				lost = k
			}
			continue
		}
		j := jobs[i]
		j.Token = fence.Token(r.Revision)
		run := c.newRun(sess, j)
		run.slot = slotOf[j.ID]
		runs = append(runs, run)
	}
	// A candidate this claim did not get may still be available: a pause
	// that landed meanwhile (the configuration guard), or a global-limit
	// slot another daemon took, refuses a unit as surely as another claim
	// taking the job. The floor has passed it and no watch event brings it
	// back (its entry did not change): lower the floor to it (ADR 0015).
	c.floors.release(queue, tried, used, lost, false)
	return runs, st, nil, nil
}

// withinBytes returns the longest prefix of xs whose values take at most
// budget bytes, and at least its first entry.
func withinBytes(xs []kv.KeyValue, budget int) []kv.KeyValue {
	total := 0
	for i, x := range xs {
		if total += len(x.Value); total > budget && i > 0 {
			return xs[:i]
		}
	}
	return xs
}

// availableWindows are the spans of scheduled time, in nanoseconds, of
// the first reads of readAvailable: 10 ms, 1 s, 100 s.
var availableWindows = []int64{1e7, 1e9, 1e11}

// readAhead is how many times the jobs it claims a claim reads past the
// horizon, when ranges count every key (kv.Limits.RangeCountsAll).
const readAhead = 4

// readAvailable returns up to limit entries of queue's available index,
// from start to end, the last key it saw (its new horizon), the oldest
// store revision of its reads, and how many entries it found from start to
// end when its reads went that far (else -1): it reads up to ahead entries
// (at least limit). Its reads are serializable when asked.
//
// etcd visits every key of a limited range up to its end (to count them),
// so one read to the queue's end would cost a claim the whole backlog.
// Up to the horizon, the last key an earlier read saw, the range holds few
// keys: a read there is cheap. Past it, a read that starts at an index
// entry (a floor) reads windows of scheduled time after it, within its
// priority, and reads on to end only when they hold too few entries. On
// etcd a claim reads ahead of what it needs, so that the claims after it
// read up to its horizon. With whole, it reads to end at once instead: the
// same keys when the tail is short (the windows would all be read), in one
// request instead of up to five.
func (c *Coordinator) readAvailable(ctx context.Context, queue, start, horizon, end string, limit, ahead int, whole, serializable bool) (out []kv.KeyValue, seen string, rev int64, tail int, err error) {
	from := start
	read1 := func(to string, limit int) ([]kv.KeyValue, error) {
		rr, err := c.store.Range(ctx, kv.RangeRequest{Start: from, End: to, Limit: limit, Serializable: serializable})
		if err != nil {
			return nil, err
		}
		if rev == 0 || rr.Revision < rev {
			rev = rr.Revision // the oldest of the reads
		}
		from = to
		return rr.KVs, nil
	}
	want := max(limit, ahead)
	if whole {
		kvs, err := read1(end, want)
		if err != nil {
			return nil, "", 0, -1, err
		}
		tail = -1
		if len(kvs) < want {
			tail = len(kvs)
		}
		if len(kvs) > 0 {
			seen = kvs[len(kvs)-1].Key
		}
		return kvs[:min(len(kvs), limit)], seen, rev, tail, nil
	}
	if horizon >= from {
		if out, err = read1(horizon+"\x00", limit); err != nil {
			return nil, "", 0, -1, err
		}
		if len(out) >= limit {
			return out, "", rev, -1, nil
		}
	}
	want -= len(out)
	var more []kv.KeyValue
	read := func(to string) (bool, error) {
		kvs, err := read1(to, want-len(more))
		more = append(more, kvs...)
		return len(more) >= want, err
	}
	full := false
	if prio, ts, ok := c.keys.parseAvailable(queue, from); ok {
		for _, w := range availableWindows {
			to := c.keys.availableAt(queue, prio, ts+w)
			if to <= from {
				continue
			}
			if full, err = read(to); err != nil || full {
				break
			}
		}
	}
	if err == nil && !full {
		full, err = read(end)
	}
	if err != nil {
		return nil, "", 0, -1, err
	}
	tail = -1
	if !full {
		tail = len(out) + len(more)
	}
	if len(more) > 0 {
		seen = more[len(more)-1].Key
	}
	return append(out, more[:min(len(more), limit-len(out))]...), seen, rev, tail, nil
}

// resolveClaims learns which of jobs, tried by a claim whose reply was lost,
// that claim actually took: those whose ownership key hangs on this
// session's lease and whose record holds the claim's time (at). No other
// claim of this session takes them while this one is unresolved
// (Session.takeJobs), but an earlier one may hold one of them already: a
// read that lags behind (serializable, from a member not yet up to date)
// can show the entry of a job this daemon runs, and the claim tries it
// again. Its key is then this session's too; the record's time says that
// it was the other claim's run (Session.claimTime), and its token that the
// key and the record are of one run.
func (c *Coordinator) resolveClaims(ctx context.Context, sess *Session, jobs []*Job, at time.Time) ([]*Run, error) {
	keys := make([]string, 0, 2*len(jobs))
	for _, j := range jobs {
		keys = append(keys, c.keys.owner(j.ID), c.keys.job(j.ID))
	}
	kvs, err := c.getMany(ctx, keys)
	if err != nil {
		return nil, err
	}
	var runs []*Run
	for i := range jobs {
		o, rec := kvs[2*i], kvs[2*i+1]
		if o == nil || o.Lease != sess.lease || string(o.Value) != sess.WorkerID() || rec == nil {
			continue
		}
		got, err := decodeKV(rec)
		if err != nil {
			c.log.Error("resolving a claim whose reply was lost: the job's record does not decode; not taken", slog.String("job", jobs[i].ID), slog.Any("err", err))
			continue
		}
		// The record and the key may come from two reads (getMany): the
		// record must also be of the run that key fences.
		if got.State != StateRunning || got.AttemptedAt == nil || !got.AttemptedAt.Equal(at) || got.Token != fence.Token(o.CreateRevision) {
			c.log.Warn("a claim whose reply was lost had tried a job that another claim holds (its read lagged behind); not taken",
				slog.String("job", jobs[i].ID), slog.Int64("token", o.CreateRevision))
			continue
		}
		j := jobs[i]
		j.Token = fence.Token(o.CreateRevision)
		runs = append(runs, c.newRun(sess, j))
	}
	return runs, nil
}

// ReleaseOrphans gives back the jobs that hang on sess's lease but that the
// caller does not run: claims whose reply was lost and that could not be
// resolved at the time (the read failed, or ran before the claim landed).
// Without this they would stay held, never run and never reaped, until the
// session ends. mine names the jobs the caller holds (claimed and not yet
// finished); it must include claims in progress, so call ReleaseOrphans
// from the goroutine that claims. Each release is a fenced write under the
// orphaned claim's own token.
func (c *Coordinator) ReleaseOrphans(ctx context.Context, sess *Session, mine func(jobID string) bool) (int, error) {
	// An ended session's orphans hang on its lease, which is gone or
	// going: the release ends with the session.
	ctx, unbound := sess.bound(ctx)
	defer unbound()
	var orphans []kv.KeyValue
	if err := c.scan(ctx, c.keys.owners(), false, func(x kv.KeyValue) error {
		if x.Lease == sess.lease && !mine(idFromIndex(x.Key)) {
			orphans = append(orphans, x)
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("coordinator: list ownership keys: %w", err)
	}
	if len(orphans) == 0 {
		return 0, nil
	}
	jkeys := make([]string, len(orphans))
	for i, o := range orphans {
		jkeys[i] = c.keys.job(idFromIndex(o.Key))
	}
	recs, err := c.getMany(ctx, jkeys)
	if err != nil {
		return 0, fmt.Errorf("coordinator: read orphaned jobs: %w", err)
	}
	n := 0
	for i, rec := range recs {
		if rec == nil {
			continue
		}
		j, err := decodeKV(rec)
		if err != nil || j.State != StateRunning || j.Owner != sess.WorkerID() {
			continue
		}
		j.Token = fence.Token(orphans[i].CreateRevision)
		run := c.newRun(sess, j)
		// Its queue's global-limit slot is freed with it. Unread, it
		// would be held until the session ends: leave the job to the
		// next call.
		if run.slot, err = c.slotOf(ctx, sess, j); err != nil {
			c.log.Warn("releasing an orphaned claim failed", slog.String("job", j.ID), slog.Any("err", err))
			continue
		}
		if err := run.Release(ctx); err != nil {
			c.log.Warn("releasing an orphaned claim failed", slog.String("job", j.ID), slog.Any("err", err))
			continue
		}
		n++
		c.log.Warn("released a job claimed by a transaction whose reply was lost", slog.String("job", j.ID), slog.Int64("token", int64(j.Token)))
	}
	return n, nil
}

// takeJobs returns those of cands whose jobs no other claim of s tries,
// marked as tried by the caller until it passes ids to untakeJobs, once
// its claim is resolved. A claim whose reply is lost takes every job of
// its own whose ownership key hangs on s's lease (resolveClaims); were
// another claim of s in flight with one of those jobs, under a newer index
// entry, that claim's run would be taken for the lost claim's: one job
// running twice under one token.
func (s *Session) takeJobs(cands []kv.KeyValue) (kept []kv.KeyValue, ids []string) {
	s.claimsMu.Lock()
	defer s.claimsMu.Unlock()
	if s.claiming == nil {
		s.claiming = map[string]bool{}
	}
	kept = cands[:0:0]
	for _, x := range cands {
		id := idFromIndex(x.Key)
		if s.claiming[id] {
			continue
		}
		s.claiming[id] = true
		kept = append(kept, x)
		ids = append(ids, id)
	}
	return kept, ids
}

// untakeJobs ends what takeJobs began.
func (s *Session) untakeJobs(ids []string) {
	s.claimsMu.Lock()
	defer s.claimsMu.Unlock()
	for _, id := range ids {
		delete(s.claiming, id)
	}
}
