package coordinator

import (
	"context"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// follow reads prefix, calls onKey for every key present, then watches it
// from the read's revision on, calls onRestart with that revision, and calls
// onEvent for every change, until ctx ends. A watch that ends (compaction,
// reconnect) is resumed by reading again, so nothing is missed; callers must
// tolerate seeing a key twice. onEnd, if not nil, is called once for each
// call of onRestart, when that watch has ended: until the next onRestart,
// no change is reported.
func (c *Coordinator) follow(ctx context.Context, prefix string, onRestart func(rev int64), onEnd func(), onKey func(kv.KeyValue), onEvent func(kv.Event)) error {
	retry := newWatchRetry(c)
	for {
		rev := int64(0)
		err := c.scanAt(ctx, prefix, onKey, &rev)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.log.Warn("watch: read failed; retrying", slog.String("prefix", prefix), slog.Any("err", err))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-c.clock.After(500 * time.Millisecond):
			}
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		retry.begin()
		ch := c.store.Watch(wctx, prefix, rev+1)
		// Called once the watch covers everything after the read: a
		// consumer that resets here misses no change.
		if onRestart != nil {
			onRestart(rev)
		}
		var ended error
		for resp := range ch {
			if resp.Err != nil {
				ended = resp.Err
				c.log.Debug("watch ended; reading again", slog.String("prefix", prefix), slog.Any("err", resp.Err))
				continue
			}
			if len(resp.Events) > 0 {
				retry.delivered()
			}
			for _, ev := range resp.Events {
				onEvent(ev)
			}
		}
		cancel()
		if onEnd != nil {
			onEnd()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := retry.wait(ctx, "watch: "+prefix, ended); err != nil {
			return err
		}
	}
}

// Pauses before a watch that ended at once is set up again (see
// watchRetry).
const (
	watchRetryMin = 100 * time.Millisecond
	watchRetryMax = 5 * time.Second
	// watchLived is how long a watch must have lasted for its end to be
	// taken as normal (a compaction, a reconnect) rather than a refusal.
	watchLived = time.Second
)

// watchRetry paces a loop that reads, watches from the read's revision,
// and reads again when the watch ends. A store whose watches end at once
// every time (etcd refusing them, a require-leader watch failing with "no
// leader" while reads still succeed, a broken proxy) would otherwise turn
// the loop into a spin of reads as fast as the store answers. A watch that
// delivered events or lasted watchLived is set up again at once; after one
// that did neither, the first retry is immediate too (one compaction, one
// reconnect) and the next ones wait watchRetryMin, doubling to
// watchRetryMax. Waiting loses nothing: the loop reads again after the
// pause and watches from that read's revision.
type watchRetry struct {
	clock   Clock
	log     *slog.Logger
	started time.Time
	events  bool
	pause   time.Duration // before the next retry after a quick end
}

func newWatchRetry(c *Coordinator) *watchRetry { return &watchRetry{clock: c.clock, log: c.log} }

// begin marks a watch being set up.
func (r *watchRetry) begin() { r.started, r.events = r.clock.Now(), false }

// delivered records that the watch delivered events.
func (r *watchRetry) delivered() { r.events = true }

// reset starts the pauses over: a watch ended normally.
func (r *watchRetry) reset() { r.pause = 0 }

// wait is called once the watch ended (err is its error, if it gave one)
// and ctx has not: it returns when the loop may read and watch again, or
// ctx's error.
func (r *watchRetry) wait(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	d := r.next(ctx, what, err)
	if d == 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.clock.After(d):
		return nil
	}
}

// next is wait without the waiting: it returns the pause to take before
// watching again (0: at once), for a loop that has more to wait on.
func (r *watchRetry) next(ctx context.Context, what string, err error) time.Duration {
	if r.events || r.clock.Now().Sub(r.started) >= watchLived {
		r.reset()
		return 0
	}
	d := r.pause
	r.pause = min(max(2*r.pause, watchRetryMin), watchRetryMax)
	if d == 0 {
		return 0
	}
	// One warning per run of quick ends: the pauses after it (every 5 s,
	// in every loop and every waiting client, for as long as the store
	// refuses watches) would flood the log at warning level.
	level := slog.LevelDebug
	if d == watchRetryMin {
		level = slog.LevelWarn
	}
	r.log.Log(ctx, level, "watch ended at once again; pausing before watching again, up to "+watchRetryMax.String()+" until a watch lasts",
		slog.String("watch", what), slog.Any("err", err), slog.Duration("pause", d))
	return d
}

// scanAt is scan (keys only) that also reports the revision of its first
// read. With a nil visit it only reads the revision, from one key.
func (c *Coordinator) scanAt(ctx context.Context, prefix string, visit func(kv.KeyValue), rev *int64) error {
	if visit == nil {
		rr, err := c.store.Range(ctx, kv.RangeRequest{Start: prefix})
		if err == nil && *rev == 0 {
			*rev = rr.Revision
		}
		return err
	}
	first, _, err := c.scanRevs(ctx, prefix, true, func(x kv.KeyValue) error {
		visit(x)
		return nil
	})
	if err == nil && *rev == 0 {
		*rev = first
	}
	return err
}

// WatchCancelRequests calls fn with the id of every job that has a pending
// cancel request, and the request's revision: those present when it
// starts, and each new one. A request is for the run whose token is the
// highest below rev (a request is written only during the run it was
// made for, and removed when that run ends). It blocks until ctx ends and returns ctx's
// error.
func (c *Coordinator) WatchCancelRequests(ctx context.Context, fn func(id string, rev int64)) error {
	return c.follow(ctx, c.keys.cancels(), nil, nil,
		func(x kv.KeyValue) { fn(idFromIndex(x.Key), x.ModRevision) },
		func(ev kv.Event) {
			if ev.Type == kv.EventPut {
				fn(idFromIndex(ev.KV.Key), ev.KV.ModRevision)
			}
		})
}

// WatchAvailable calls fn whenever a job becomes available in queue, and
// each time its watch is established (first once it is set up: a caller
// that waits for that call misses no job). fn must not block. It blocks
// until ctx ends. While its watch runs, claims of queue through this
// coordinator skip the deleted index entries of jobs already claimed (see
// floors); while the watch is down (it ended, and the loop reads again or
// pauses before watching again), they read from the queue's start.
func (c *Coordinator) WatchAvailable(ctx context.Context, queue string, fn func()) error {
	if err := ValidateQueue(queue); err != nil {
		return err
	}
	c.floors.watch(queue, c.clock.Now())
	return c.follow(ctx, c.keys.queue(queue), func(rev int64) {
		// The watch is (re)established: the floor starts over, and
		// whatever became available while nobody watched, up to rev, is
		// claimable; it is in no watch event, so a claim's read older
		// than rev must not move the floor (see floor.lowRev).
		c.floors.restart(queue, rev)
		fn()
	}, func() {
		// Until the watch is back, no put lowers the floor: claims must
		// not trust it.
		c.floors.ended(queue)
	}, nil, func(ev kv.Event) {
		if ev.Type == kv.EventPut {
			c.floors.lower(queue, ev.KV.Key, ev.KV.ModRevision)
			fn()
		}
	})
}
