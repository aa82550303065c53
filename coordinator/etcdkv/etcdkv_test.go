package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
)

func TestConformance(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	kvtest.Run(t, func(t *testing.T) kv.Store { return etcdkv.New(cli, etcdkv.Options{}) })
}

// newStore starts a server and returns a store on it and its client.
func newStore(t *testing.T, opts ...etcdtest.Option) (*etcdkv.Store, *clientv3.Client) {
	t.Helper()
	srv := etcdtest.Start(t, opts...)
	cli := srv.Client(t)
	s := etcdkv.New(cli, etcdkv.Options{})
	t.Cleanup(func() { _ = s.Close() })
	return s, cli
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func put(t *testing.T, s kv.Store, key, value string, lease kv.LeaseID) int64 {
	t.Helper()
	res, err := s.Txn(ctxT(t, 10*time.Second), kv.Txn{Then: []kv.Op{kv.Put(key, []byte(value), lease)}})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return res.Revision
}

// next returns the next response of ch, failing after 10 s.
func next(t *testing.T, ch <-chan kv.WatchResponse) (kv.WatchResponse, bool) {
	t.Helper()
	select {
	case r, ok := <-ch:
		return r, ok
	case <-time.After(10 * time.Second):
		t.Fatalf("no watch response within 10s")
		return kv.WatchResponse{}, false
	}
}

func TestWatchCompacted(t *testing.T) {
	s, cli := newStore(t, etcdtest.WithoutAutoCompaction())
	first := put(t, s, "c/a", "1", 0)
	put(t, s, "c/a", "2", 0)
	last := put(t, s, "c/a", "3", 0)
	if _, err := cli.Compact(ctxT(t, 10*time.Second), last, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	ch := s.Watch(ctxT(t, 10*time.Second), "c/", first)
	r, ok := next(t, ch)
	if !ok {
		t.Fatal("watch closed without a response")
	}
	if !errors.Is(r.Err, kv.ErrCompacted) {
		t.Fatalf("watch from compacted revision %d: Err = %v, want kv.ErrCompacted", first, r.Err)
	}
	if r.CompactRevision != last {
		t.Fatalf("CompactRevision = %d, want %d", r.CompactRevision, last)
	}
	if len(r.Events) != 0 {
		t.Fatalf("events with the error: %+v", r.Events)
	}
	if _, ok := next(t, ch); ok {
		t.Fatal("channel not closed after the error")
	}
	// Watching from the revision after the compaction works.
	ch = s.Watch(ctxT(t, 10*time.Second), "c/", r.CompactRevision+1)
	rev := put(t, s, "c/b", "x", 0)
	r, _ = next(t, ch)
	if r.Err != nil || len(r.Events) != 1 || r.Events[0].KV.ModRevision != rev {
		t.Fatalf("watch after compaction: %+v", r)
	}
}

func TestLeaseRevokeDeletesKeys(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxT(t, 10*time.Second)
	id, err := s.Grant(ctx, 1500*time.Millisecond) // rounded up to 2 s
	if err != nil {
		t.Fatal(err)
	}
	if ttl, err := s.KeepAliveOnce(ctx, id); err != nil || ttl != 2*time.Second {
		t.Fatalf("KeepAliveOnce = %v, %v; want 2s (TTL rounded up)", ttl, err)
	}
	put(t, s, "l/owned", "x", id)
	rev := put(t, s, "l/free", "y", 0)
	ch := s.Watch(ctx, "l/", rev+1)
	if err := s.Revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	r, _ := next(t, ch)
	if r.Err != nil || len(r.Events) != 1 || r.Events[0].Type != kv.EventDelete || r.Events[0].KV.Key != "l/owned" {
		t.Fatalf("after Revoke, watch saw %+v; want one delete of l/owned", r)
	}
	res, err := s.Range(ctx, kv.Prefix("l/", 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.KVs) != 1 || res.KVs[0].Key != "l/free" {
		t.Fatalf("after Revoke: %+v; want only l/free", res.KVs)
	}
	if res.Revision != r.Events[0].KV.ModRevision {
		t.Fatalf("revision %d after revoke, delete event at %d", res.Revision, r.Events[0].KV.ModRevision)
	}
	if _, err := s.KeepAliveOnce(ctx, id); !errors.Is(err, kv.ErrLeaseNotFound) {
		t.Fatalf("KeepAliveOnce after Revoke: %v, want kv.ErrLeaseNotFound", err)
	}
	if err := s.Revoke(ctx, id); !errors.Is(err, kv.ErrLeaseNotFound) {
		t.Fatalf("Revoke after Revoke: %v, want kv.ErrLeaseNotFound", err)
	}
	_, err = s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("l/again", nil, id)}})
	if !errors.Is(err, kv.ErrLeaseNotFound) {
		t.Fatalf("Put with a revoked lease: %v, want kv.ErrLeaseNotFound", err)
	}
}

