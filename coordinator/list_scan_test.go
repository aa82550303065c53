package coordinator

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// countingStore counts the reads made through it.
type countingStore struct {
	kv.Store
	reads atomic.Int64
}

func (s *countingStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	s.reads.Add(1)
	return s.Store.Range(ctx, r)
}

func (s *countingStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	s.reads.Add(1)
	return s.Store.Txn(ctx, t)
}

// listScanCoordinator returns a coordinator on a fresh local store, with
// its store counting requests, holding n available jobs of kind "k".
func listScanCoordinator(t *testing.T, n int) (*Coordinator, *countingStore) {
	t.Helper()
	cs := &countingStore{Store: tempLocalstore(t)}
	c, err := New(cs, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ps := make([]EnqueueParams, n)
	for i := range ps {
		ps[i] = EnqueueParams{Kind: "k"}
	}
	if _, err := c.EnqueueBatch(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	return c, cs
}

// A filtered listing with a small limit reads in chunks, not one request
// per job it skips.
func TestListFilteredSmallLimitReadsInChunks(t *testing.T) {
	const n = 3000
	c, cs := listScanCoordinator(t, n)
	ctx := context.Background()
	if _, err := c.CancelMany(ctx, CancelFilter{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []ListParams{
		{Kind: "nokind", Limit: 1},
		{State: StateDiscarded, Limit: 1},
		{State: StateCancelled, Kind: "nokind", Limit: 1},
		{State: StateAvailable, Limit: 1}, // none: every job is cancelled
	} {
		cs.reads.Store(0)
		page, err := c.List(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Jobs) != 0 || page.Next != "" {
			t.Fatalf("%+v: %d jobs, next %q; want none, the last page", p, len(page.Jobs), page.Next)
		}
		if got := cs.reads.Load(); got > 20 {
			t.Fatalf("%+v over %d non-matching jobs: %d store requests, want a handful", p, n, got)
		}
	}
}

// A filtered page looks at listScanMax jobs at most: past that it comes
// back short (even empty) with Next set, and paging on lists every
// matching job once.
func TestListFilteredScanBounded(t *testing.T) {
	c, _ := listScanCoordinator(t, 0)
	ctx := context.Background()
	// Two jobs, far apart, are of kind "m"; half of the jobs are cancelled.
	for i := range 100 {
		kind := "k"
		if i%60 == 3 {
			kind = "m"
		}
		if _, err := c.Enqueue(ctx, EnqueueParams{Kind: kind}); err != nil {
			t.Fatal(err)
		}
	}
	wantKind, wantCancelled := map[string]bool{}, map[string]bool{}
	all, err := c.List(ctx, ListParams{Limit: 1000})
	if err != nil || len(all.Jobs) != 100 {
		t.Fatalf("List all: %d jobs, %v", len(all.Jobs), err)
	}
	for i, j := range all.Jobs {
		if j.Kind == "m" {
			wantKind[j.ID] = true
		}
		if i%2 == 0 {
			if _, err := c.Cancel(ctx, j.ID); err != nil {
				t.Fatal(err)
			}
			wantCancelled[j.ID] = true
		}
	}
	old := listScanMax
	listScanMax = 25
	t.Cleanup(func() { listScanMax = old })
	for _, tc := range []struct {
		p    ListParams
		want map[string]bool
	}{
		{ListParams{Kind: "m", Limit: 3}, wantKind},
		{ListParams{State: StateCancelled, Limit: 40}, wantCancelled},
		{ListParams{State: StateAvailable, Kind: "m", Limit: 1}, nil},
	} {
		if tc.want == nil {
			tc.want = map[string]bool{}
			for _, j := range all.Jobs {
				if j.Kind == "m" && !wantCancelled[j.ID] {
					tc.want[j.ID] = true
				}
			}
		}
		got, short := map[string]bool{}, 0
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatalf("%+v: over 100 pages", tc.p)
			}
			page, err := c.List(ctx, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Jobs) > tc.p.Limit {
				t.Fatalf("%+v: %d jobs", tc.p, len(page.Jobs))
			}
			for _, j := range page.Jobs {
				if got[j.ID] || !tc.want[j.ID] {
					t.Fatalf("%+v: job %s listed twice or does not match", tc.p, j.ID)
				}
				got[j.ID] = true
			}
			if page.Next == "" {
				break
			}
			if len(page.Jobs) < tc.p.Limit {
				short++
			}
			tc.p.After = page.Next
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%+v: paged %d jobs, want %d", tc.p, len(got), len(tc.want))
		}
		if short == 0 {
			t.Fatalf("%+v: no page came back short with a cursor, though a page looks at %d jobs at most", tc.p, listScanMax)
		}
	}
}
