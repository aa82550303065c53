package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/fence"
)

// Reap re-queues running jobs whose ownership key is gone: their daemon's
// lease expired or was revoked, or (embedded mode) their daemon's process
// ended. Each is moved by a transaction that re-checks both that the
// ownership key is still missing and that the record is unchanged, so a job
// that was finished or claimed again meanwhile is left alone (a job whose
// move lost such a race is read and decided again). A job with a pending
// cancel request becomes cancelled, also when the request lands during the
// pass; one that has lost its run more than MaxRescues times is discarded.
// The first pass reads only the jobs' records: the compares of its moves
// check that the ownership key is missing and that no cancel request is
// pending, and a job whose move they refuse is decided again on a read of
// all three keys.
// Lost runs do not use up attempts. A job too large to re-queue in one
// transaction of the store (with its queue's index copy) is discarded,
// saying why.
//
// ids limits the pass to those jobs; nil scans every running job. mine, if
// not nil, names the jobs the caller is running right now; they are never
// reaped by it, even when their ownership key is gone (the caller's own
// self-fencing abandons them first). All moves
// of one pass are applied in as few transactions as the store allows: one,
// on the embedded store; each as soon as it is full, before the jobs of
// the next are read. It returns how many jobs it moved, with an error
// too: those moved before it.
func (c *Coordinator) Reap(ctx context.Context, ids []string, mine func(jobID string) bool) (int, error) {
	if ids == nil {
		var err error
		if ids, err = c.ownerless(ctx); err != nil {
			return 0, err
		}
	}
	total := 0
	// A job whose move lost a race (a cancel request written since the
	// read, say) is read and decided again.
	for pass := range 8 {
		n, again, err := c.reap(ctx, ids, mine, pass > 0)
		total += n
		if err != nil || len(again) == 0 {
			return total, err
		}
		ids = again
	}
	// Still losing races: the next pass (the reaper's scan, a death it
	// sees) decides them again.
	c.log.Warn("reap: jobs whose moves kept losing races are left for the next pass", slog.Int("jobs", len(ids)))
	return total, nil
}

// reap is one pass of Reap over ids. It returns the ids whose move was
// refused by its transaction's compares. full reads each job's ownership
// and cancel keys beside its record (see reapRead).
//
// It reads the jobs a transaction's worth at a time and applies each
// transaction of moves as soon as it is full, not after reading every job:
// the jobs of a daemon that held thousands become claimable one
// transaction after another while the rest are still being read (the same
// reads and the same transactions as reading them all first).
func (c *Coordinator) reap(ctx context.Context, ids []string, mine func(jobID string) bool, full bool) (int, []string, error) {
	var b reapBatch
	n := 0
	var again []string
	per := c.unitsPerTxn(reapKeys(full), len(ids))
	for start := 0; start < len(ids); start += per {
		if err := c.reapRead(ctx, ids[start:min(start+per, len(ids))], mine, full, &b); err != nil {
			return n, nil, err
		}
		// Every transaction but the last is full: apply them now.
		chunks := c.chunk(b.units)
		full := 0
		for _, ch := range chunks[:len(chunks)-1] {
			full += len(ch)
		}
		if full == 0 {
			continue
		}
		m, a, err := c.reapMove(ctx, b.units[:full], b.reaped[:full], b.lost[:full])
		n += m
		again = append(again, a...)
		if err != nil {
			return n, nil, err
		}
		b.units, b.reaped, b.lost = b.units[full:], b.reaped[full:], b.lost[full:]
	}
	if len(b.units) > 0 {
		m, a, err := c.reapMove(ctx, b.units, b.reaped, b.lost)
		n += m
		again = append(again, a...)
		if err != nil {
			return n, nil, err
		}
	}
	return n, again, nil
}

// reapBatch holds the moves a reap pass decided and has not applied yet.
type reapBatch struct {
	units  []unit
	reaped []*Job
	lost   []lostRun // reaped[i]'s lost run, for its log line
}

