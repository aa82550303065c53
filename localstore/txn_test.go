package localstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

func TestTxnTooLarge(t *testing.T) {
	s := openTemp(t, Options{MaxTxnBytes: 1024})
	if l := s.Limits(); l.MaxBytes != 1024 || l.MaxOps != 0 {
		t.Fatalf("Limits = %+v", l)
	}
	base := mustPut(t, s, "k", "small", 0)
	_, err := s.Txn(ctxT(t), kv.Txn{Then: []kv.Op{kv.Put("k", make([]byte, 2048), 0)}})
	if !errors.Is(err, kv.ErrTxnTooLarge) {
		t.Fatalf("Txn over MaxTxnBytes: %v, want ErrTxnTooLarge", err)
	}
	// Counted in nested transactions and Else branches too.
	_, err = s.Txn(ctxT(t), kv.Txn{Else: []kv.Op{kv.Nested(kv.Txn{Then: []kv.Op{kv.Put("k", make([]byte, 2048), 0)}})}})
	if !errors.Is(err, kv.ErrTxnTooLarge) {
		t.Fatalf("nested Txn over MaxTxnBytes: %v, want ErrTxnTooLarge", err)
	}
	if got := mustGet(t, s, "k"); got.ModRevision != base {
		t.Fatalf("a refused txn wrote")
	}
}

func TestTxnInvalid(t *testing.T) {
	s := openTemp(t, Options{})
	for name, txn := range map[string]kv.Txn{
		"unknown op":        {Then: []kv.Op{{Type: 99, Key: "k"}}},
		"nil nested":        {Then: []kv.Op{{Type: kv.OpTxn}}},
		"unknown target":    {If: []kv.Cmp{{Key: "k", Target: 99, Op: kv.Equal}}},
		"unknown operator":  {If: []kv.Cmp{{Key: "k", Target: kv.Version, Op: 99}}},
		"empty compare key": {If: []kv.Cmp{kv.Missing("")}},
		"empty get key":     {Then: []kv.Op{kv.Get("")}},
		"put then delete in a nested txn": {Then: []kv.Op{
			kv.Nested(kv.Txn{Then: []kv.Op{kv.Put("k", nil, 0)}}),
			kv.Delete("k"),
		}},
	} {
		if _, err := s.Txn(ctxT(t), txn); err == nil {
			t.Errorf("%s: Txn succeeded", name)
		}
	}
	if got := mustGet(t, s, "k"); got != nil {
		t.Fatalf("an invalid txn wrote")
	}
}

func TestTxnDuplicateDeleteAllowed(t *testing.T) {
	s := openTemp(t, Options{})
	mustPut(t, s, "k", "v", 0)
	res := mustTxn(t, s, kv.Txn{Then: []kv.Op{
		kv.Delete("k"),
		kv.Nested(kv.Txn{Then: []kv.Op{kv.Delete("k")}}),
		kv.Nested(kv.Txn{If: []kv.Cmp{kv.Exists("k")}, Then: []kv.Op{kv.Put("x", nil, 0)}, Else: []kv.Op{kv.Delete("k")}}),
	}})
	if mustGet(t, s, "k") != nil || mustGet(t, s, "x") == nil {
		t.Fatalf("result %+v", res)
	}
}

func TestTxnContextDone(t *testing.T) {
	s := openTemp(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("k", nil, 0)}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Txn with a cancelled context: %v", err)
	}
	if mustGet(t, s, "k") != nil {
		t.Fatalf("a cancelled txn wrote")
	}
}

func TestLeaseTTL(t *testing.T) {
	s := openTemp(t, Options{})
	ctx := ctxT(t)
	id, err := s.Grant(ctx, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if ttl, err := s.KeepAliveOnce(ctx, id); err != nil || ttl != 2*time.Second {
		t.Fatalf("KeepAliveOnce = %v, %v; want 2s (rounded up)", ttl, err)
	}
	if _, err := s.Grant(ctx, 0); err == nil {
		t.Fatalf("Grant(0) succeeded")
	}
	err = s.Revoke(ctx, id+1000)
	if !errors.Is(err, kv.ErrLeaseNotFound) || !strings.Contains(err.Error(), "lease") {
		t.Fatalf("Revoke of an unknown lease: %v", err)
	}
}

// TestTxnDuplicateInLargeBranch: the duplicate-write check holds in
// branches large enough to be indexed (a claim's, an outcome group's), and
// a nested transaction's Then and Else may still write the same key.
func TestTxnDuplicateInLargeBranch(t *testing.T) {
	s := openTemp(t, Options{})
	nested := func(i int) kv.Op {
		k := "job/" + strconv.Itoa(i)
		return kv.Nested(kv.Txn{
			If:   []kv.Cmp{kv.ModRevisionIs(k, kv.Equal, 0)},
			Then: []kv.Op{kv.Put(k, []byte("x"), 0), kv.Delete("idx/" + strconv.Itoa(i))},
			Else: []kv.Op{kv.Delete(k), kv.Put("idx/"+strconv.Itoa(i), nil, 0)},
		})
	}
	var ops []kv.Op
	for i := range 40 {
		ops = append(ops, nested(i))
	}
	mustTxn(t, s, kv.Txn{Then: ops})
	for i, dup := range []kv.Op{nested(7), kv.Put("job/3", nil, 0), kv.Delete("idx/39")} {
		_, err := s.Txn(ctxT(t), kv.Txn{Then: append(append([]kv.Op{}, ops...), dup)})
		if !errors.Is(err, errDuplicateKey) {
			t.Fatalf("duplicate write %d: %v, want errDuplicateKey", i, err)
		}
	}
	// Deleting a key twice is fine, indexed or not.
	mustTxn(t, s, kv.Txn{Then: append(append([]kv.Op{}, ops...), kv.Delete("other"), kv.Delete("other"))})
}
