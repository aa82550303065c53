package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// dialStore dials endpoints with etcdkv.Dial and returns a store on them.
func dialStore(t *testing.T, endpoints ...string) *etcdkv.Store {
	t.Helper()
	return dialStoreWith(t, etcdkv.Options{}, endpoints...)
}

// dialStoreWith is dialStore with the store's options.
func dialStoreWith(t *testing.T, opts etcdkv.Options, endpoints ...string) *etcdkv.Store {
	t.Helper()
	s := etcdkv.New(dialClient(t, endpoints...), opts)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// dialClient dials endpoints with etcdkv.Dial and returns once the client
// is connected to each of them. Dial returns when one endpoint answers, and
// a test that then hangs another endpoint would otherwise catch its
// connection before it is ready: the balancer never sends that endpoint a
// request, and the test no longer tests a hung member that gets them.
func dialClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := etcdkv.Dial(ctxT(t, 10*time.Second), etcdkv.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	// The round-robin balancer picks only connections that are ready:
	// once every endpoint has answered a read, each is.
	want := map[string]bool{}
	for _, ep := range endpoints {
		_, host, ok := strings.Cut(ep, "://")
		if !ok {
			host = ep
		}
		want[host] = true
	}
	kvc := etcdserverpb.NewKVClient(cli.ActiveConnection())
	ctx := ctxT(t, 10*time.Second)
	for len(want) > 0 {
		var p peer.Peer
		_, err := kvc.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("k"), Serializable: true}, grpc.Peer(&p))
		switch {
		case ctx.Err() != nil:
			t.Fatalf("the client is not connected to %v within 10 s of its dial", slices.Sorted(maps.Keys(want)))
		case err != nil:
			t.Logf("read while waiting for every endpoint: %v", err)
		case p.Addr != nil:
			delete(want, p.Addr.String())
		}
		if len(want) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return cli
}

// A blackholed connection makes a renewal hang until its deadline (no reset,
// no early error), and the store works again once the network heals.
func TestKeepAliveOnceBlackhole(t *testing.T) {
	srv := etcdtest.Start(t)
	p := etcdtest.NewProxy(t, srv.Endpoint())
	s := dialStore(t, p.URL())
	id, err := s.Grant(ctxT(t, 10*time.Second), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	p.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	start := time.Now()
	_, err = s.KeepAliveOnce(ctx, id)
	took := time.Since(start)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("KeepAliveOnce through a blackhole: %v, want context.DeadlineExceeded", err)
	}
	if took < 900*time.Millisecond || took > 3*time.Second {
		t.Fatalf("KeepAliveOnce through a blackhole returned after %v, want about its 1s deadline", took)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	_, err = s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("bh/x", nil, 0)}})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Txn through a blackhole: %v, want context.DeadlineExceeded", err)
	}

	p.Heal()
	start = time.Now()
	ttl, err := s.KeepAliveOnce(ctxT(t, 10*time.Second), id)
	if err != nil || ttl != 30*time.Second {
		t.Fatalf("KeepAliveOnce after Heal: %v, %v", ttl, err)
	}
	t.Logf("renewal after heal took %v", time.Since(start))
}