func TestTxnTooLarge(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxT(t, 10*time.Second)
	lim := s.Limits()
	if lim.MaxOps != 128 || lim.MaxBytes != 3<<19-etcdkv.RequestBytesMargin {
		t.Fatalf("Limits = %+v", lim)
	}
	ops := make([]kv.Op, lim.MaxOps+1)
	for i := range ops {
		ops[i] = kv.Put(fmt.Sprintf("big/%03d", i), nil, 0)
	}
	_, err := s.Txn(ctx, kv.Txn{Then: ops})
	if !errors.Is(err, kv.ErrTxnTooLarge) {
		t.Fatalf("%d ops: %v, want kv.ErrTxnTooLarge", len(ops), err)
	}
	// etcd counts ops per nesting path, not in total: each level's
	// max(len(If), len(Then), len(Else)) adds up from the root down, and
	// siblings do not add up. A path of 2 + 127 is too many ...
	deep := kv.Txn{Then: []kv.Op{kv.Nested(kv.Txn{Then: ops[:127]}), kv.Get("big/x")}}
	if _, err = s.Txn(ctx, deep); !errors.Is(err, kv.ErrTxnTooLarge) {
		t.Fatalf("nested path of 2+127 ops: %v, want kv.ErrTxnTooLarge", err)
	}
	// ... but 100 nested transactions of 2 puts each (200 puts) pass.
	var wide []kv.Op
	for i := range 100 {
		wide = append(wide, kv.Nested(kv.Txn{
			If:   []kv.Cmp{kv.Missing(fmt.Sprintf("wide/%03d/a", i))},
			Then: []kv.Op{kv.Put(fmt.Sprintf("wide/%03d/a", i), nil, 0), kv.Put(fmt.Sprintf("wide/%03d/b", i), nil, 0)},
		}))
	}
	res, err := s.Txn(ctx, kv.Txn{Then: wide})
	if err != nil {
		t.Fatalf("100 nested txns of 2 puts: %v", err)
	}
	if len(res.Results) != 100 || res.Results[99].Txn == nil || !res.Results[99].Txn.Succeeded || res.Results[99].Txn.Revision != res.Revision {
		t.Fatalf("nested results: %+v", res.Results[99])
	}
	// At the byte limit it goes through; over the server's limit it is
	// refused by the server (1.6 MiB) or by the client's gRPC (2.5 MiB).
	fits := make([]byte, lim.MaxBytes)
	if _, err := s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("big/fits", fits, 0)}}); err != nil {
		t.Fatalf("a %d-byte value (MaxBytes): %v", len(fits), err)
	}
	for _, size := range []int{1600 << 10, 2560 << 10} {
		_, err := s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("big/x", make([]byte, size), 0)}})
		if !errors.Is(err, kv.ErrTxnTooLarge) {
			t.Fatalf("%d-byte value: %v, want kv.ErrTxnTooLarge", size, err)
		}
	}
}

func TestRaisedLimits(t *testing.T) {
	s := etcdkv.New(nil, etcdkv.Options{MaxOps: 1000, MaxRequestBytes: 10 << 20})
	if got := s.Limits(); got.MaxOps != 1000 || got.MaxBytes != 10<<20-etcdkv.RequestBytesMargin {
		t.Fatalf("Limits = %+v", got)
	}
	_ = s.Close()
}

