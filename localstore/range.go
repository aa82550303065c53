package localstore

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// Range implements kv.Store. It reads at one point: the revision and the
// Pebble view are taken together under the store's mutex, so the result
// holds exactly the transactions up to the reported revision. It returns
// only once that revision is on disk.
func (s *Store) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if err := ctx.Err(); err != nil {
		return kv.RangeResult{}, err
	}
	if r.Limit < 0 {
		return kv.RangeResult{}, fmt.Errorf("localstore: range: negative limit %d", r.Limit)
	}
	lower := dataKey(r.Start)
	var upper []byte
	switch {
	case r.End == "":
		upper = append(dataKey(r.Start), 0) // Start alone
	case r.End == "\x00":
		upper = []byte{prefixData + 1} // every key from Start on
	default:
		upper = dataKey(r.End)
	}
	if string(upper) <= string(lower) {
		s.mu.Lock()
		if err := s.beginLocked(); err != nil {
			s.mu.Unlock()
			return kv.RangeResult{}, err
		}
		rev := s.rev
		s.mu.Unlock()
		defer s.ops.Done()
		if err := s.waitSyncedUnless(ctx, rev, r.Serializable); err != nil {
			return kv.RangeResult{}, err
		}
		return kv.RangeResult{Revision: rev}, nil
	}

	s.mu.Lock()
	if err := s.beginLocked(); err != nil {
		s.mu.Unlock()
		return kv.RangeResult{}, err
	}
	defer s.ops.Done()
	rev := s.rev
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	s.mu.Unlock()
	if err != nil {
		return kv.RangeResult{}, fmt.Errorf("localstore: range: %w", err)
	}
	res, err := readRange(ctx, it, r)
	if cerr := it.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("localstore: range: %w", cerr)
	}
	if err != nil {
		return kv.RangeResult{}, err
	}
	if err := s.waitSyncedUnless(ctx, rev, r.Serializable); err != nil {
		return kv.RangeResult{}, err
	}
	res.Revision = rev
	return res, nil
}

func readRange(ctx context.Context, it *pebble.Iterator, r kv.RangeRequest) (kv.RangeResult, error) {
	var res kv.RangeResult
	for valid := it.First(); valid; valid = it.Next() {
		if r.Limit > 0 && len(res.KVs) == r.Limit {
			res.More = true
			break
		}
		if len(res.KVs)%1024 == 1023 {
			if err := ctx.Err(); err != nil {
				return kv.RangeResult{}, err
			}
		}
		raw, err := it.ValueAndErr()
		if err != nil {
			return kv.RangeResult{}, fmt.Errorf("localstore: range: %w", err)
		}
		rec, err := decodeValue(string(it.Key()[1:]), raw, r.KeysOnly)
		if err != nil {
			return kv.RangeResult{}, err
		}
		if r.KeysOnly {
			rec.Lease = 0 // as etcd, whose index holds no leases
		}
		res.KVs = append(res.KVs, rec)
	}
	if err := it.Error(); err != nil {
		return kv.RangeResult{}, fmt.Errorf("localstore: range: %w", err)
	}
	return res, nil
}
