// Package kv is the narrow transactional key-value seam that the job state
// machine in package coordinator is written against, once, for both modes.
//
// Its semantics are etcd's, so that the etcd backend is an adapter and not a
// second implementation of the queue:
//
//   - Every write transaction that changes something advances one global
//     revision by exactly one. A key written by it gets that revision as its
//     ModRevision, and as its CreateRevision if it did not exist; its Version
//     counts writes since creation. Revisions never go backwards, not even
//     across restarts: they are fencing tokens.
//   - A [Txn] is If(compares) Then(ops) Else(ops), applied atomically and
//     durably (fsync or quorum) before [Store.Txn] returns. Ops may be nested
//     transactions; each nested one is evaluated on its own compares.
//   - [Store.Range] reads a key range at one consistent point and reports the
//     store revision of that point.
//   - [Store.Watch] streams every change to a key prefix from a revision on,
//     or ends with [ErrCompacted] when that history is no longer kept.
//   - Leases: keys can be attached to a lease; when the lease is revoked or
//     expires, they are deleted (a delete event, a new revision).
//
// Two backends exist: localstore (Pebble, one process) and coordinator/etcdkv.
package kv

import (
	"context"
	"errors"
	"time"
)

// Errors every backend returns for the same conditions.
var (
	// ErrCompacted ends a watch whose start revision is older than the
	// history the store keeps. Read again and watch from the new revision.
	ErrCompacted = errors.New("kv: required revision has been compacted")
	// ErrLeaseNotFound is returned by KeepAliveOnce and Revoke for a lease
	// that expired or was revoked.
	ErrLeaseNotFound = errors.New("kv: lease not found")
	// ErrTxnTooLarge is returned for a transaction over the backend's
	// [Limits].
	ErrTxnTooLarge = errors.New("kv: transaction too large")
	// ErrClosed is returned by every call on a closed store.
	ErrClosed = errors.New("kv: store closed")
	// ErrFailed is wrapped by every call on a store that failed and
	// refuses every call until it is closed and opened again (localstore
	// after a write error): no retry can succeed.
	ErrFailed = errors.New("kv: store failed")
	// ErrScanUnsupported is returned by [Scanner.Scan], having visited
	// nothing, when the store cannot scan in one pass: read in pages.
	ErrScanUnsupported = errors.New("kv: scan in one pass not supported")
	// ErrNoSpace is returned for a write the store has no room for: etcd
	// over its backend quota (its NOSPACE alarm refuses every write until
	// an operator defragments it and disarms the alarm), or, from
	// [SpaceChecker.CheckSpace], a store short of its reserve, which
	// writes nothing. From etcd, a write may have been applied all the
	// same: etcd answers NOSPACE for the writes that took it over its
	// quota, having applied them, as well as for those its alarm refused.
	ErrNoSpace = errors.New("kv: store out of space")
)

// LeaseID names a lease. Zero means "no lease".
type LeaseID int64

// KeyValue is one key with its metadata, as read.
type KeyValue struct {
	Key            string
	Value          []byte // nil when empty
	CreateRevision int64
	ModRevision    int64
	Version        int64
	Lease          LeaseID
}

// Target is what a [Cmp] compares.
type Target int

// Compare targets.
const (
	Version Target = iota + 1
	CreateRevision
	ModRevision
	Value
)

// CmpOp is a compare operator.
type CmpOp int

// Compare operators.
const (
	Equal CmpOp = iota + 1
	NotEqual
	Less
	Greater
)

// Cmp is one condition of a transaction. A missing key has Version,
// CreateRevision and ModRevision zero; a Value compare on a missing key is
// false whatever the operator (as in etcd).
type Cmp struct {
	Key    string
	Target Target
	Op     CmpOp
	Int    int64  // for Version, CreateRevision, ModRevision
	Bytes  []byte // for Value
}

// VersionIs compares a key's version (0 when missing).
func VersionIs(key string, op CmpOp, v int64) Cmp {
	return Cmp{Key: key, Target: Version, Op: op, Int: v}
}