// reapKeys is how many keys reapRead reads per job.
func reapKeys(full bool) int {
	if full {
		return 3
	}
	return 1
}

// reapRead reads the jobs ids and adds the move of each one to reap to b.
//
// With full false it reads only their records, and decides each move as if
// its ownership key were missing and no cancel request pending: the move's
// compares check both, as they would anyway, so one that is not so (a job
// claimed again since the pass listed it, a pending cancel request) is
// refused, and decided again by a full pass. Those two keys are missing for
// nearly every job a reap finds; reading them cost two of every three keys
// the reaper read (2026-12-06).
func (c *Coordinator) reapRead(ctx context.Context, ids []string, mine func(jobID string) bool, full bool, b *reapBatch) error {
	if len(ids) == 0 {
		return nil
	}
	per := reapKeys(full)
	keys := make([]string, 0, per*len(ids))
	for _, id := range ids {
		if full {
			keys = append(keys, c.keys.owner(id), c.keys.job(id), c.keys.cancel(id))
		} else {
			keys = append(keys, c.keys.job(id))
		}
	}
	got, err := c.getMany(ctx, keys)
	if err != nil {
		return fmt.Errorf("coordinator: reap: read running jobs: %w", err)
	}
	now := c.clock.Now().UTC()
	for i := range ids {
		var o, rec, cr *kv.KeyValue
		if full {
			o, rec, cr = got[3*i], got[3*i+1], got[3*i+2]
		} else {
			rec = got[i]
		}
		if o != nil || rec == nil {
			continue
		}
		j, err := decodeKV(rec)
		if err != nil {
			c.log.Error("reap: skipping corrupt job record", slog.Any("err", err))
			continue
		}
		if j.State != StateRunning {
			continue
		}
		if mine != nil && mine(j.ID) {
			continue
		}
		lostOwner, lostToken := j.Owner, j.Token
		j.Rescues++
		j.Errors = append(j.Errors, AttemptError{At: now, Attempt: j.Attempt,
			Error: fmt.Sprintf("run lost: owner %s (token %d) lost its lease", lostOwner, lostToken)})
		switch {
		case cr != nil:
			j.State, j.FinalizedAt = StateCancelled, &now
		case j.Rescues > c.cfg.MaxRescues:
			j.State, j.FinalizedAt = StateDiscarded, &now
			j.Errors[len(j.Errors)-1].Error += fmt.Sprintf("; discarded after %d lost runs", j.Rescues)
		default:
			j.State, j.ScheduledAt = StateAvailable, now
			j.Attempt-- // a lost run does not use up an attempt
			j.Owner, j.Token = "", 0
		}
		cmps := []kv.Cmp{kv.Missing(c.keys.owner(j.ID)), kv.ModRevisionIs(rec.Key, kv.Equal, rec.ModRevision)}
		var done []kv.Op // the cancel request, if the job is cancelled for it
		if cr == nil {
			// No request came since the read (or, on a pass that did not
			// read the cancel key, none is pending): a request that lands
			// first must not be lost with a job moved as if it were not
			// there. With that compare there is no key to delete.
			cmps = append(cmps, kv.Missing(c.keys.cancel(j.ID)))
		} else {
			done = []kv.Op{kv.Delete(c.keys.cancel(j.ID))}
		}
		build := func() unit {
			then := append([]kv.Op{kv.Delete(c.keys.running(j.ID))}, done...)
			then = append(then, c.keys.releaseUnique(j)...)
			_, puts := c.keys.put(j)
			return unit{txn: kv.Txn{If: cmps, Then: append(then, puts...)}}
		}
		u, ok := c.movable("reap", j, now, build)
		if !ok {
			continue
		}
		b.units = append(b.units, u)
		b.reaped = append(b.reaped, j)
		b.lost = append(b.lost, lostRun{owner: lostOwner, token: lostToken})
	}
	return nil
}

