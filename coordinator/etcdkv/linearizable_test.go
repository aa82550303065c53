package etcdkv_test

import (
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/namespace"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// TestCompareOnlyTxnIsLinearizable: etcd serves a transaction whose
// branches hold no op at all (compares only) as a serializable read, from
// the member's own state, without asking the leader: a member cut off
// from its cluster answers it from what it last knew. The seam's Txn has
// no serializable form, and its callers take its answer (Succeeded, the
// revision) as the store's current one. Here the member left alone has no
// leader: the only right outcome is an error, never an answer.
func TestCompareOnlyTxnIsLinearizable(t *testing.T) {
	c := etcdtest.StartCluster(t, 3, etcdtest.WithElectionTimeout(50*time.Millisecond, 500*time.Millisecond))
	s := dialStore(t, c.Member(2).ClientURL())
	rev := put(t, s, "k", "v", 0)
	c.Kill(0)
	c.Kill(1) // member 2 is alone: no quorum, no leader; anything may have changed since
	for _, txn := range []kv.Txn{
		{If: []kv.Cmp{kv.ModRevisionIs("k", kv.Equal, rev)}},
		{If: []kv.Cmp{kv.Missing("k"), kv.Exists("other")}},
	} {
		res, err := s.Txn(ctxT(t, 2*time.Second), txn)
		if err == nil {
			t.Fatalf("a compare-only transaction was answered by a member without a leader (a serializable read): %+v", res)
		}
		t.Logf("compare-only transaction without a quorum: %v", err)
	}
}

// TestCompareOnlyTxnResults: the read that makes a compare-only
// transaction linearizable is not among its results, on a client of its
// own and on one whose KV is wrapped (package namespace).
func TestCompareOnlyTxnResults(t *testing.T) {
	srv := etcdtest.Start(t)
	nsCli := srv.Client(t)
	nsCli.KV = namespace.NewKV(nsCli.KV, "app/")
	ns := etcdkv.New(nsCli, etcdkv.Options{})
	t.Cleanup(func() { _ = ns.Close() })
	for _, s := range []*etcdkv.Store{dialStore(t, srv.Endpoint()), ns} {
		rev := put(t, s, "k", "v", 0)
		for _, want := range []bool{true, false} {
			cmp := kv.ModRevisionIs("k", kv.Equal, rev)
			if !want {
				cmp = kv.Missing("k")
			}
			res, err := s.Txn(ctxT(t, 10*time.Second), kv.Txn{If: []kv.Cmp{cmp}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Succeeded != want || len(res.Results) != 0 || res.Revision != rev {
				t.Fatalf("compare-only transaction: %+v, want succeeded %v, no results, revision %d", res, want, rev)
			}
		}
	}
}