// CreateRevisionIs compares a key's creation revision.
func CreateRevisionIs(key string, op CmpOp, rev int64) Cmp {
	return Cmp{Key: key, Target: CreateRevision, Op: op, Int: rev}
}

// ModRevisionIs compares a key's last modification revision.
func ModRevisionIs(key string, op CmpOp, rev int64) Cmp {
	return Cmp{Key: key, Target: ModRevision, Op: op, Int: rev}
}

// Missing is true when key does not exist.
func Missing(key string) Cmp { return VersionIs(key, Equal, 0) }

// Exists is true when key exists.
func Exists(key string) Cmp { return VersionIs(key, Greater, 0) }

// OpType says what an [Op] does.
type OpType int

// Op types.
const (
	OpGet OpType = iota + 1
	OpPut
	OpDelete
	OpTxn
)

// Op is one operation in a transaction branch.
type Op struct {
	Type  OpType
	Key   string
	Value []byte  // OpPut
	Lease LeaseID // OpPut: attach the key to this lease (0: none)
	Txn   *Txn    // OpTxn
}

// Get reads one key.
func Get(key string) Op { return Op{Type: OpGet, Key: key} }

// Put writes one key, attached to lease unless it is zero.
func Put(key string, value []byte, lease LeaseID) Op {
	return Op{Type: OpPut, Key: key, Value: value, Lease: lease}
}

// Delete deletes one key; deleting a missing key is not an error.
func Delete(key string) Op { return Op{Type: OpDelete, Key: key} }

// Nested wraps a transaction as an op of an enclosing one.
func Nested(t Txn) Op { return Op{Type: OpTxn, Txn: &t} }

// Txn is If(If...) Then(Then...) Else(Else...). A key may appear at most once
// among the writes of one branch (etcd rejects duplicates).
type Txn struct {
	If   []Cmp
	Then []Op
	Else []Op
}

// Bytes counts the keys and values of t, nested transactions included:
// most of its size as a request.
func (t *Txn) Bytes() int {
	n := 0
	for _, c := range t.If {
		n += len(c.Key) + len(c.Bytes)
	}
	for _, ops := range [][]Op{t.Then, t.Else} {
		for _, op := range ops {
			n += len(op.Key) + len(op.Value)
			if op.Txn != nil {
				n += op.Txn.Bytes()
			}
		}
	}
	return n
}

// OpResult is the result of one op of the branch that ran.
type OpResult struct {
	// KV is the key read by an OpGet, nil if it was missing.
	KV *KeyValue
	// Txn is the result of an OpTxn.
	Txn *TxnResult
}

// TxnResult is the outcome of a transaction.
type TxnResult struct {
	// Succeeded is true when the If compares all held and Then ran.
	Succeeded bool
	// Revision is the store revision after the transaction: the revision
	// of its writes when it wrote anything.
	Revision int64
	// Results has one entry per op of the branch that ran.
	Results []OpResult
}

// RangeRequest reads the keys in [Start, End), in key order.
type RangeRequest struct {
	Start string
	// End is exclusive; empty reads Start alone. Use [PrefixEnd].
	End   string
	Limit int // 0: no limit
	// KeysOnly leaves values out, and leases: etcd serves such a read
	// from its index, which holds none (localstore does as etcd does).
	KeysOnly bool
	// Serializable allows a faster read that may miss the newest writes
	// or show writes not yet durable (etcd: served by the member's local
	// state without a quorum round; localstore: without waiting for the
	// fsync in flight). Use it only where a later conditional write
	// decides, such as finding claim candidates.
	Serializable bool
}

// Prefix returns a RangeRequest for every key starting with prefix.
func Prefix(prefix string, limit int) RangeRequest {
	return RangeRequest{Start: prefix, End: PrefixEnd(prefix), Limit: limit}
}

// PrefixEnd returns the smallest key greater than every key with prefix.
func PrefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00" // etcd: the whole key space from Start on
}

