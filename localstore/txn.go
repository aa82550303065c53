package localstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// errDuplicateKey is returned for a transaction that writes one key twice
// in one branch (etcd: "duplicate key given in txn request").
var errDuplicateKey = errors.New("localstore: a key is written twice in one transaction branch")

// Txn implements kv.Store with etcd's semantics:
//
//   - The compares of the transaction and of every nested one on the path
//     taken are evaluated against the store as it was when the transaction
//     started, not after the writes that precede them.
//   - A Get sees the writes of the ops before it in the same transaction.
//   - A key may be written (put, or put and deleted) at most once per branch,
//     nested branches included; the Then and Else of one transaction may
//     write the same key. Deleting a key twice is allowed. A duplicate is
//     rejected before anything is read or written.
//   - A Put attached to a lease that does not exist fails the whole
//     transaction with an error wrapping kv.ErrLeaseNotFound (only the
//     branches taken are checked, as in etcd).
//   - A transaction whose taken branches write nothing (reads only, or
//     deletes of missing keys) does not advance the revision.
//
// A transaction that writes is applied in revision order under the store's
// mutex and then waits, outside it, for the fsync that it shares with the
// transactions committed alongside it. It returns only once on disk. ctx is
// checked on entry: a transaction once applied is waited for, not
// abandoned, so a cancelled caller may still have committed (as with etcd).
func (s *Store) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if err := ctx.Err(); err != nil {
		return kv.TxnResult{}, err
	}
	size, err := checkTxn(&t)
	if err != nil {
		return kv.TxnResult{}, err
	}
	if s.opts.MaxTxnBytes > 0 && size > s.opts.MaxTxnBytes {
		return kv.TxnResult{}, fmt.Errorf("%w: about %d bytes, the limit is %d", kv.ErrTxnTooLarge, size, s.opts.MaxTxnBytes)
	}

	s.mu.Lock()
	if err := s.beginLocked(); err != nil {
		s.mu.Unlock()
		return kv.TxnResult{}, err
	}
	s.mu.Unlock()
	defer s.ops.Done()
	pre, base := s.prefetch(&t)
	s.mu.Lock()
	if err := s.failure(); err != nil {
		s.mu.Unlock()
		return kv.TxnResult{}, err
	}
	x := &txnExec{s: s, rev: s.rev + 1}
	x.usePrefetched(pre, base)
	res, err := x.run(&t)
	if err != nil {
		s.mu.Unlock()
		return kv.TxnResult{}, err
	}
	if len(x.order) == 0 {
		rev := s.rev
		s.mu.Unlock()
		x.setRevision(&res, rev)
		// What was read may have been written by a transaction that is
		// still waiting for its fsync: do not report it before it is safe.
		if err := s.waitSynced(ctx, rev); err != nil {
			return kv.TxnResult{}, err
		}
		return res, nil
	}
	b, err := x.batch()
	if err != nil {
		s.mu.Unlock()
		return kv.TxnResult{}, err
	}
	wait, err := s.commitLocked(b)
	if err != nil {
		s.mu.Unlock()
		return kv.TxnResult{}, err
	}
	s.rev = x.rev
	x.applyLeases()
	s.hist.append(x.events())
	s.mu.Unlock()

	if err := wait(); err != nil {
		return kv.TxnResult{}, err
	}
	s.markSynced(x.rev)
	x.setRevision(&res, x.rev)
	return res, nil
}

// prefetch reads every key t may compare, read or write, before t takes
// the store's mutex, so that the Pebble reads of one transaction overlap
// the evaluation of another instead of queueing behind it. It returns the
// keys read (nil: missing) and a revision at or before their reads;
// usePrefetched drops those written after it.
func (s *Store) prefetch(t *kv.Txn) (map[string]*kv.KeyValue, int64) {
	base := s.hist.last()
	// Sized for every key named, repeats included: no rehash as a group
	// commit's keys are added.
	keys := make(map[string]*kv.KeyValue, countKeys(t))
	var walk func(t *kv.Txn)
	walk = func(t *kv.Txn) {
		for _, c := range t.If {
			keys[c.Key] = nil
		}
		for _, ops := range [2][]kv.Op{t.Then, t.Else} {
			for _, op := range ops {
				if op.Type == kv.OpTxn {
					walk(op.Txn)
				} else {
					keys[op.Key] = nil
				}
			}
		}
	}
	walk(t)
	if err := s.readKeys(keys); err != nil {
		return nil, 0 // read again under the mutex, which reports it
	}
	return keys, base
}