// reapMove applies the moves units of the jobs reaped. It returns how many
// moved and the ids whose move was refused by its transaction's compares.
func (c *Coordinator) reapMove(ctx context.Context, units []unit, reaped []*Job, lost []lostRun) (int, []string, error) {
	// On an error, res still holds the results of the transactions
	// applied before it (the store's limits may split the moves): those
	// jobs moved, and are counted, logged and reported like the others.
	res, _, err := c.runUnits(ctx, units)
	n := 0
	var again []string
	for i, r := range res {
		if r == nil || !r.Succeeded {
			again = append(again, reaped[i].ID)
		}
		if r != nil && r.Succeeded {
			n++
			j := reaped[i]
			c.log.Info("reaped job after its owner's lease was lost", slog.String("job", j.ID), slog.String("kind", j.Kind),
				slog.String("queue", j.Queue), slog.String("owner", lost[i].owner), slog.Int64("token", int64(lost[i].token)),
				slog.String("state", string(j.State)), slog.Int("rescues", j.Rescues))
			if c.cfg.OnReap != nil {
				_ = c.CallUser("coordinator.Config.OnReap", nil, func() { c.cfg.OnReap(j) })
			}
		}
	}
	if err != nil {
		return n, nil, fmt.Errorf("coordinator: reap %d jobs (%d moved before the error): %w", len(units), n, err)
	}
	return n, again, nil
}

// lostRun is the run a reap ended: its owner and fencing token, which its
// job's record no longer holds once re-queued.
type lostRun struct {
	owner string
	token fence.Token
}

