package etcdnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// startWithin runs Start and fails the test if it has not returned after a
// generous bound: a start that waits on a data directory in use never
// returns by itself.
func startWithin(t *testing.T, ctx context.Context, cfg Config) (*Node, error) {
	t.Helper()
	type result struct {
		n   *Node
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := Start(ctx, cfg)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		return r.n, r.err
	case <-time.After(60 * time.Second):
		t.Fatalf("Start(%s) still running after 60s", cfg.Dir)
		return nil, nil
	}
}

// A second member on the data directory of a running one is refused at
// once, naming the holder, before it binds a port; etcd would wait for
// bbolt's lock of the backend forever. The running member keeps serving.
func TestStartDirInUse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "m1")
	cu := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	n, err := Start(ctx, Config{Dir: dir, ClientURL: cu, PeerURL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	cu2, pu2 := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	n2, err := startWithin(t, ctx, Config{Dir: dir, ClientURL: "http://" + cu2, PeerURL: "http://" + pu2})
	if err == nil {
		n2.Close()
		t.Fatal("a second member started on the data directory of a running one")
	}
	var inUse *DirInUseError
	if !errors.As(err, &inUse) || inUse.Dir != dir {
		t.Fatalf("Start on a data directory in use: %v; want a *DirInUseError for %s", err, dir)
	}
	if runtime.GOOS == "linux" && inUse.PID != os.Getpid() {
		t.Errorf("holder pid %d, want %d (this process)", inUse.PID, os.Getpid())
	}
	// Refused before etcd listened: both ports are free.
	for _, a := range []string{cu2, pu2} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("port %s held after the refusal: %v", a, err)
			continue
		}
		l.Close()
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cu}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "still", "serving"); err != nil {
		t.Fatalf("running member after the refusal: %v", err)
	}
}

// A start that etcd cannot finish (the data directory was taken between
// the check and etcd's open) returns when its context ends, as `leasehold
// etcd` must at SIGTERM; the start left behind closes the member once it
// gets the directory.
func TestStartReturnsWhenContextEndsWhileEtcdWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "m1")
	n, err := Start(ctx, Config{Dir: dir, ClientURL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), PeerURL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	dirFree = func(string) error { return nil } // the race lost: etcd waits
	defer func() { dirFree = checkDirFree }()
	// Ends while etcd waits (or before: Start returns the same either way).
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	defer scancel()
	cu2, pu2 := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	n2, err := startWithin(t, sctx, Config{Dir: dir, ClientURL: "http://" + cu2, PeerURL: "http://" + pu2})
	if err == nil {
		n2.Close()
		t.Fatal("a second member started on the data directory of a running one")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start whose context ended while etcd waited: %v; want the context's error", err)
	}
	// Once the directory is free, the start left behind ends, closing
	// what it started: its ports are free again.
	n.Close()
	starting.Wait()
	for _, a := range []string{cu2, pu2} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("port %s held after the abandoned start ended: %v", a, err)
			continue
		}
		l.Close()
	}
}
