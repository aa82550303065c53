package coordinator

import (
	"context"
	"log/slog"
	"testing"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// scanCountingStore scans in one pass (a Range without a limit) and counts
// its scans and its Ranges of prefix.
type scanCountingStore struct {
	kv.Store
	prefix        string
	scans, ranges int
}

func (s *scanCountingStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if r.Start >= s.prefix && r.Start < kv.PrefixEnd(s.prefix) {
		s.ranges++
	}
	return s.Store.Range(ctx, r)
}

func (s *scanCountingStore) Scan(ctx context.Context, r kv.RangeRequest, visit func(kv.KeyValue) error) (int64, error) {
	s.scans++
	rr, err := s.Store.Range(ctx, kv.RangeRequest{Start: r.Start, End: r.End, KeysOnly: r.KeysOnly})
	if err != nil {
		return 0, err
	}
	for _, x := range rr.KVs {
		if err := visit(x); err != nil {
			return 0, err
		}
	}
	return rr.Revision, nil
}

// TestScansPastOnePage: a scan reads its first page with a Range, and
// only a prefix with more than that is read on in one pass. Small prefixes
// (the daemons' registrations, read every 2 s while claims spread) must
// not open a stream each: with etcd auth, every stream clientv3 opens
// authenticates again, a raft round and a password hash.
func TestScansPastOnePage(t *testing.T) {
	ls := tempLocalstore(t)
	s := &scanCountingStore{Store: ls, prefix: newKeys("counts").finished()}
	c, err := New(s, Config{Namespace: "counts", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	written := 0
	for _, tc := range []struct{ finished, scans, ranges int }{
		{1000, 0, 1}, // one full page: the Range says there is no more
		{2500, 1, 1},
	} {
		putFinishedFrom(t, ls, written, tc.finished-written)
		written = tc.finished
		s.scans, s.ranges = 0, 0
		n, err := c.Counts(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n[StateCompleted] != tc.finished || s.scans != tc.scans || s.ranges != tc.ranges {
			t.Fatalf("Counts of %d finished jobs: %d completed, read with %d Ranges and %d scans; want %d Ranges and %d scans",
				tc.finished, n[StateCompleted], s.ranges, s.scans, tc.ranges, tc.scans)
		}
	}
}
