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
	if n := t.Bytes(); n > s.MaxBytes {
		return kv.TxnResult{}, fmt.Errorf("%w: %d bytes, the limit is %d", kv.ErrTxnTooLarge, n, s.MaxBytes)
	}
	return s.Store.Txn(ctx, t)
}
