package etcdnode

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startNode starts a single member on free loopback ports and returns it
// and its client URL.
func startNode(ctx context.Context, t *testing.T) (*Node, string) {
	t.Helper()
	cu := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	pu := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	n, err := Start(ctx, Config{Dir: t.TempDir(), ClientURL: cu, PeerURL: pu})
	if err != nil {
		t.Fatal(err)
	}
	return n, cu
}

func TestStartServeStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, cu := startNode(ctx, t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cu}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	wctx, wcancel := context.WithCancel(context.Background())
	wcancel()
	if err := n.Wait(wctx); err != nil {
		t.Fatal(err)
	}
}

func TestBadConfig(t *testing.T) {
	if _, err := Start(context.Background(), Config{Name: "a", InitialCluster: "b=http://127.0.0.1:1"}); err == nil {
		t.Fatal("a cluster that does not name the member was accepted")
	}
	if _, err := Start(context.Background(), Config{ClientURL: "127.0.0.1:2379"}); err == nil {
		t.Fatal("a URL without a scheme was accepted")
	}
}

// A member that stops of its own accord (as one removed from its cluster
// does) stops serving: Wait reports it, as etcd itself exits, instead of
// leaving a process that answers nothing.
func TestWaitEndsWhenMemberStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, _ := startNode(ctx, t)
	defer n.Close()
	n.e.Server.Stop() // what a removal from the cluster ends in
	if err := n.Wait(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("Wait on a stopped member: %v (context: %v); want an error as soon as it stops", err, ctx.Err())
	}
}

// Close may be called again, after Wait stopped the member or Close did.
func TestCloseTwice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, _ := startNode(ctx, t)
	wctx, wcancel := context.WithCancel(context.Background())
	wcancel()
	if err := n.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	n.Close()
	n.Close()
}

// A member whose name only ends another member's name ("xm1=" holds "m1=")
// is not in the initial cluster: refused before etcd creates its data directory.
func TestInitialClusterNamesMemberExactly(t *testing.T) {
	for _, ic := range []string{"m10=http://127.0.0.1:1", "am1=http://127.0.0.1:1", "m2=http://127.0.0.1:1,xm1=http://127.0.0.1:2"} {
		if _, err := (Config{Name: "m1", InitialCluster: ic}).withDefaults(); err == nil {
			t.Errorf("initial cluster %q accepted for member m1", ic)
		}
	}
	// The member's entry is its peer URL, as etcd requires.
	for ic, peer := range map[string]string{"m1=http://127.0.0.1:1": "http://127.0.0.1:1", "m10=http://127.0.0.1:1,m1=http://127.0.0.1:2": "http://127.0.0.1:2"} {
		if _, err := (Config{Name: "m1", PeerURL: peer, InitialCluster: ic}).withDefaults(); err != nil {
			t.Errorf("initial cluster %q refused for member m1: %v", ic, err)
		}
	}
}
