package localstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// Grant implements kv.Store. The id comes from a counter persisted before
// Grant returns, so no id is ever handed out twice, not even across
// restarts. The TTL is rounded up to whole seconds, as etcd does, and is only
// reported back by KeepAliveOnce: leases of this store do not expire while
// the process lives, and all of them end with it (see Open).
func (s *Store) Grant(ctx context.Context, ttl time.Duration) (kv.LeaseID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if ttl <= 0 {
		return 0, fmt.Errorf("localstore: grant lease: TTL %v is not positive", ttl)
	}
	if r := ttl % time.Second; r != 0 {
		ttl += time.Second - r
	}

	s.mu.Lock()
	if err := s.beginLocked(); err != nil {
		s.mu.Unlock()
		return 0, err
	}
	defer s.ops.Done()
	id := s.leaseSeq + 1
	b := s.db.NewBatch()
	if err := b.Set(keyLeaseSeq, encodeUint64(id), nil); err != nil {
		s.mu.Unlock()
		_ = b.Close()
		return 0, fmt.Errorf("localstore: grant lease: %w", err)
	}
	wait, err := s.commitLocked(b)
	if err != nil {
		s.mu.Unlock()
		return 0, err
	}
	s.leaseSeq = id
	s.leases[kv.LeaseID(id)] = &lease{ttl: ttl, keys: map[string]struct{}{}}
	s.ttls.Store(kv.LeaseID(id), ttl)
	s.mu.Unlock()
	if err := wait(); err != nil {
		return 0, err
	}
	return kv.LeaseID(id), nil
}

// KeepAliveOnce implements kv.Store: it returns the lease's TTL while the
// lease exists, and an error wrapping kv.ErrLeaseNotFound after Revoke, or
// for a lease of a previous process.
func (s *Store) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	// Not under mu (see Store.ttls).
	select {
	case <-s.done:
		return 0, kv.ErrClosed
	default:
	}
	if err := s.failure(); err != nil {
		return 0, err
	}
	ttl, ok := s.ttls.Load(id)
	if !ok {
		return 0, fmt.Errorf("localstore: keep lease %d alive: %w", id, kv.ErrLeaseNotFound)
	}
	return ttl.(time.Duration), nil
}

// Revoke implements kv.Store: it ends the lease and deletes every key
// attached to it in one transaction of one revision (none if it has no
// keys), with a delete event for each.
func (s *Store) Revoke(ctx context.Context, id kv.LeaseID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if err := s.beginLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	defer s.ops.Done()
	l := s.leases[id]
	if l == nil {
		s.mu.Unlock()
		return fmt.Errorf("localstore: revoke lease %d: %w", id, kv.ErrLeaseNotFound)
	}
	delete(s.leases, id)
	s.ttls.Delete(id)
	if len(l.keys) == 0 {
		s.mu.Unlock()
		return nil
	}
	keys := make([]string, 0, len(l.keys))
	for k := range l.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys) // etcd deletes them in key order too
	rev := s.rev + 1
	b := s.db.NewBatch()
	evs := make([]kv.Event, len(keys))
	var err error
	for i, k := range keys {
		if err == nil {
			err = b.Delete(dataKey(k), nil)
		}
		if err == nil {
			err = b.Delete(leaseIndexKey(id, k), nil)
		}
		evs[i] = kv.Event{Type: kv.EventDelete, KV: kv.KeyValue{Key: k, ModRevision: rev}}
	}
	if err == nil {
		err = b.Set(keyRevision, encodeUint64(rev), nil)
	}
	if err != nil {
		s.mu.Unlock()
		_ = b.Close()
		return fmt.Errorf("localstore: revoke lease %d: %w", id, err)
	}
	wait, err := s.commitLocked(b)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	s.rev = rev
	s.hist.append(evs)
	s.mu.Unlock()
	if err := wait(); err != nil {
		return err
	}
	s.markSynced(rev)
	return nil
}
