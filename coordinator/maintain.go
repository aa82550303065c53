package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// maintainBatch bounds the jobs one maintenance transaction moves.
const maintainBatch = 1000

// PromoteDue makes scheduled and retryable jobs whose time has come
// available. Each move is conditional on the record being unchanged, so it
// is safe when two maintainers briefly overlap. A job too large to make
// available in one transaction of the store (its record grew with errors
// and a checkpoint) cannot run again: it is discarded, saying why.
func (c *Coordinator) PromoteDue(ctx context.Context) (int, error) {
	n, _, err := c.promoteFrom(ctx, c.keys.timers())
	return n, err
}

// promoteFrom is PromoteDue over the timer entries from start on. It also
// returns a floor: every due entry below it that this pass read was
// moved, or will never be (an unreadable record, a stale entry, a job too
// large even to discard), so that a later pass may start there as long as
// every timer written since is known to it (RunMaintenance's watch). An
// entry whose move was refused (its record changed meanwhile) keeps the
// floor at or below it.
func (c *Coordinator) promoteFrom(ctx context.Context, start string) (int, string, error) {
	total := 0
	floor := ""
	for {
		now := c.clock.Now().UTC()
		end := c.keys.timers() + tsKey(now) + "\xff"
		rr, err := c.store.Range(ctx, kv.RangeRequest{Start: start, End: end, Limit: maintainBatch, KeysOnly: true})
		if err != nil {
			return total, "", fmt.Errorf("coordinator: list due jobs: %w", err)
		}
		if len(rr.KVs) == 0 {
			if floor == "" {
				floor = max(start, end)
			}
			return total, floor, nil
		}
		jkeys := make([]string, len(rr.KVs))
		for i, x := range rr.KVs {
			jkeys[i] = c.keys.job(idFromIndex(x.Key))
		}
		recs, err := c.getMany(ctx, jkeys)
		if err != nil {
			return total, "", fmt.Errorf("coordinator: read due jobs: %w", err)
		}
		var (
			units []unit
			moved []string // the entry each unit moves
		)
		for i, rec := range recs {
			if rec == nil {
				continue
			}
			j, err := decodeKV(rec)
			if err != nil {
				c.log.Error("promote: skipping corrupt job record", slog.Any("err", err))
				continue
			}
			old := rr.KVs[i].Key
			if (j.State != StateScheduled && j.State != StateRetryable) || c.keys.index(j) != old {
				// Moved since the entry was read (it ran and failed
				// again, say): its current entry is due in its own time.
				continue
			}
			j.State = StateAvailable
			build := func() unit {
				_, puts := c.keys.put(j)
				then := append([]kv.Op{kv.Delete(old)}, puts...)
				if j.State.Final() {
					then = append(then, c.keys.releaseUnique(j)...)
				}
				return unit{txn: kv.Txn{If: []kv.Cmp{kv.ModRevisionIs(rec.Key, kv.Equal, rec.ModRevision)}, Then: then}}
			}
			if u, ok := c.movable("promote", j, now, build); ok {
				units = append(units, u)
				moved = append(moved, old)
			}
		}
		res, _, err := c.runUnits(ctx, units)
		if err != nil {
			return total, "", fmt.Errorf("coordinator: promote %d due jobs: %w", len(units), err)
		}
		for i, r := range res {
			if r != nil && r.Succeeded {
				total++
			} else if floor == "" {
				floor = moved[i] // read again by the next pass
			}
		}
		if !rr.More {
			if floor == "" {
				floor = end
			}
			return total, floor, nil
		}
		start = rr.KVs[len(rr.KVs)-1].Key + "\x00"
	}
}

// PurgeFinished deletes finished jobs older than the retention period.
func (c *Coordinator) PurgeFinished(ctx context.Context) (int, error) {
	total := 0
	for from := c.keys.finished(); from != ""; {
		n, next, err := c.purgeFrom(ctx, from)
		total += n
		if err != nil {
			return total, err
		}
		from = next
	}
	return total, nil
}

// purgeFrom deletes one batch of the finished jobs past retention whose
// index entries are at or after from, and returns where the next batch
// starts ("" when none is left). A batch reads on from where the one
// before ended, not from the index's start, where it would step over
// every entry the purge deleted so far. Each delete is conditional on the
// index entry it read: a job retried since is left whole.
func (c *Coordinator) purgeFrom(ctx context.Context, from string) (int, string, error) {
	cutoff := c.clock.Now().Add(-c.cfg.Retention)
	end := c.keys.finished() + tsKey(cutoff)
	if from >= end { // the clock stepped back past it
		return 0, "", nil
	}
	rr, err := c.store.Range(ctx, kv.RangeRequest{Start: from, End: end, Limit: maintainBatch})
	if err != nil {
		return 0, "", fmt.Errorf("coordinator: list expired jobs: %w", err)
	}
	if len(rr.KVs) == 0 {
		return 0, "", nil
	}
	units := make([]unit, len(rr.KVs))
	for i, x := range rr.KVs {
		units[i] = unit{txn: kv.Txn{
			If:   []kv.Cmp{kv.Exists(x.Key)},
			Then: append([]kv.Op{kv.Delete(x.Key), kv.Delete(c.keys.job(idFromIndex(x.Key)))}, c.releaseHeldUnique(x)...),
		}}
	}
	res, _, err := c.runUnits(ctx, units)
	total := 0
	for _, r := range res {
		if r != nil && r.Succeeded {
			total++
		}
	}
	if err != nil {
		return total, "", fmt.Errorf("coordinator: purge %d finished jobs: %w", len(units), err)
	}
	if !rr.More {
		return total, "", nil
	}
	return total, rr.KVs[len(rr.KVs)-1].Key + "\x00", nil
}

