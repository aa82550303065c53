package main

import (
	"context"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestEtcdDataInUseIsOneLine: `leasehold etcd` on the data directory of a
// running member, on other ports, fails at once in one line that names
// the directory and its holder, and the running member keeps serving.
// It used to wait for etcd's lock of the directory forever, deaf to
// SIGTERM (runCLI kills it after a minute).
func TestEtcdDataInUseIsOneLine(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m1")
	var aClient string
	a := startEtcdMemberIn(t, dir, func() []string {
		aClient = "http://" + closedPort(t)
		return []string{"--name", "m1", "--listen-client", aClient, "--listen-peer", "http://" + closedPort(t)}
	})

	r := runCLI(t, nil, "", "etcd", "--name", "m1", "--data", dir,
		"--listen-client", "http://"+closedPort(t), "--listen-peer", "http://"+closedPort(t))
	holder := "another etcd member"
	if runtime.GOOS == "linux" { // /proc/locks names the holder
		holder += " (pid " + strconv.Itoa(a.pid()) + ")"
	}
	want := "leasehold: etcd: --data " + dir + " is in use by " + holder + ": stop it, or give this member its own data directory\n"
	if r.code != exitFailure || r.stderr != want || r.stdout != "" {
		t.Fatalf("exit %d, stderr %q, stdout %q; want exit %d and stderr %q", r.code, r.stderr, r.stdout, exitFailure, want)
	}

	if a.exited() {
		t.Fatalf("the running member exited:\n%s", a.log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), spWait)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{aClient}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "still", "serving"); err != nil {
		t.Fatalf("put through the running member after the refusal: %v", err)
	}
}
