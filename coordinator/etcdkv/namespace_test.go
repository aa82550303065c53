package etcdkv_test

import (
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/namespace"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// A client whose KV, Watcher and Lease are wrapped (here in an etcd
// namespace, as programs sharing a cluster do) is used through its
// wrappers by every call: transactions, too, see the keys that ranges and
// watches see.
func TestWrappedClientKV(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	raw := etcdkv.New(cli, etcdkv.Options{})
	t.Cleanup(func() { _ = raw.Close() })
	nsCli := srv.Client(t)
	nsCli.KV = namespace.NewKV(nsCli.KV, "app/")
	nsCli.Watcher = namespace.NewWatcher(nsCli.Watcher, "app/")
	nsCli.Lease = namespace.NewLease(nsCli.Lease, "app/")
	s := etcdkv.New(nsCli, etcdkv.Options{})
	t.Cleanup(func() { _ = s.Close() })
	ctx := ctxT(t, 10*time.Second)

	rev := put(t, s, "k", "v", 0)
	res, err := s.Range(ctx, kv.Prefix("k", 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.KVs) != 1 || res.KVs[0].Key != "k" || res.KVs[0].ModRevision != rev {
		t.Fatalf("Range through the namespace after a Txn put of k: %+v", res.KVs)
	}
	rr, err := raw.Range(ctx, kv.RangeRequest{Start: "app/k"})
	if err != nil || len(rr.KVs) != 1 {
		t.Fatalf("the put is not at app/k: %+v, %v", rr.KVs, err)
	}
	tr, err := s.Txn(ctx, kv.Txn{
		If:   []kv.Cmp{kv.ModRevisionIs("k", kv.Equal, rev)},
		Then: []kv.Op{kv.Nested(kv.Txn{If: []kv.Cmp{kv.Exists("k")}, Then: []kv.Op{kv.Get("k"), kv.Delete("k")}})},
	})
	if err != nil || !tr.Succeeded || !tr.Results[0].Txn.Succeeded {
		t.Fatalf("compare on k through the namespace: %+v, %v", tr, err)
	}
	if got := tr.Results[0].Txn.Results[0].KV; got == nil || got.Key != "k" || string(got.Value) != "v" {
		t.Fatalf("nested get of k: %+v", got)
	}
	if rr, err := raw.Range(ctx, kv.RangeRequest{Start: "app/k"}); err != nil || len(rr.KVs) != 0 {
		t.Fatalf("app/k after the nested delete: %+v, %v", rr.KVs, err)
	}
}
