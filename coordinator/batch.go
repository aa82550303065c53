package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// unit is one job's part of a batched transaction: a nested transaction
// evaluated on its own compares, so one job losing a race does not fail the
// others.
type unit struct {
	txn kv.Txn
}

func (u unit) ops() int { return txnOps(u.txn) }

// txnOps counts t's ops etcd's way: the longest of its compares and
// branches, plus what its largest nested transaction needs.
func txnOps(t kv.Txn) int {
	inner := 0
	for _, ops := range [][]kv.Op{t.Then, t.Else} {
		for _, op := range ops {
			if op.Type == kv.OpTxn {
				inner = max(inner, txnOps(*op.Txn))
			}
		}
	}
	return max(len(t.If), len(t.Then), len(t.Else)) + inner
}

// bytes is u's size as a store counts it (localstore exactly, etcd within
// requestOverhead) when u is sent as one nested op of a transaction, as
// runUnits sends it: every op and compare with its key and value and 16
// bytes of encoding, the nested op itself and those inside it included.
// Without the nested ops, a chunk of many small units, which a store
// without an op limit takes, was refused as too large.
func (u unit) bytes() int {
	n := 16 // the nested op u is sent as
	for _, ops := range [][]kv.Op{u.txn.Then, u.txn.Else} {
		for _, op := range ops {
			if op.Type == kv.OpTxn {
				n += unit{txn: *op.Txn}.bytes()
				continue
			}
			n += len(op.Key) + len(op.Value) + 16
		}
	}
	for _, c := range u.txn.If {
		n += len(c.Key) + len(c.Bytes) + 16
	}
	return n
}

// requestOverhead is left free under a backend's byte limit.
const requestOverhead = 8 << 10

// fits reports whether u fits in one transaction of the store on its own.
func (c *Coordinator) fits(u unit) bool { return c.fitsBytes(u.bytes()) }

// fitsBytes reports whether a transaction of n bytes (as unit.bytes counts
// them) fits in one request of the store.
func (c *Coordinator) fitsBytes(n int) bool {
	return c.limits.MaxBytes == 0 || n <= c.limits.MaxBytes-requestOverhead
}

// chunk splits units into transactions that fit the store's limits: etcd
// counts an outer transaction's ops plus any nested one's against one budget.
func (c *Coordinator) chunk(units []unit) [][]unit {
	if c.limits.MaxOps == 0 && c.limits.MaxBytes == 0 {
		return [][]unit{units}
	}
	var out [][]unit
	start, inner, size := 0, 0, 0
	for i, u := range units {
		ni, ns := max(inner, u.ops()), size+u.bytes()
		n := i - start + 1
		tooMany := c.limits.MaxOps > 0 && n+ni > c.limits.MaxOps
		tooBig := c.limits.MaxBytes > 0 && ns > c.limits.MaxBytes-requestOverhead
		if (tooMany || tooBig) && i > start {
			out = append(out, units[start:i])
			start, ni, ns = i, u.ops(), u.bytes()
		}
		inner, size = ni, ns
	}
	return append(out, units[start:])
}

// runUnits applies units in as few transactions as fit and returns each
// unit's result, in order.
func (c *Coordinator) runUnits(ctx context.Context, units []unit) ([]*kv.TxnResult, int64, error) {
	out := make([]*kv.TxnResult, 0, len(units))
	var rev int64
	for _, ch := range c.chunk(units) {
		ops := make([]kv.Op, len(ch))
		for i, u := range ch {
			ops[i] = kv.Nested(u.txn)
		}
		res, err := c.store.Txn(ctx, kv.Txn{Then: ops})
		if err != nil {
			return out, rev, err
		}
		rev = res.Revision
		for _, r := range res.Results {
			if r.Txn != nil {
				r.Txn.Revision = res.Revision // a nested result shares its outer revision
			}
			out = append(out, r.Txn)
		}
	}
	return out, rev, nil
}

// movable returns the unit build makes of j's move (by maintenance step
// what), which fits in one transaction of the store. A job that would
// become available but no longer fits with its queue's index copy (its
// record grew with errors and a checkpoint) could never run again: it is
// discarded instead, saying why. ok is false, and the job left and
// logged, when even that does not fit.
func (c *Coordinator) movable(what string, j *Job, now time.Time, build func() unit) (u unit, ok bool) {
	limit := c.limits.MaxBytes - requestOverhead
	if u = build(); !c.fits(u) && j.State == StateAvailable {
		c.log.Error(what+": job too large to run again: discarded", slog.String("job", j.ID), slog.Int("bytes", u.bytes()), slog.Int("limit", limit))
		j.Errors = append(j.Errors, AttemptError{At: now, Attempt: j.Attempt,
			Error: fmt.Sprintf("discarded: too large to run again (its record and its queue's copy take %d bytes, the store takes %d in one request)", u.bytes(), limit)})
		j.State, j.FinalizedAt = StateDiscarded, &now
		u = build()
	}
	if !c.fits(u) {
		c.log.Error(what+": job too large for one transaction of the store, even finished; it is left", slog.String("job", j.ID), slog.Int("bytes", u.bytes()))
		return u, false
	}
	return u, true
}
