package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// putMany writes n keys prefix000000... with values "v", 100 per
// transaction, and returns the revision of the last.
func putMany(t *testing.T, s kv.Store, prefix string, n int) int64 {
	t.Helper()
	var rev int64
	for lo := 0; lo < n; lo += 100 {
		var ops []kv.Op
		for i := lo; i < min(lo+100, n); i++ {
			ops = append(ops, kv.Put(fmt.Sprintf("%s%06d", prefix, i), []byte("v"), 0))
		}
		res, err := s.Txn(ctxT(t, 10*time.Second), kv.Txn{Then: ops})
		if err != nil {
			t.Fatal(err)
		}
		rev = res.Revision
	}
	return rev
}

// TestScanReadsOneRevisionInOnePass: a scan of thousands of keys (many of
// etcd's stream chunks) visits each key once, in order, as it was when
// the scan began: a write made while it runs is not seen, and the revision
// returned is the one before that write.
func TestScanReadsOneRevisionInOnePass(t *testing.T) {
	s, _ := newStore(t)
	const n = 3000
	before := putMany(t, s, "s/", n)
	put(t, s, "t/after-the-range", "x", 0)

	var (
		got     []kv.KeyValue
		written int64
	)
	rev, err := s.Scan(ctxT(t, 30*time.Second), kv.Prefix("s/", 0), func(x kv.KeyValue) error {
		if len(got) == 0 {
			// Change a key the scan has not reached, and add one after
			// every other.
			written = put(t, s, fmt.Sprintf("s/%06d", n-1), "changed", 0)
			put(t, s, "s/~new", "x", 0)
		}
		got = append(got, x)
		return nil
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if rev != before+1 || written <= rev {
		t.Fatalf("Scan read at revision %d, want %d (the writes before it; the write during it is at %d)", rev, before+1, written)
	}
	if len(got) != n {
		t.Fatalf("Scan visited %d keys, want %d", len(got), n)
	}
	for i, x := range got {
		if want := fmt.Sprintf("s/%06d", i); x.Key != want || string(x.Value) != "v" || x.ModRevision > rev {
			t.Fatalf("key %d of the scan: %s=%q at revision %d, want %s=\"v\" at or before %d", i, x.Key, x.Value, x.ModRevision, want, rev)
		}
	}

	// Keys only: no values.
	var keys int
	if _, err := s.Scan(ctxT(t, 30*time.Second), kv.RangeRequest{Start: "s/", End: kv.PrefixEnd("s/"), KeysOnly: true}, func(x kv.KeyValue) error {
		if len(x.Value) != 0 {
			t.Fatalf("a keys-only scan returned the value of %s", x.Key)
		}
		keys++
		return nil
	}); err != nil || keys != n+1 {
		t.Fatalf("keys-only Scan: %d keys, %v; want %d", keys, err, n+1)
	}

	// An error from visit ends the scan and is returned.
	stop := errors.New("enough")
	visited := 0
	if _, err := s.Scan(ctxT(t, 30*time.Second), kv.Prefix("s/", 0), func(kv.KeyValue) error {
		visited++
		return stop
	}); !errors.Is(err, stop) || visited != 1 {
		t.Fatalf("Scan whose visit fails: %v after %d keys, want %v after 1", err, visited, stop)
	}

	if _, err := s.Scan(ctxT(t, 10*time.Second), kv.Prefix("s/", 10), func(kv.KeyValue) error { return nil }); err == nil {
		t.Fatal("Scan with a limit: no error")
	}
}

// TestScanWithoutRangeStream: a member that does not know RangeStream
// (etcd before 3.7) answers Unimplemented; Scan says ErrScanUnsupported,
// having visited nothing, and does not ask again. A client whose KV is
// wrapped cannot stream either.
func TestScanWithoutRangeStream(t *testing.T) {
	srv := etcdtest.Start(t)
	s, streams := refusingStore(t, srv, func(int64) error {
		return status.Error(codes.Unimplemented, "unknown method RangeStream for service etcdserverpb.KV")
	})
	putMany(t, s, "s/", 10)

	for range 2 {
		visited := 0
		_, err := s.Scan(ctxT(t, 10*time.Second), kv.Prefix("s/", 0), func(kv.KeyValue) error { visited++; return nil })
		if !errors.Is(err, kv.ErrScanUnsupported) || visited != 0 {
			t.Fatalf("Scan on a member without RangeStream: %v after %d keys, want kv.ErrScanUnsupported after none", err, visited)
		}
	}
	if n := streams(); n != 1 {
		t.Fatalf("%d RangeStream calls for two scans, want 1 (the answer is remembered)", n)
	}
	if res, err := s.Range(ctxT(t, 10*time.Second), kv.Prefix("s/", 0)); err != nil || len(res.KVs) != 10 {
		t.Fatalf("Range after the refused scan: %d keys, %v", len(res.KVs), err)
	}

	nsCli := srv.Client(t)
	nsCli.KV = namespace.NewKV(nsCli.KV, "app/")
	ns := etcdkv.New(nsCli, etcdkv.Options{})
	t.Cleanup(func() { _ = ns.Close() })
	if _, err := ns.Scan(ctxT(t, 10*time.Second), kv.Prefix("s/", 0), func(kv.KeyValue) error { return nil }); !errors.Is(err, kv.ErrScanUnsupported) {
		t.Fatalf("Scan through a namespaced client: %v, want kv.ErrScanUnsupported", err)
	}
}

// refusingStore returns a store on srv whose client's RangeStream calls
// fail with refuse(n) for the nth call (nil: the call goes through), and
// a count of those calls.
func refusingStore(t *testing.T, srv *etcdtest.Server, refuse func(n int64) error) (*etcdkv.Store, func() int64) {
	t.Helper()
	var streams atomic.Int64
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{srv.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if method == "/etcdserverpb.KV/RangeStream" {
				if err := refuse(streams.Add(1)); err != nil {
					return nil, err
				}
			}
			return streamer(ctx, desc, cc, method, opts...)
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	s := etcdkv.New(cli, etcdkv.Options{})
	t.Cleanup(func() { _ = s.Close() })
	return s, streams.Load
}

// TestScanTriesAnUnavailableMemberAgain: clientv3 tries reads again when a
// member is unavailable, but not streams. A scan that an unavailable
// member ended before it read a key is tried again; one refused otherwise
// is not.
func TestScanTriesAnUnavailableMemberAgain(t *testing.T) {
	srv := etcdtest.Start(t)
	s, streams := refusingStore(t, srv, func(n int64) error {
		switch {
		case n <= 2:
			return status.Error(codes.Unavailable, "connection refused")
		case n == 4:
			return status.Error(codes.PermissionDenied, "etcdserver: permission denied")
		}
		return nil
	})
	putMany(t, s, "s/", 10)
	keys := 0
	if _, err := s.Scan(ctxT(t, 10*time.Second), kv.Prefix("s/", 0), func(kv.KeyValue) error { keys++; return nil }); err != nil || keys != 10 {
		t.Fatalf("Scan after two unavailable tries: %d keys, %v; want 10", keys, err)
	}
	if n := streams(); n != 3 {
		t.Fatalf("%d RangeStream calls, want 3", n)
	}
	if _, err := s.Scan(ctxT(t, 10*time.Second), kv.Prefix("s/", 0), func(kv.KeyValue) error { return nil }); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Scan refused for permission: %v", err)
	}
	if n := streams(); n != 4 {
		t.Fatalf("%d RangeStream calls after a refused scan, want 4 (not tried again)", n)
	}
}