// MaintainConfig tunes RunMaintenance.
type MaintainConfig struct {
	// MaxWait bounds the sleep between promotion passes. Default: 1s.
	MaxWait time.Duration
	// PurgeEvery is how often finished jobs past retention are deleted.
	// Default: 1m.
	PurgeEvery time.Duration
}

// RunMaintenance promotes due jobs and purges expired ones until ctx ends.
// It sleeps until the next due job, waking early when a new timer is
// written (a watch on the timer index), so delayed jobs start on time. Run it
// on one daemon at a time (embedded: the daemon; shared: the elected
// leader); two overlapping briefly is safe. It returns ctx's error.
func (c *Coordinator) RunMaintenance(ctx context.Context, cfg MaintainConfig) error {
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = time.Second
	}
	if cfg.PurgeEvery <= 0 {
		cfg.PurgeEvery = time.Minute
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var watch <-chan kv.WatchResponse
	retry := newWatchRetry(c)
	// Set while the pause before watching again runs: passes go on at
	// their times meanwhile (a job due during it is not left waiting).
	var rewatch <-chan time.Time
	lastPurge := time.Time{}
	// A purge of the finished jobs past retention deletes one batch per
	// pass, from purgeNext on ("": none under way), so that a backlog (a
	// lowered retention, a daemon down for days) holds back no promotion
	// by more than one batch (ADR 0055). purged counts its deletes.
	var (
		purgeNext string
		purged    int
	)
	// A pass starts at floor: the timer entries below it were read by an
	// earlier pass, and every timer written since is known from the
	// watch, which lowers the floor to it. Without a floor ("": no watch,
	// or a pass that failed) and once every fullReadEvery a pass reads the
	// index from its start, so that the floor can delay a job, never hide
	// it. Reading from the start every pass walked, on etcd and in
	// Pebble, every entry promoted since the last compaction, at every
	// wake-up (docs/performance.md section 43). The minute is timed on
	// the coordinator's clock, which may step back (fullReadDue).
	var (
		floor    string
		lastFull time.Time
	)
	for {
		if watch == nil && rewatch == nil {
			retry.begin()
			// Watch from just after a revision read first: a timer written
			// after it is delivered, one written before it is seen by the
			// pass, whose reads come later.
			// (A failed read leaves the loop without a watch until its next
			// pass, whose own read fails alike and is logged.)
			if rr, err := c.store.Range(ctx, kv.RangeRequest{Start: c.keys.timers()}); err == nil {
				watch = c.store.Watch(wctx, c.keys.timers(), rr.Revision+1)
			}
			floor = ""
		}
		passStart := c.clock.Now()
		from := floor
		if from == "" || fullReadDue(passStart, lastFull) {
			from, lastFull = c.keys.timers(), passStart
		}
		n, next, err := c.promoteFrom(ctx, from)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("promoting due jobs failed", slog.Any("err", err))
		} else if n > 0 {
			c.log.Debug("promoted due jobs", slog.Int("jobs", n))
		}
		if floor = next; watch == nil {
			floor = ""
		}
		if now := c.clock.Now(); purgeNext == "" && now.Sub(lastPurge) >= cfg.PurgeEvery {
			lastPurge, purgeNext, purged = now, c.keys.finished(), 0
		}
		if purgeNext != "" {
			n, next, err := c.purgeFrom(ctx, purgeNext)
			purgeNext, purged = next, purged+n
			if err != nil && ctx.Err() == nil {
				c.log.Warn("purging finished jobs failed", slog.Any("err", err))
			} else if next == "" && purged > 0 {
				c.log.Info("purged finished jobs past retention", slog.Int("jobs", purged), slog.Duration("retention", c.cfg.Retention))
			}
		}
		var timer <-chan time.Time
		if purgeNext != "" {
			timer = goOn // the purge's next batch, after the next pass
		} else {
			wait := cfg.MaxWait
			// Entries due by the pass's start that are still there were
			// left by it (unreadable, too large to move): waking for them
			// would run pass after pass at once. A job due later, or
			// written due meanwhile (the watch), wakes the loop.
			if next, err := c.nextDueAfter(ctx, passStart); err == nil && !next.IsZero() {
				wait = min(wait, max(next.Sub(c.clock.Now()), time.Millisecond))
			}
			timer = c.clock.After(wait)
		}
	sleep:
		for {
			select {
			case <-ctx.Done():
				cancel()
				if watch != nil {
					for range watch {
					}
				}
				return ctx.Err()
			case <-timer:
				break sleep
			case <-rewatch:
				rewatch = nil
				break sleep
			case resp, ok := <-watch:
				if !ok || resp.Err != nil {
					// Re-watched from now before the next pass; a watch
					// that keeps ending at once must not make a spin of
					// passes: after a pause, with timer still running.
					watch, floor = nil, ""
					if d := retry.next(ctx, "maintenance: timers", resp.Err); d > 0 {
						rewatch = c.clock.After(d)
						continue
					}
					break sleep
				}
				if len(resp.Events) > 0 {
					retry.delivered()
				}
				if lowest, ok := lowestPut(resp); ok {
					if floor != "" && lowest < floor {
						floor = lowest
					}
					break sleep
				}
			}
		}
	}
}

// goOn is a timer that has fired: the loop's next pass comes at once.
var goOn = func() <-chan time.Time {
	ch := make(chan time.Time)
	close(ch)
	return ch
}()

// lowestPut returns the lowest key resp puts, if it puts any.
func lowestPut(resp kv.WatchResponse) (key string, ok bool) {
	for _, ev := range resp.Events {
		if ev.Type == kv.EventPut && (!ok || ev.KV.Key < key) {
			key, ok = ev.KV.Key, true
		}
	}
	return key, ok
}
