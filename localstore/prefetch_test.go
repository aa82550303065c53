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

// TestReadKeysAcrossLevels: a transaction's keys are read in one pass of
// one iterator; keys in flushed sstables, in the memtable, deleted after a
// flush, and missing (between, before and after the others) all read as
// they are.
func TestReadKeysAcrossLevels(t *testing.T) {
	s := openTemp(t, Options{})
	for i := range 50 {
		mustPut(t, s, "k/"+strconv.Itoa(i*2), "flushed", 0)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	mustTxn(t, s, kv.Txn{Then: []kv.Op{kv.Delete("k/10"), kv.Put("k/20", []byte("memtable"), 0), kv.Put("k/21", []byte("new"), 0)}})
	keys := map[string]*kv.KeyValue{}
	for i := range 102 {
		keys["k/"+strconv.Itoa(i)] = nil
	}
	keys["a"], keys["z"] = nil, nil
	if err := s.readKeys(keys); err != nil {
		t.Fatal(err)
	}
	for k, got := range keys {
		want := mustGetOrNil(t, s, k)
		switch {
		case (got == nil) != (want == nil):
			t.Errorf("%s: read %v, Range says %v", k, got, want)
		case got != nil && (string(got.Value) != string(want.Value) || got.ModRevision != want.ModRevision || got.Version != want.Version):
			t.Errorf("%s: read %+v, Range says %+v", k, *got, *want)
		}
	}
	if keys["k/10"] != nil || keys["k/20"] == nil || string(keys["k/20"].Value) != "memtable" || keys["k/98"] == nil || keys["k/99"] != nil {
		t.Fatalf("k/10 %v, k/20 %v, k/98 %v, k/99 %v", keys["k/10"], keys["k/20"], keys["k/98"], keys["k/99"])
	}
}

func mustGetOrNil(t *testing.T, s *Store, key string) *kv.KeyValue {
	t.Helper()
	rr, err := s.Range(ctxT(t), kv.RangeRequest{Start: key})
	if err != nil {
		t.Fatal(err)
	}
	if len(rr.KVs) == 0 {
		return nil
	}
	return &rr.KVs[0]
}
