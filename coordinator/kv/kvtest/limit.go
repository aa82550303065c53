package kvtest

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// Limit is a kv.Store with a smaller request limit than the one it wraps,
// as an etcd member has: it reports MaxBytes in Limits and refuses a larger
// transaction with kv.ErrTxnTooLarge.
type Limit struct {
	kv.Store
	MaxBytes int
}

// Limits implements kv.Store.
func (s *Limit) Limits() kv.Limits {
	l := s.Store.Limits()
	l.MaxBytes = s.MaxBytes
	return l
}

// Txn implements kv.Store.
func (s *Limit) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if n := txnBytes(t); n > s.MaxBytes {
		return kv.TxnResult{}, fmt.Errorf("%w: %d bytes, the limit is %d", kv.ErrTxnTooLarge, n, s.MaxBytes)
	}
	return s.Store.Txn(ctx, t)
}

// txnBytes counts the keys and values of t, nested transactions included.
func txnBytes(t kv.Txn) int {
	n := 0
	for _, c := range t.If {
		n += len(c.Key) + len(c.Bytes)
	}
	for _, ops := range [][]kv.Op{t.Then, t.Else} {
		for _, op := range ops {
			n += len(op.Key) + len(op.Value)
			if op.Txn != nil {
				n += txnBytes(*op.Txn)
			}
		}
	}
	return n
}
