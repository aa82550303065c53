package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// groupCommit applies independent transactions from many goroutines
// together: each becomes a nested transaction (evaluated on its own
// compares) of one store transaction, so that concurrent run outcomes share
// one fsync (embedded) or one raft round (etcd) instead of queueing for
// one each. It needs no goroutine of its own: the first caller to find no
// batch in flight leads, applying everything queued meanwhile; when it is
// done, it hands the lead to the first of those who queued behind it.
type groupCommit struct {
	c     *Coordinator
	mu    sync.Mutex
	queue []*groupItem
	busy  bool
}

type groupItem struct {
	ctx  context.Context
	txn  kv.Txn
	res  *kv.TxnResult
	err  error
	done chan struct{} // closed when res/err are set
	lead chan struct{} // closed when this item's caller must lead
}

// errNotSent marks an outcome that the group commit never sent to the
// store (its context ended first): it was not applied, so a retry need not
// allow for it.
var errNotSent = errors.New("not sent to the store")

// maxGroup bounds the transactions applied together.
const maxGroup = 512

// apply runs t, possibly together with others, and returns its own result.
func (g *groupCommit) apply(ctx context.Context, t kv.Txn) (*kv.TxnResult, error) {
	it := &groupItem{ctx: ctx, txn: t, done: make(chan struct{}), lead: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, it)
	if g.busy {
		g.mu.Unlock()
		select {
		case <-it.done:
			return it.res, it.err
		case <-it.lead:
		case <-ctx.Done():
			// A caller whose context ends while it waits for the batch in
			// flight does not wait for it (up to the latest deadline of
			// others): it leaves, unsent, unless it was taken meanwhile.
			if g.leave(it) {
				return nil, fmt.Errorf("%w: %w", errNotSent, ctx.Err())
			}
			select {
			case <-it.done:
				return it.res, it.err
			case <-it.lead:
			}
		}
		g.mu.Lock()
	}
	g.busy = true
	batch := g.queue[:min(len(g.queue), maxGroup)]
	g.queue = append([]*groupItem(nil), g.queue[len(batch):]...)
	g.mu.Unlock()

	g.run(batch)

	g.mu.Lock()
	if len(g.queue) > 0 {
		close(g.queue[0].lead) // the next leader takes what queued meanwhile
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	<-it.done
	return it.res, it.err
}

// leave takes it out of the queue, unless a batch took it or it was made
// leader (then it must lead). It reports whether it left.
func (g *groupCommit) leave(it *groupItem) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.Index(g.queue, it)
	if i < 0 {
		return false
	}
	select {
	case <-it.lead:
		return false
	default:
	}
	g.queue = slices.Delete(g.queue, i, i+1)
	return true
}

// run applies batch and delivers each item's result. The store call is
// bounded by the latest deadline in the batch: every write is fenced, so
// one item outliving another's deadline is safe.
func (g *groupCommit) run(batch []*groupItem) {
	defer func() {
		for _, it := range batch {
			close(it.done)
		}
	}()
	if len(batch) == 1 {
		if err := batch[0].ctx.Err(); err != nil {
			batch[0].err = fmt.Errorf("%w: %w", errNotSent, err)
			return
		}
		res, err := g.c.store.Txn(batch[0].ctx, batch[0].txn)
		batch[0].res, batch[0].err = &res, err
		return
	}
	var latest time.Time
	units := make([]unit, 0, len(batch))
	live := batch[:0:0]
	for _, it := range batch {
		if err := it.ctx.Err(); err != nil {
			it.err = fmt.Errorf("%w: %w", errNotSent, err)
			continue
		}
		d, ok := it.ctx.Deadline()
		if !ok {
			d = time.Now().Add(time.Minute)
		}
		if d.After(latest) {
			latest = d
		}
		units = append(units, unit{txn: it.txn})
		live = append(live, it)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	defer cancel()
	// A store transaction may write a key only once (etcd rejects it even
	// across nested transactions): two writes for one job (a stale run's
	// and the current run's, say) go into consecutive transactions, in
	// the order they came.
	for len(live) > 0 {
		var now, later []*groupItem
		var nowUnits []unit
		seen := map[string]bool{}
		for i, it := range live {
			ks := writtenKeys(it.txn)
			clash := false
			for _, k := range ks {
				clash = clash || seen[k]
			}
			if clash {
				later = append(later, it)
				continue
			}
			for _, k := range ks {
				seen[k] = true
			}
			now = append(now, it)
			nowUnits = append(nowUnits, units[i])
		}
		results, _, err := g.c.runUnits(ctx, nowUnits)
		for i, it := range now {
			switch {
			case i < len(results) && results[i] != nil:
				it.res = results[i]
			case err != nil:
				it.err = err
			}
		}
		live = later
		units = units[:0]
		for _, it := range later {
			units = append(units, unit{txn: it.txn})
		}
	}
}

// writtenKeys lists the keys t may write, in any branch.
func writtenKeys(t kv.Txn) []string {
	var out []string
	for _, ops := range [][]kv.Op{t.Then, t.Else} {
		for _, op := range ops {
			switch op.Type {
			case kv.OpPut, kv.OpDelete:
				out = append(out, op.Key)
			case kv.OpTxn:
				out = append(out, writtenKeys(*op.Txn)...)
			}
		}
	}
	return out
}