// countKeys counts the keys that t compares or operates on, a key named
// twice twice.
func countKeys(t *kv.Txn) int {
	n := len(t.If)
	for _, ops := range [2][]kv.Op{t.Then, t.Else} {
		for _, op := range ops {
			if op.Type == kv.OpTxn {
				n += countKeys(op.Txn)
			} else {
				n++
			}
		}
	}
	return n
}

// txnExec evaluates one transaction under the store's mutex. Nothing is
// written to Pebble until the whole transaction has been evaluated, so reads
// of committed state see the state at the transaction's start throughout.
type txnExec struct {
	s         *Store
	rev       int64                   // the revision this transaction writes at
	committed map[string]*kv.KeyValue // committed state read so far; nil entry: missing
	writes    map[string]*pending     // this transaction's writes by key
	order     []*pending              // the same, in the order they were made
	nested    []*kv.TxnResult         // results of nested transactions, for their Revision
}

// usePrefetched adopts, as committed state read, the keys read by
// prefetch at or after revision base, less those written since base (the
// store's mutex is held, so the history holds every write up to now). If
// the history no longer reaches back to base, it adopts none.
func (x *txnExec) usePrefetched(pre map[string]*kv.KeyValue, base int64) {
	if pre == nil || !x.s.hist.writtenSince(base, func(key string) { delete(pre, key) }) {
		return
	}
	x.committed = pre
}

// pending is one key written by the transaction.
type pending struct {
	key  string
	prev *kv.KeyValue // committed value before the transaction; nil: missing
	kv   *kv.KeyValue // new value; nil: deleted
}

func (x *txnExec) run(t *kv.Txn) (kv.TxnResult, error) {
	ok, err := x.holds(t.If)
	if err != nil {
		return kv.TxnResult{}, err
	}
	ops := t.Then
	if !ok {
		ops = t.Else
	}
	res := kv.TxnResult{Succeeded: ok}
	if len(ops) > 0 {
		res.Results = make([]kv.OpResult, len(ops))
	}
	for i, op := range ops {
		switch op.Type {
		case kv.OpGet:
			cur, err := x.current(op.Key)
			if err != nil {
				return kv.TxnResult{}, err
			}
			if cur != nil {
				c := *cur
				c.Value = bytes.Clone(cur.Value)
				res.Results[i].KV = &c
			}
		case kv.OpPut:
			if op.Lease != 0 && x.s.leases[op.Lease] == nil {
				return kv.TxnResult{}, fmt.Errorf("localstore: put %q with lease %d: %w", op.Key, op.Lease, kv.ErrLeaseNotFound)
			}
			cur, err := x.current(op.Key)
			if err != nil {
				return kv.TxnResult{}, err
			}
			var value []byte // nil if empty, as from etcd
			if len(op.Value) > 0 {
				value = bytes.Clone(op.Value)
			}
			nkv := &kv.KeyValue{
				Key:            op.Key,
				Value:          value,
				CreateRevision: x.rev,
				ModRevision:    x.rev,
				Version:        1,
				Lease:          op.Lease,
			}
			if cur != nil {
				nkv.CreateRevision = cur.CreateRevision
				nkv.Version = cur.Version + 1
			}
			if err := x.write(op.Key, nkv); err != nil {
				return kv.TxnResult{}, err
			}
		case kv.OpDelete:
			cur, err := x.current(op.Key)
			if err != nil {
				return kv.TxnResult{}, err
			}
			if cur != nil {
				if err := x.write(op.Key, nil); err != nil {
					return kv.TxnResult{}, err
				}
			}
		case kv.OpTxn:
			sub, err := x.run(op.Txn)
			if err != nil {
				return kv.TxnResult{}, err
			}
			res.Results[i].Txn = &sub
			x.nested = append(x.nested, &sub)
		}
	}
	return res, nil
}

// holds evaluates compares against the committed state.
func (x *txnExec) holds(cmps []kv.Cmp) (bool, error) {
	for _, c := range cmps {
		cur, err := x.readCommitted(c.Key)
		if err != nil {
			return false, err
		}
		if !compare(c, cur) {
			return false, nil
		}
	}
	return true, nil
}