func TestContextErrorsStayContextErrors(t *testing.T) {
	s, _ := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Range(ctx, kv.RangeRequest{Start: "x"})
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "etcdkv: range: ") {
		t.Fatalf("Range with a cancelled context: %v", err)
	}
	_, err = s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("x", nil, 0)}})
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "etcdkv: txn: ") {
		t.Fatalf("Txn with a cancelled context: %v", err)
	}
}

// Transactions are sent with the client's own call options (Txn builds
// etcd's request itself): a client that may send at most 64 KiB refuses a
// 100 KiB transaction that the server would take, and a client with the
// default limit sends it.
func TestTxnKeepsClientCallOptions(t *testing.T) {
	srv := etcdtest.Start(t)
	small, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, MaxCallSendMsgSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	value := make([]byte, 100<<10)
	txn := kv.Txn{Then: []kv.Op{kv.Put("big", value, 0)}}
	limited := etcdkv.New(small, etcdkv.Options{})
	defer limited.Close()
	_, err = limited.Txn(ctxT(t, 10*time.Second), txn)
	if !errors.Is(err, kv.ErrTxnTooLarge) {
		t.Fatalf("100 KiB through a client limited to 64 KiB: %v, want kv.ErrTxnTooLarge", err)
	}
	def := etcdkv.New(srv.Client(t), etcdkv.Options{})
	defer def.Close()
	if _, err := def.Txn(ctxT(t, 10*time.Second), txn); err != nil {
		t.Fatalf("100 KiB through a default client: %v", err)
	}
}

// A store closes its watches but not the client it was given.
func TestCloseKeepsClient(t *testing.T) {
	s, cli := newStore(t)
	ch := s.Watch(context.Background(), "k/", 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := next(t, ch); ok {
		t.Fatal("watch open after Close")
	}
	if _, err := cli.Put(ctxT(t, 10*time.Second), "k/a", "1"); err != nil {
		t.Fatalf("client unusable after the store closed: %v", err)
	}
}

// A watch from revision 0 sees every write made after Watch returned, even
// a write by another client that reaches etcd before the watch request
// would have (the watch goes through a proxy that delays it).
func TestWatchFromZeroSeesNextWrite(t *testing.T) {
	srv := etcdtest.Start(t)
	p := etcdtest.NewProxy(t, srv.Endpoint())
	watcher := dialStore(t, p.URL())
	writer := dialStore(t, srv.Endpoint())
	p.Delay(100 * time.Millisecond)
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		ch := watcher.Watch(ctx, "z/", 0)
		rev := put(t, writer, "z/k", fmt.Sprint(i), 0)
		r, _ := next(t, ch)
		if r.Err != nil || len(r.Events) != 1 || r.Events[0].KV.ModRevision != rev {
			t.Fatalf("round %d: %+v, want the put at %d", i, r, rev)
		}
		cancel()
	}
}

// etcd over its backend quota (its NOSPACE alarm) refuses writes with
// kv.ErrNoSpace, which the API answers 507.
func TestNoSpaceIsErrNoSpace(t *testing.T) {
	s, _ := newStore(t, etcdtest.WithQuota(4<<20))
	val := strings.Repeat("x", 256<<10)
	for i := range 64 {
		_, err := s.Txn(ctxT(t, 10*time.Second), kv.Txn{Then: []kv.Op{kv.Put(fmt.Sprintf("big/%02d", i), []byte(val), 0)}})
		switch {
		case err == nil:
			continue
		case errors.Is(err, kv.ErrNoSpace) && errors.Is(err, rpctypes.ErrNoSpace):
			return
		default:
			t.Fatalf("put %d of 256 KiB under a 4 MiB quota: %v, want success or kv.ErrNoSpace", i, err)
		}
	}
	t.Fatal("16 MiB written under a 4 MiB backend quota, and no kv.ErrNoSpace")
}