// Resetting every connection fails what is in flight at most; the client
// reconnects, and a watch resumes where it was without losing an event.
func TestDropConnections(t *testing.T) {
	srv := etcdtest.Start(t)
	p := etcdtest.NewProxy(t, srv.Endpoint())
	s := dialStore(t, p.URL())
	first := put(t, s, "drop/0", "x", 0)
	ch := s.Watch(ctxT(t, 20*time.Second), "drop/", first)
	want := []int64{first}
	for i := 1; i <= 3; i++ {
		p.DropConnections()
		want = append(want, putRetry(t, s, fmt.Sprintf("drop/%d", i)))
	}
	var got []int64
	for len(got) < len(want) {
		r, ok := next(t, ch)
		if !ok || r.Err != nil {
			t.Fatalf("watch ended after %v: %v", got, r.Err)
		}
		for _, ev := range r.Events {
			got = append(got, ev.KV.ModRevision)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("watch saw revisions %v, want %v", got, want)
	}
}

// putRetry creates key (once: a retried attempt that had committed is seen
// by the compare) and returns the revision that created it.
func putRetry(t *testing.T, s kv.Store, key string) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, err := s.Txn(ctx, kv.Txn{
			If:   []kv.Cmp{kv.Missing(key)},
			Then: []kv.Op{kv.Put(key, []byte("v"), 0)},
			Else: []kv.Op{kv.Get(key)},
		})
		cancel()
		switch {
		case err == nil && res.Succeeded:
			return res.Revision
		case err == nil:
			return res.Results[0].KV.CreateRevision
		case time.Now().After(deadline):
			t.Fatalf("put %s: still failing after 20s: %v", key, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A cluster of three keeps serving when its leader crashes and comes back:
// writes succeed after the election, the lease survives, the restarted
// member catches up, and a watch (resumed after "no leader" errors) sees
// every revision exactly once.
func TestClusterLeaderKillAndRestart(t *testing.T) {
	c := etcdtest.StartCluster(t, 3, etcdtest.WithElectionTimeout(50*time.Millisecond, 500*time.Millisecond))
	s := dialStore(t, c.Endpoints()...)
	ctx := ctxT(t, 30*time.Second)
	id, err := s.Grant(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := put(t, s, "ha/owner", "me", id)

	// Collect every revision, resuming the watch after errors such as "no
	// leader", as the coordinator does.
	wctx, cancel := context.WithCancel(context.Background())
	revs := make(chan int64, 100)
	done := make(chan int) // number of resumes
	go func() {
		resumed := 0
		defer func() { done <- resumed }()
		from := start
		for wctx.Err() == nil {
			for r := range s.Watch(wctx, "ha/", from) {
				if r.Err != nil {
					t.Logf("watch from %d ended: %v", from, r.Err)
					resumed++
					break
				}
				for _, ev := range r.Events {
					revs <- ev.KV.ModRevision
					from = ev.KV.ModRevision + 1
				}
			}
			select {
			case <-wctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()

	want := []int64{start}
	leader := c.Leader()
	c.Kill(leader)
	killed := time.Now()
	want = append(want, putRetry(t, s, "ha/after-kill"))
	t.Logf("first write %v after the leader crashed", time.Since(killed))
	if _, err := keepAliveRetry(t, s, id); err != nil {
		t.Fatalf("lease after leader change: %v", err)
	}
	c.Restart(leader)
	want = append(want, putRetry(t, s, "ha/after-restart"))

	// The restarted member has caught up: a linearizable read through it
	// alone sees the last write.
	mcli := c.Member(leader).Client(t)
	resp, err := mcli.Get(ctx, "ha/after-restart")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read through the restarted member: %v, %v", resp, err)
	}

	var got []int64
	for len(got) < len(want) {
		select {
		case r := <-revs:
			got = append(got, r)
		case <-time.After(10 * time.Second):
			t.Fatalf("watch saw only %v of %v", got, want)
		}
	}
	cancel()
	resumed := <-done
	if fmt.Sprint(got) != fmt.Sprint(want) || len(revs) != 0 {
		t.Fatalf("watch saw %v (and %d more), want %v", got, len(revs), want)
	}
	t.Logf("watch resumed %d times", resumed)
}

// keepAliveRetry renews id, retrying while the cluster is unavailable.
func keepAliveRetry(t *testing.T, s kv.Store, id kv.LeaseID) (time.Duration, error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ttl, err := s.KeepAliveOnce(ctx, id)
		cancel()
		if err == nil || errors.Is(err, kv.ErrLeaseNotFound) || time.Now().After(deadline) {
			return ttl, err
		}
	}
}

// An endpoint that does not answer does not use up the time of one that
// does, in Dial and in ServerVersion.
func TestDeadEndpointDoesNotStall(t *testing.T) {
	srv := etcdtest.Start(t)
	dead := etcdtest.NewProxy(t, srv.Endpoint())
	dead.Blackhole()
	start := time.Now()
	cli, err := etcdkv.Dial(ctxT(t, 10*time.Second), etcdkv.Config{
		Endpoints:   []string{dead.URL(), srv.Endpoint()},
		DialTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatalf("Dial with one dead endpoint: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Dial took %v", took)
	}
	s := etcdkv.New(cli, etcdkv.Options{})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if v, err := s.ServerVersion(ctx); err != nil || v == "" {
		t.Fatalf("ServerVersion with one dead endpoint: %q, %v", v, err)
	}
}

// TestClusterFirstEndpointKilled: a store dialled with every endpoint
// keeps working when the member of the first endpoint dies, whether or not
// it led (the client balances over all of them; one that only knew the
// first would be cut off).
func TestClusterFirstEndpointKilled(t *testing.T) {
	c := etcdtest.StartCluster(t, 3, etcdtest.WithElectionTimeout(50*time.Millisecond, 500*time.Millisecond))
	s := dialStore(t, c.Endpoints()...)
	ctx := ctxT(t, 30*time.Second)
	id, err := s.Grant(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "first/before", "v", id)
	c.Kill(0)
	putRetry(t, s, "first/after-kill")
	if _, err := keepAliveRetry(t, s, id); err != nil {
		t.Fatalf("lease with the first endpoint's member dead: %v", err)
	}
	rr, err := s.Range(ctx, kv.RangeRequest{Start: "first/", End: kv.PrefixEnd("first/")})
	if err != nil || len(rr.KVs) != 2 {
		t.Fatalf("read with the first endpoint's member dead: %v, %v", rr.KVs, err)
	}
}

// A Dial that fails says why the endpoint did not answer (refused, TLS
// handshake failed), not only that the time ran out.
func TestDialSaysWhyEndpointFailed(t *testing.T) {
	srv := etcdtest.Start(t)
	plain := srv.Endpoint() // no TLS: a TLS handshake with it fails
	tlsEP := "https://" + strings.TrimPrefix(plain, "http://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	_ = ln.Close()
	for _, tc := range []struct{ ep, want string }{
		{tlsEP, "handshake"},
		{closed, "connection refused"},
	} {
		cli, err := etcdkv.Dial(context.Background(), etcdkv.Config{Endpoints: []string{tc.ep}, DialTimeout: time.Second})
		if err == nil {
			_ = cli.Close()
			t.Fatalf("Dial %s succeeded", tc.ep)
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.ep) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Dial %s: %q; want it to name the endpoint, say %q and be a deadline", tc.ep, err, tc.want)
		}
	}
}

// Renewals share a stream kept open between them: one that broke since
// its last use (here: every connection reset) is replaced within the same
// call, and a renewal cut short by its deadline does not spoil the next.
func TestKeepAliveOnceAfterReset(t *testing.T) {
	srv := etcdtest.Start(t)
	p := etcdtest.NewProxy(t, srv.Endpoint())
	s := dialStore(t, p.URL())
	id, err := s.Grant(ctxT(t, 10*time.Second), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if ttl, err := s.KeepAliveOnce(ctxT(t, 10*time.Second), id); err != nil || ttl != 30*time.Second {
			t.Fatalf("renewal %d: %v, %v", i, ttl, err)
		}
		p.DropConnections()
	}
	p.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err = s.KeepAliveOnce(ctx, id)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("renewal through a blackhole: %v, want context.DeadlineExceeded", err)
	}
	p.Heal()
	if ttl, err := s.KeepAliveOnce(ctxT(t, 10*time.Second), id); err != nil || ttl != 30*time.Second {
		t.Fatalf("renewal after Heal: %v, %v", ttl, err)
	}
}
