package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// maxElectBackoff bounds RunElected's pause after fn ended on its own.
const maxElectBackoff = 30 * time.Second

// RunElected runs fn on at most one daemon at a time per name: the one that
// holds the name's leader key, which hangs on its session lease (the same
// scheme as etcd's concurrency.Election, written over the seam so it works
// on both backends). fn's context ends when the session ends or ctx does;
// then the key is released (or expires with the lease) and another
// candidate takes over. session returns the caller's current session, which
// may change after a lease loss. Work done under fn must stay safe if two
// leaders briefly overlap (a paused leader that has not yet noticed): every
// maintenance write is conditional. fn that returns while still leader
// (an error, say) is run again after a pause, 1 s doubling to 30 s (back to
// 1 s after a run of 30 s or more), so that a failing fn does not campaign
// and resign in a tight loop. It returns ctx's error.
func (c *Coordinator) RunElected(ctx context.Context, name string, session func() *Session, fn func(ctx context.Context) error) error {
	key := c.keys.root + "e/" + name
	backoff := time.Duration(0) // after fn ended on its own: do not campaign in a tight loop
	retry := newWatchRetry(c)   // a candidate's watches of the leader key
	for ctx.Err() == nil {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-c.clock.After(backoff):
			}
		}
		sess := session()
		if sess == nil || sess.Ctx().Err() != nil {
			select {
			case <-ctx.Done():
			case <-c.clock.After(100 * time.Millisecond):
			}
			continue
		}
		res, err := c.store.Txn(ctx, kv.Txn{
			If:   []kv.Cmp{kv.Missing(key)},
			Then: []kv.Op{kv.Put(key, []byte(sess.WorkerID()), sess.Lease())},
			Else: []kv.Op{kv.Get(key)},
		})
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("election: campaign failed", slog.String("election", name), slog.Any("err", err))
				select {
				case <-ctx.Done():
				case <-c.clock.After(time.Second):
				}
			}
			continue
		}
		leaderRev := res.Revision
		if !res.Succeeded {
			cur := res.Results[0].KV
			if cur != nil && cur.Lease == sess.Lease() {
				leaderRev = cur.CreateRevision // ours already (a reply was lost)
			} else {
				// A watch that ends at once every time must not turn
				// this into a spin of campaigns.
				if ended, werr := c.waitGone(ctx, sess, key, res.Revision, retry); ended {
					_ = retry.wait(ctx, "election: "+name, werr)
				}
				continue
			}
		}
		c.log.Info("leader acquired", slog.String("election", name), slog.String("worker", sess.WorkerID()))
		// The candidate's run of quick watch ends is over: once it is a
		// candidate again, its first retry is at once.
		retry.reset()
		lctx, cancel := sess.bound(ctx)
		// Leadership also ends if the key is deleted under us.
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			c.holdWhileKept(lctx, sess, key, leaderRev)
			cancel()
		}()
		started := c.clock.Now()
		err = fn(lctx)
		ownEnd := lctx.Err() == nil
		cancel()
		<-watched
		if !ownEnd {
			backoff = 0
		} else {
			if c.clock.Now().Sub(started) >= maxElectBackoff {
				backoff = 0 // it ran well for a while: start the pauses over
			}
			backoff = min(max(time.Second, 2*backoff), maxElectBackoff)
			if err != nil {
				c.log.Warn("elected work failed; campaigning again after a pause", slog.String("election", name), slog.Any("err", err), slog.Duration("pause", backoff))
			}
		}
		// Resign: delete our key if it is still ours.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_, _ = c.store.Txn(rctx, kv.Txn{
			If:   []kv.Cmp{kv.CreateRevisionIs(key, kv.Equal, leaderRev)},
			Then: []kv.Op{kv.Delete(key)},
		})
		rcancel()
		c.log.Info("leadership released", slog.String("election", name), slog.String("worker", sess.WorkerID()))
	}
	return ctx.Err()
}

// holdWhileKept returns when the leader key, created at rev, is gone
// (deleted, or created again by another candidate), or when sess or ctx
// ends. A watch that ends does not end the leadership: the key is read
// again and watched from that read on (after a pause if the watch ended at
// once, so that a store whose watches keep failing costs neither a spin of
// reads nor a resign and campaign each time). A read that fails ends it.
func (c *Coordinator) holdWhileKept(ctx context.Context, sess *Session, key string, created int64) {
	retry := newWatchRetry(c)
	// rev is where the watch starts: after the key's creation, then after
	// each read. The key stays ours while its create revision is created.
	rev := created
	for {
		ended, werr := c.waitGone(ctx, sess, key, rev, retry)
		if !ended || retry.wait(ctx, "election: "+key, werr) != nil {
			return
		}
		rr, err := c.store.Range(ctx, kv.RangeRequest{Start: key})
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("election: read own leader key after its watch ended; leaving", slog.String("key", key), slog.Any("err", err))
			}
			return
		}
		if len(rr.KVs) == 0 || rr.KVs[0].CreateRevision != created {
			return
		}
		rev = rr.Revision
	}
}

// waitGone returns when key is deleted after rev, when sess or ctx ends,
// or when the watch ends: then with ended true and the watch's error, if
// it gave one. It starts retry's count of the watch.
func (c *Coordinator) waitGone(ctx context.Context, sess *Session, key string, rev int64, retry *watchRetry) (ended bool, err error) {
	wctx, cancel := sess.bound(ctx)
	defer cancel()
	retry.begin()
	ch := c.store.Watch(wctx, key, rev+1)
	defer func() {
		cancel()
		for range ch {
		}
	}()
	for resp := range ch {
		if resp.Err != nil {
			// The caller reads again (a campaign, or a read of its own
			// key).
			return wctx.Err() == nil, resp.Err
		}
		if len(resp.Events) > 0 {
			retry.delivered()
		}
		for _, ev := range resp.Events {
			// The watch is by prefix: election "a" sees the key of "ab".
			if ev.Type == kv.EventDelete && ev.KV.Key == key {
				retry.reset()
				return false, nil
			}
		}
	}
	return wctx.Err() == nil, nil
}

// MaintenanceElection is the election whose leader runs maintenance:
// promotions, retention, periodic jobs.
const MaintenanceElection = "maintenance"

// Leader returns the worker id holding the named election, or "".
func (c *Coordinator) Leader(ctx context.Context, name string) (string, error) {
	rr, err := c.store.Range(ctx, kv.RangeRequest{Start: c.keys.root + "e/" + name})
	if err != nil {
		return "", fmt.Errorf("coordinator: read leader of %s: %w", name, err)
	}
	if len(rr.KVs) == 0 {
		return "", nil
	}
	return string(rr.KVs[0].Value), nil
}
