package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// storeOps are the operations a wrapped store counts.
var storeOps = []string{"txn", "range", "watch", "grant", "keepalive", "revoke"}

// WrapStore returns s with its failed requests counted
// (leasehold_store_errors_total, labelled backend: "etcd", "pebble") and
// its lease renewals timed. Give the coordinator the wrapped store.
func (m *Metrics) WrapStore(s kv.Store, backend string) kv.Store {
	for _, op := range storeOps {
		m.storeErrors.WithLabelValues(backend, op)
	}
	return &meteredStore{Store: s, m: m, backend: backend}
}

// meteredStore counts a store's failed requests and times lease renewals.
type meteredStore struct {
	kv.Store
	m       *Metrics
	backend string
}

var (
	_ kv.Scanner      = (*meteredStore)(nil)
	_ kv.SpaceChecker = (*meteredStore)(nil)
)

// CheckSpace passes the check through to a store that can run short of
// room (localstore); a store that cannot say has room.
func (s *meteredStore) CheckSpace() error {
	if sc, ok := s.Store.(kv.SpaceChecker); ok {
		return sc.CheckSpace()
	}
	return nil
}

// count counts err, unless the caller cancelled the request: a request
// whose deadline passed is counted, as the store did not answer in time.
func (s *meteredStore) count(ctx context.Context, op string, err error) {
	if err == nil || errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, context.Canceled) {
		return
	}
	s.m.storeErrors.WithLabelValues(s.backend, op).Inc()
}

func (s *meteredStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	r, err := s.Store.Txn(ctx, t)
	s.count(ctx, "txn", err)
	return r, err
}

func (s *meteredStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	rr, err := s.Store.Range(ctx, r)
	s.count(ctx, "range", err)
	return rr, err
}

// Scan passes a scan in one pass through to a store that can (etcd since
// 3.7, see kv.Scanner); its failures count as failed range reads.
func (s *meteredStore) Scan(ctx context.Context, r kv.RangeRequest, visit func(kv.KeyValue) error) (int64, error) {
	sc, ok := s.Store.(kv.Scanner)
	if !ok {
		return 0, kv.ErrScanUnsupported
	}
	var visitErr error
	rev, err := sc.Scan(ctx, r, func(x kv.KeyValue) error {
		visitErr = visit(x)
		return visitErr
	})
	if visitErr == nil && !errors.Is(err, kv.ErrScanUnsupported) {
		s.count(ctx, "range", err)
	}
	return rev, err
}

func (s *meteredStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	in := s.Store.Watch(ctx, prefix, fromRev)
	out := make(chan kv.WatchResponse)
	go func() {
		defer close(out)
		for resp := range in {
			if resp.Err != nil {
				s.count(ctx, "watch", resp.Err)
			}
			select {
			case out <- resp:
			case <-ctx.Done():
				// The consumer may have stopped reading: drain what the
				// store still sends until it closes the channel.
				for range in {
				}
				return
			}
		}
	}()
	return out
}

func (s *meteredStore) Grant(ctx context.Context, ttl time.Duration) (kv.LeaseID, error) {
	id, err := s.Store.Grant(ctx, ttl)
	s.count(ctx, "grant", err)
	return id, err
}

func (s *meteredStore) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	start := time.Now()
	ttl, err := s.Store.KeepAliveOnce(ctx, id)
	s.m.renewalTime.Observe(time.Since(start).Seconds())
	if err == nil {
		s.m.renewals.Inc()
	}
	if !errors.Is(err, kv.ErrLeaseNotFound) {
		s.count(ctx, "keepalive", err)
	}
	return ttl, err
}

func (s *meteredStore) Revoke(ctx context.Context, id kv.LeaseID) error {
	err := s.Store.Revoke(ctx, id)
	if !errors.Is(err, kv.ErrLeaseNotFound) {
		s.count(ctx, "revoke", err)
	}
	return err
}