// compare applies one compare to the current value of its key, nil when
// missing. As in etcd, a Value compare on a missing key fails whatever its
// operator; the other targets of a missing key are zero.
func compare(c kv.Cmp, cur *kv.KeyValue) bool {
	if cur == nil {
		if c.Target == kv.Value {
			return false
		}
		cur = &kv.KeyValue{}
	}
	var r int
	switch c.Target {
	case kv.Version:
		r = cmp.Compare(cur.Version, c.Int)
	case kv.CreateRevision:
		r = cmp.Compare(cur.CreateRevision, c.Int)
	case kv.ModRevision:
		r = cmp.Compare(cur.ModRevision, c.Int)
	case kv.Value:
		r = bytes.Compare(cur.Value, c.Bytes)
	}
	switch c.Op {
	case kv.Equal:
		return r == 0
	case kv.NotEqual:
		return r != 0
	case kv.Less:
		return r < 0
	case kv.Greater:
		return r > 0
	}
	return false // unreachable: checkTxn rejects unknown operators
}

func (x *txnExec) readCommitted(key string) (*kv.KeyValue, error) {
	if cur, ok := x.committed[key]; ok {
		return cur, nil
	}
	cur, err := x.s.readKey(key)
	if err != nil {
		return nil, err
	}
	if x.committed == nil {
		x.committed = map[string]*kv.KeyValue{}
	}
	x.committed[key] = cur
	return cur, nil
}

// current returns key as this transaction sees it so far.
func (x *txnExec) current(key string) (*kv.KeyValue, error) {
	if p, ok := x.writes[key]; ok {
		return p.kv, nil
	}
	return x.readCommitted(key)
}

func (x *txnExec) write(key string, nkv *kv.KeyValue) error {
	if _, ok := x.writes[key]; ok {
		// checkTxn lets only a second delete through, and a delete of a
		// key already deleted here is not a write.
		return fmt.Errorf("localstore: internal error: key %q written twice: %w", key, errDuplicateKey)
	}
	prev, err := x.readCommitted(key)
	if err != nil {
		return err
	}
	p := &pending{key: key, prev: prev, kv: nkv}
	if x.writes == nil {
		// Sized for every key read ahead (a transaction writes most of
		// the keys it touches): no rehash as a group commit's writes grow.
		x.writes = make(map[string]*pending, len(x.committed))
	}
	x.writes[key] = p
	x.order = append(x.order, p)
	return nil
}

func (x *txnExec) setRevision(res *kv.TxnResult, rev int64) {
	res.Revision = rev
	for _, n := range x.nested {
		n.Revision = rev
	}
}

// batch builds the Pebble batch of the transaction: the records, the lease
// index entries that change, and the revision counter.
//
// A key put exactly once since it was created (version 1) is deleted with a
// SingleDelete, which vanishes with that one Set in the first compaction or
// flush that sees both, instead of a tombstone carried down to the last
// level: the available-index, ownership and running keys of every job are
// written once and deleted once. So are lease index entries: one is set
// when its key takes the lease, and deleted when the key leaves it or is
// deleted, before it can be set again (lease ids are never reused).
func (x *txnExec) batch() (*pebble.Batch, error) {
	b := x.s.db.NewBatch()
	var buf []byte
	for _, p := range x.order {
		prevLease, newLease := leaseOf(p.prev), leaseOf(p.kv)
		var err error
		switch {
		case p.kv == nil && p.prev != nil && p.prev.Version == 1:
			err = b.SingleDelete(dataKey(p.key), nil)
		case p.kv == nil:
			err = b.Delete(dataKey(p.key), nil)
		default:
			buf = appendValue(buf[:0], p.kv)
			err = b.Set(dataKey(p.key), buf, nil)
		}
		if err == nil && prevLease != newLease && prevLease != 0 {
			err = b.SingleDelete(leaseIndexKey(prevLease, p.key), nil)
		}
		if err == nil && prevLease != newLease && newLease != 0 {
			err = b.Set(leaseIndexKey(newLease, p.key), nil, nil)
		}
		if err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("localstore: build batch: %w", err)
		}
	}
	if err := b.Set(keyRevision, encodeUint64(x.rev), nil); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("localstore: build batch: %w", err)
	}
	return b, nil
}

func leaseOf(kv *kv.KeyValue) kv.LeaseID {
	if kv == nil {
		return 0
	}
	return kv.Lease
}

// applyLeases moves written keys between the in-memory lease key sets, once
// the batch is applied.
func (x *txnExec) applyLeases() {
	for _, p := range x.order {
		prevLease, newLease := leaseOf(p.prev), leaseOf(p.kv)
		if prevLease == newLease {
			continue
		}
		if l := x.s.leases[prevLease]; l != nil {
			delete(l.keys, p.key)
		}
		if l := x.s.leases[newLease]; l != nil {
			l.keys[p.key] = struct{}{}
		}
	}
}