// ownerless lists the running jobs that seem to have no ownership key: the
// running index minus the ownership keys, both read keys only, page by
// page. It costs a few requests per thousand running jobs, not a read of
// every running job's record; Reap checks each candidate it returns.
func (c *Coordinator) ownerless(ctx context.Context) ([]string, error) {
	var running []string
	if err := c.scan(ctx, c.keys.runningAll(), true, func(x kv.KeyValue) error {
		running = append(running, idFromIndex(x.Key))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("coordinator: reap: list running jobs: %w", err)
	}
	if len(running) == 0 {
		return nil, nil
	}
	// Read after the running index: a job claimed in between is not in
	// running, and one finished in between is skipped by Reap (its record
	// is no longer running).
	owned := make(map[string]struct{}, len(running))
	if err := c.scan(ctx, c.keys.owners(), true, func(x kv.KeyValue) error {
		owned[idFromIndex(x.Key)] = struct{}{}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("coordinator: reap: list ownership keys: %w", err)
	}
	ids := running[:0]
	for _, id := range running {
		if _, ok := owned[id]; !ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// RunReaper reaps until ctx ends: at once, then whenever a daemon's
// registration vanishes (its lease expired or was revoked: the same
// revision deleted its ownership keys), and every interval as a backstop for
// what a watch can miss (compaction, reconnects). Jobs for which mine
// returns true are never reaped. self, if not nil, returns the caller's
// worker id (its session's). It returns ctx's error.
func (c *Coordinator) RunReaper(ctx context.Context, mine func(jobID string) bool, interval time.Duration, self func() string) error {
	// A watch that ends at once every time must not turn the loop into
	// a spin of full reap passes.
	retry := newWatchRetry(c)
	// Kept across watches: a periodic scan that comes before a replaced
	// session's lease can have ended does not find its jobs.
	var replaced time.Time
	for {
		// The revision to watch from is read before the pass: a daemon
		// that dies during the pass is then seen by the watch, if the
		// pass missed it.
		// The live daemons that reap too: a death's reap is ranked
		// among them (reapRank). Their registrations say so, which a
		// worker without Reap's does not: ranked first, it would leave
		// the death to the backups or the periodic scan.
		live := map[string]struct{}{}
		rev, _, err := c.scanRevs(ctx, c.keys.workers(), false, func(x kv.KeyValue) error {
			if registeredReaper(x.Value) {
				live[idFromIndex(x.Key)] = struct{}{}
			}
			return nil
		})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.log.Warn("reaper: read workers", slog.Any("err", err))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-c.clock.After(time.Second):
			}
			continue
		}
		if n, err := c.Reap(ctx, nil, mine); err != nil && ctx.Err() == nil {
			c.log.Warn("reap pass failed", slog.Any("err", err), slog.Int("reaped", n))
		} else if n > 0 {
			c.log.Info("reaper scan: reaped jobs whose owner lost its lease", slog.Int("reaped", n))
		}
		ended, werr := c.reapOnDeaths(ctx, mine, rev+1, interval, retry, &replaced, live, self)
		if ended {
			// The next pass is a full scan: it reaps whoever died
			// during the pause.
			werr = retry.wait(ctx, "reaper: "+c.keys.workers(), werr)
		}
		if werr != nil {
			return werr
		}
	}
}

// reapOnDeaths watches worker registrations from rev and reaps when one is
// deleted. It returns to have the caller rescan: with ended false once
// interval passed, with ended true and the watch's error (if any) once the
// watch ended; or ctx's error.
//
// A registration written over one that was still there (a daemon's new
// session under its worker id while the old session's lease lived on: its
// revoke failed) took the key off the old lease, whose end then deletes
// only ownership keys, which no reaper watches (ADR 0003). *replaced is
// when such a lease has ended at the latest (its TTL after the new
// registration, and a second for the store's expiry checks): the reaper
// scans again then, as if it had seen that daemon go (ADR 0040).
//
// live holds the registrations of reapers read at rev-1, and follows the
// watch. The
// reap after a death is made at once by the daemon that rendezvous
// hashing of the dead daemon's worker id over the live ones ranks first,
// and as a backup by those ranked next (reapRank); the others leave it to
// them and to their periodic scan.
func (c *Coordinator) reapOnDeaths(ctx context.Context, mine func(jobID string) bool, rev int64, interval time.Duration, retry *watchRetry, replaced *time.Time, live map[string]struct{}, self func() string) (ended bool, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	retry.begin()
	ch := c.store.Watch(wctx, c.keys.workers(), rev)
	defer func() {
		cancel()
		for range ch {
		}
	}()
	tick := c.clock.After(interval)
	var recheck <-chan time.Time
	armed := time.Time{} // when recheck fires
	arm := func() {
		if !replaced.IsZero() && (recheck == nil || replaced.Before(armed)) {
			armed = *replaced
			recheck = c.clock.After(max(armed.Sub(c.clock.Now()), 0))
		}
	}
	arm()
	var backup <-chan time.Time // a backup's reap after a death (reapRank)
	var backupAt time.Time
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-tick:
			retry.reset() // the watch lasted the interval
			return false, nil
		case <-recheck:
			recheck = nil
			if !replaced.After(armed) {
				*replaced = time.Time{}
			}
			n, err := c.Reap(ctx, nil, mine)
			if err != nil && ctx.Err() == nil {
				c.log.Warn("reap after a replaced session's lease ended failed", slog.Any("err", err))
			}
			level := slog.LevelInfo
			if n == 0 {
				level = slog.LevelDebug
			}
			c.log.Log(ctx, level, "a replaced daemon session's lease has ended; reaped its jobs", slog.Int("reaped", n))
			arm()
		case <-backup:
			backup = nil
			n, err := c.Reap(ctx, nil, mine)
			if err != nil && ctx.Err() == nil {
				c.log.Warn("backup reap after daemon loss failed", slog.Any("err", err))
			}
			level := slog.LevelInfo
			if n == 0 {
				level = slog.LevelDebug
			}
			c.log.Log(ctx, level, "backup reap after a daemon's session ended", slog.Int("reaped", n))
		case resp, ok := <-ch:
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			if !ok || resp.Err != nil {
				return true, resp.Err
			}
			if len(resp.Events) > 0 {
				retry.delivered()
			}
			// A registration that went took its daemon's ownership keys
			// in the same revision: one reap for every daemon gone in
			// this response (their leases may have ended together).
			var gone []string
			for _, ev := range resp.Events {
				id := idFromIndex(ev.KV.Key)
				if ev.Type == kv.EventPut && registeredReaper(ev.KV.Value) {
					live[id] = struct{}{}
				} else {
					delete(live, id)
				}
				switch {
				case ev.Type == kv.EventDelete:
					gone = append(gone, id)
				case ev.KV.Version > 1:
					// A registration replaced while it was there.
					if due := c.clock.Now().Add(registeredTTL(ev.KV.Value) + time.Second); due.After(*replaced) {
						*replaced = due
					}
					c.log.Debug("daemon registered a new session over a live one; reaping once the old lease can have ended",
						slog.String("daemon", idFromIndex(ev.KV.Key)), slog.Time("at", *replaced))
					arm()
				}
			}
			me := ""
			if self != nil {
				me = self()
			}
			if rank := reapRank(me, gone, live); rank > 0 {
				// Another daemon reaps first: reading the same records
				// and sending the same moves, all but one refused, on
				// every daemon would cost the store N times what one
				// reap does, the moment it is under stress.
				wait := time.Duration(rank) * reapStagger
				if rank < reapBackups {
					if due := c.clock.Now().Add(wait); backup == nil || due.Before(backupAt) {
						backup, backupAt = c.clock.After(wait), due
					}
				} else {
					wait = interval
				}
				c.log.Debug("daemon session ended; another daemon reaps its jobs first", slog.String("daemon", strings.Join(gone, ",")),
					slog.Int("rank", rank), slog.Duration("backup_in", wait))
			} else if len(gone) > 0 {
				backup = nil // this reap covers the deaths seen before
				n, err := c.Reap(ctx, nil, mine)
				if err != nil && ctx.Err() == nil {
					c.log.Warn("reap after daemon loss failed", slog.Any("err", err))
				}
				// Silent when nothing was reaped: every graceful stop (its
				// jobs released) and every session a daemon replaces
				// deletes a registration.
				level := slog.LevelInfo
				if n == 0 {
					level = slog.LevelDebug
				}
				c.log.Log(ctx, level, "daemon session ended; reaped its jobs", slog.String("daemon", strings.Join(gone, ",")), slog.Int("reaped", n))
			}
		}
	}
}

