package etcdtest_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/coordinator/etcdtest"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// putRetry writes key=value, retrying with short deadlines while the
// cluster recovers, and returns the revision of the write.
func putRetry(t *testing.T, cli *clientv3.Client, key, value string) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := cli.Put(ctx, key, value)
		cancel()
		if err == nil {
			return resp.Header.Revision
		}
		if time.Now().After(deadline) {
			t.Fatalf("put %s: %v", key, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestServerKillRestartKeepsData(t *testing.T) {
	srv := etcdtest.Start(t)
	for _, ep := range srv.Endpoints() {
		if !strings.HasPrefix(ep, "http://127.0.0.1:") || strings.HasSuffix(ep, ":2379") {
			t.Fatalf("endpoint %s: want a free loopback port", ep)
		}
	}
	if srv.Endpoint() != srv.Endpoints()[0] || srv.Etcd() == nil {
		t.Fatal("Endpoint or Etcd inconsistent")
	}
	cli := srv.Client(t)
	rev := putRetry(t, cli, "k", "v")
	// An open watch stream used to make etcd's shutdown wait 7 s.
	wch := cli.Watch(ctxT(t, 30*time.Second), "w", clientv3.WithRev(rev+1))

	start := time.Now()
	srv.Kill(0)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Kill took %v with an open watch", took)
	}
	if srv.Etcd() != nil {
		t.Fatal("Etcd() not nil after Kill")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := cli.Get(ctx, "k")
	cancel()
	if err == nil {
		t.Fatal("Get succeeded on a killed server")
	}

	srv.Restart(0)
	resp, err := cli.Get(ctxT(t, 10*time.Second), "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("after restart: %v, %v", resp, err)
	}
	if resp.Header.Revision != rev {
		t.Fatalf("revision %d after restart, want %d", resp.Header.Revision, rev)
	}
	// The client's watch resumed on the restarted server.
	rev2 := putRetry(t, cli, "w", "1")
	select {
	case wr := <-wch:
		if wr.Err() != nil || len(wr.Events) != 1 || wr.Events[0].Kv.ModRevision != rev2 {
			t.Fatalf("watch after restart: %+v, %v", wr, wr.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch silent after restart")
	}
}

func TestClusterLeaderCrashAndRestart(t *testing.T) {
	c := etcdtest.StartCluster(t, 3, etcdtest.WithElectionTimeout(50*time.Millisecond, 500*time.Millisecond))
	if len(c.Members()) != 3 || len(c.Endpoints()) != 3 {
		t.Fatalf("%d members, %d endpoints", len(c.Members()), len(c.Endpoints()))
	}
	cli := c.Client(t)
	putRetry(t, cli, "a", "1")

	old := c.Leader()
	c.Kill(old)
	if c.Member(old).Etcd() != nil {
		t.Fatal("killed member still running")
	}
	newLeader := c.Leader()
	if newLeader == old {
		t.Fatalf("leader %d survived its crash", old)
	}
	rev := putRetry(t, cli, "b", "2")

	c.Restart(old)
	// The restarted member catches up and serves linearizable reads.
	mcli := c.Member(old).Client(t)
	resp, err := mcli.Get(ctxT(t, 10*time.Second), "b")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != rev {
		t.Fatalf("read through restarted member %s: %v, %v", c.Member(old).Name(), resp, err)
	}
	if l := c.Leader(); l < 0 || l > 2 {
		t.Fatalf("leader %d", l)
	}
}

func TestClusterStopHandsOverLeadership(t *testing.T) {
	c := etcdtest.StartCluster(t, 3, etcdtest.WithElectionTimeout(50*time.Millisecond, 500*time.Millisecond))
	cli := c.Client(t)
	putRetry(t, cli, "a", "1")
	old := c.Leader()
	c.Stop(old)
	// A graceful stop transfers leadership first: a write goes through at
	// once, with no election timeout to wait for.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "b", "2"); err != nil {
		t.Fatalf("write right after a graceful leader stop: %v", err)
	}
	c.Restart(old)
}

// With a quorum gone the remaining member stops serving writes; restarting
// one member brings quorum back.
func TestClusterQuorumLoss(t *testing.T) {
	c := etcdtest.StartCluster(t, 3, etcdtest.WithElectionTimeout(50*time.Millisecond, 500*time.Millisecond))
	cli := c.Member(2).Client(t)
	putRetry(t, cli, "a", "1")
	c.Kill(0)
	c.Kill(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := cli.Put(ctx, "b", "2")
	cancel()
	if err == nil {
		t.Fatal("write succeeded without quorum")
	}
	c.Restart(0) // two of three running: waits until ready
	putRetry(t, cli, "b", "2")
	c.Restart(1)
}

func TestAutoCompaction(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithAutoCompaction("periodic", "1s"))
	cli := srv.Client(t)
	first := putRetry(t, cli, "k", "1")
	deadline := time.Now().Add(10 * time.Second)
	for {
		putRetry(t, cli, "k", "2")
		_, err := cli.Get(ctxT(t, 5*time.Second), "k", clientv3.WithRev(first))
		if errors.Is(err, rpctypes.ErrCompacted) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("revision not compacted after 10s with a 1s periodic retention")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestNewAndClose(t *testing.T) {
	srv, err := etcdtest.New()
	if err != nil {
		t.Fatal(err)
	}
	dir := srv.Member(0).Dir()
	cli := srv.Client(t)
	putRetry(t, cli, "k", "v")
	srv.Close()
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := cli.Get(ctx, "k"); err == nil {
		t.Fatal("server still answers after Close")
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("data directory %s left behind", dir)
	}
}