// events returns the watch events of the transaction, in the order its
// writes were made.
func (x *txnExec) events() []kv.Event {
	evs := make([]kv.Event, len(x.order))
	for i, p := range x.order {
		if p.kv == nil {
			evs[i] = kv.Event{Type: kv.EventDelete, KV: kv.KeyValue{Key: p.key, ModRevision: x.rev}}
		} else {
			evs[i] = kv.Event{Type: kv.EventPut, KV: *p.kv}
		}
	}
	return evs
}

// checkTxn validates t before anything is read, and returns its approximate
// encoded size.
func checkTxn(t *kv.Txn) (int, error) {
	_, size, err := checkNested(t)
	return size, err
}

// perOpOverhead approximates the encoding of an op or compare beyond its key
// and value, for the size limit.
const perOpOverhead = 16

// write is a key a branch puts (put) or only deletes.
type write struct {
	key string
	put bool
}

// checkNested validates t and returns the keys its branches may write
// (Then and Else together: they exclude each other), each once, in no
// particular order: put if either branch puts it.
func checkNested(t *kv.Txn) (writes []write, size int, err error) {
	for _, c := range t.If {
		if c.Key == "" {
			return nil, 0, errors.New("localstore: compare on the empty key")
		}
		if c.Target < kv.Version || c.Target > kv.Value {
			return nil, 0, fmt.Errorf("localstore: compare on %q: unknown target %d", c.Key, c.Target)
		}
		if c.Op < kv.Equal || c.Op > kv.Greater {
			return nil, 0, fmt.Errorf("localstore: compare on %q: unknown operator %d", c.Key, c.Op)
		}
		size += len(c.Key) + len(c.Bytes) + perOpOverhead
	}
	for _, branch := range [][]kv.Op{t.Then, t.Else} {
		ws, n, err := checkBranch(branch)
		if err != nil {
			return nil, 0, err
		}
		size += n
		writes = append(writes, ws...)
	}
	if len(t.Else) > 0 {
		// Both branches may write a key: it counts once.
		writes, _ = dedupWrites(writes, false)
	}
	return writes, size, nil
}

// checkBranch validates the ops of one branch: no key may be put by two ops,
// nor put by one and deleted by another; two deletes of one key are fine.
// Nested transactions count with everything either of their branches may
// write. It returns the keys written, each once.
func checkBranch(ops []kv.Op) (writes []write, size int, err error) {
	writes = make([]write, 0, len(ops))
	for _, op := range ops {
		switch op.Type {
		case kv.OpGet, kv.OpPut, kv.OpDelete:
			if op.Key == "" {
				return nil, 0, errors.New("localstore: op on the empty key")
			}
			size += len(op.Key) + len(op.Value) + perOpOverhead
			if op.Type != kv.OpGet {
				writes = append(writes, write{key: op.Key, put: op.Type == kv.OpPut})
			}
		case kv.OpTxn:
			if op.Txn == nil {
				return nil, 0, errors.New("localstore: nested op without a transaction")
			}
			ws, n, err := checkNested(op.Txn)
			if err != nil {
				return nil, 0, err
			}
			size += n + perOpOverhead
			writes = append(writes, ws...)
		default:
			return nil, 0, fmt.Errorf("localstore: unknown op type %d", op.Type)
		}
	}
	if writes, err = dedupWrites(writes, true); err != nil {
		return nil, 0, err
	}
	return writes, size, nil
}

// smallWrites is the most writes dedupWrites compares pairwise; above it,
// it indexes them in a map (a batch of outcomes writes thousands of keys).
const smallWrites = 16

// dedupWrites merges the writes of one key into one, in place: put if any
// of them puts. When strict (the writes of one branch), a key put twice or
// put and deleted is an error.
func dedupWrites(ws []write, strict bool) ([]write, error) {
	if len(ws) < 2 {
		return ws, nil
	}
	var seen map[string]int // key -> index in out, for large sets
	if len(ws) > smallWrites {
		seen = make(map[string]int, len(ws))
	}
	out := ws[:0]
	for _, w := range ws {
		i, found := -1, false
		if seen != nil {
			i, found = seen[w.key]
		} else {
			i = slices.IndexFunc(out, func(x write) bool { return x.key == w.key })
			found = i >= 0
		}
		if !found {
			if seen != nil {
				seen[w.key] = len(out)
			}
			out = append(out, w)
			continue
		}
		first := &out[i]
		switch {
		case strict && first.put && w.put:
			return nil, fmt.Errorf("%w: put %q twice", errDuplicateKey, w.key)
		case strict && (first.put || w.put):
			return nil, fmt.Errorf("%w: put and delete %q", errDuplicateKey, w.key)
		}
		first.put = first.put || w.put
	}
	return out, nil
}