// A daemon's death is reaped at once by the daemon ranked first for it
// (reapRank), and by the next reapBackups-1, reapStagger apart, as
// backups, should the first be unable to (hung, or dying too); the others
// leave it to their periodic scan.
const (
	reapBackups = 3
	reapStagger = 500 * time.Millisecond
)

// reapRank returns me's place, from 0, among the live daemons in the
// order rendezvous hashing of a gone daemon's worker id gives them, the
// best over gone; 0 when me is unknown or not among them (its session is
// being replaced), so that it reaps at once.
func reapRank(me string, gone []string, live map[string]struct{}) int {
	if _, ok := live[me]; !ok || me == "" || len(gone) == 0 {
		return 0
	}
	best := len(live)
	for _, g := range gone {
		hg := hash64(g)
		mw := mix64(hash64(me) ^ hg)
		r := 0
		for p := range live {
			if w := mix64(hash64(p) ^ hg); p != me && (w > mw || w == mw && p < me) {
				r++
			}
		}
		best = min(best, r)
	}
	return best
}

// registeredReaper reports whether a worker registration says its daemon
// runs a reaper (WorkerInfo.Reaps).
func registeredReaper(value []byte) bool {
	var info struct {
		Reaps bool `json:"reaps"`
	}
	return json.Unmarshal(value, &info) == nil && info.Reaps
}

// registeredTTL is the lease TTL a worker registration states, or
// DefaultLeaseTTL when it states none (or does not decode).
func registeredTTL(value []byte) time.Duration {
	var info struct {
		LeaseTTLMS int64 `json:"lease_ttl_ms"`
	}
	if json.Unmarshal(value, &info) != nil || info.LeaseTTLMS <= 0 {
		return DefaultLeaseTTL
	}
	return time.Duration(info.LeaseTTLMS) * time.Millisecond
}
