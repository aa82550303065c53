package localstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// TestConcurrentCompareAndSetLosesNoUpdate: transactions read their keys
// before taking the store's mutex (prefetch); one whose key another wrote
// in between must see that write. Goroutines increment one counter by
// compare-and-set on its modification revision: every success is counted
// in the final value, none lost.
func TestConcurrentCompareAndSetLosesNoUpdate(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const key = "counter"
	if _, err := s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put(key, []byte("0"), 0)}}); err != nil {
		t.Fatal(err)
	}
	var wins atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 150 {
				rr, err := s.Range(ctx, kv.RangeRequest{Start: key})
				if err != nil {
					t.Error(err)
					return
				}
				cur := rr.KVs[0]
				n, _ := strconv.Atoi(string(cur.Value))
				// Other keys in the same transaction, so that prefetching
				// takes a while and overlaps other transactions.
				then := []kv.Op{kv.Put(key, []byte(strconv.Itoa(n+1)), 0)}
				for i := range 20 {
					then = append(then, kv.Get("other/"+strconv.Itoa(i)))
				}
				res, err := s.Txn(ctx, kv.Txn{If: []kv.Cmp{kv.ModRevisionIs(key, kv.Equal, cur.ModRevision)}, Then: then})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Succeeded {
					wins.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	rr, err := s.Range(ctx, kv.RangeRequest{Start: key})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(rr.KVs[0].Value); got != strconv.FormatInt(wins.Load(), 10) {
		t.Fatalf("counter is %s after %d successful compare-and-sets: updates were lost", got, wins.Load())
	}
	if wins.Load() < 150 {
		t.Fatalf("only %d compare-and-sets succeeded", wins.Load())
	}
}