// RangeResult is what Range read.
type RangeResult struct {
	KVs []KeyValue
	// More is true when Limit cut the result short.
	More bool
	// Revision is the store revision the read saw.
	Revision int64
}

// EventType says whether a watched key was written or deleted.
type EventType int

// Event types.
const (
	EventPut EventType = iota + 1
	EventDelete
)

// Event is one change seen by a watch. For a delete, KV holds the key and the
// revision of the delete as ModRevision.
type Event struct {
	Type EventType
	KV   KeyValue
}

// WatchResponse is one batch of events, all of one revision or consecutive
// revisions, in revision order. A response with a non-nil Err is the last one
// before the channel closes.
type WatchResponse struct {
	Events []Event
	Err    error
	// CompactRevision is set with ErrCompacted: watch from a revision above
	// it after reading again.
	CompactRevision int64
}

// Limits tells the coordinator how large one transaction may be.
type Limits struct {
	// MaxOps bounds max(len(If), len(Then), len(Else)) of a transaction,
	// nested transactions counted in; 0 means unlimited.
	MaxOps int
	// MaxBytes bounds the encoded size of a request; 0 means unlimited.
	MaxBytes int
	// RangeCountsAll is true when a limited Range costs every key from
	// its start to its end, not just those it returns: etcd visits them
	// all to fill in the response's count.
	RangeCountsAll bool
	// LeasesExpire is true when the store ends a lease that is not
	// renewed within its TTL, whatever this process does (etcd); false
	// when only a revoke or the store's next open does (localstore,
	// owned by one process).
	LeasesExpire bool
}

// Scanner is implemented by a store that reads a whole range in one pass,
// at one revision, at a cost that grows with the keys read, where a Range
// with a limit costs every key to the range's end ([Limits].RangeCountsAll):
// reading a large range in pages of Range would cost the square of its
// size. Scan calls visit for each key of r's range in key order (r.Limit
// must be 0) and returns the revision read at; an error from visit ends the
// scan and is returned. [ErrScanUnsupported], with nothing visited, says
// to read in pages instead.
type Scanner interface {
	Scan(ctx context.Context, r RangeRequest, visit func(KeyValue) error) (rev int64, err error)
}

// SpaceChecker is implemented by a store that can see its room running out
// before its writes fail (localstore: the free space of its file system).
// CheckSpace returns an error wrapping [ErrNoSpace] when the store has less
// room than it keeps in reserve. The coordinator asks before it adds jobs,
// so that a store short of room refuses new work while the work it holds
// still runs: claims, outcomes and deletes are not checked.
type SpaceChecker interface {
	CheckSpace() error
}

// Store is the seam. Implementations must be safe for concurrent use.
type Store interface {
	// Txn applies t atomically and durably.
	Txn(ctx context.Context, t Txn) (TxnResult, error)
	// Range reads keys at one consistent revision.
	Range(ctx context.Context, r RangeRequest) (RangeResult, error)
	// Watch streams changes to keys with prefix from revision fromRev on
	// (0: from the next revision). The channel closes when ctx ends or the
	// watch fails (the last response then carries Err).
	Watch(ctx context.Context, prefix string, fromRev int64) <-chan WatchResponse
	// Grant creates a lease with the given TTL (rounded up to whole
	// seconds by etcd).
	Grant(ctx context.Context, ttl time.Duration) (LeaseID, error)
	// KeepAliveOnce renews a lease once and returns the TTL granted.
	// A lease that no longer exists yields ErrLeaseNotFound; callers
	// take a TTL of zero or less, which is how etcd's wire says so, the
	// same way.
	KeepAliveOnce(ctx context.Context, id LeaseID) (time.Duration, error)
	// Revoke ends a lease and deletes its keys.
	Revoke(ctx context.Context, id LeaseID) error
	// Limits reports the transaction size limits of this backend.
	Limits() Limits
	// Close releases the store. Owned resources only: an etcd client
	// passed in by the caller is not closed.
	Close() error
}
