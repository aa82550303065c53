//go:build unix

package etcdnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// lockBackend takes bbolt's lock of the backend in dir, as a running
// member holds it, and returns what releases it.
func lockBackend(t *testing.T, dir string) (unlock func()) {
	t.Helper()
	p := backendPath(dir)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	return func() { f.Close() }
}

// A start abandoned while etcd waits for the backend's lock, of a member
// that cannot be ready (its peers are not there), still ends once it gets
// the lock: the start left behind stops the member, quietly, instead of
// waiting for it to be ready forever.
func TestAbandonedStartOfUnreadyMemberEnds(t *testing.T) {
	obs, logs := observer.New(zapcore.ErrorLevel)
	logTee = obs
	defer func() { logTee = nil }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	// Held as a running member holds it: etcd waits for it.
	unlock := lockBackend(t, dir)
	dirFree = func(string) error { return nil }
	defer func() { dirFree = checkDirFree }()

	sctx, interrupt := context.WithCancel(ctx)
	interrupt() // ends while etcd waits for the lock
	pu := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	ic := fmt.Sprintf("m1=%s,m2=http://127.0.0.1:%d,m3=http://127.0.0.1:%d", pu, freePort(t), freePort(t))
	n, err := Start(sctx, Config{Name: "m1", Dir: dir, ClientURL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), PeerURL: pu, InitialCluster: ic})
	if err == nil {
		n.Close()
		t.Fatal("a member of three started alone was ready")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start interrupted while etcd waited: %v; want the context's error", err)
	}
	unlock()
	done := make(chan struct{})
	go func() { starting.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the abandoned start of a member that cannot be ready never ended")
	}
	for _, e := range logs.All() {
		if e.Level >= zapcore.ErrorLevel || e.Stack != "" {
			t.Errorf("logged at level %v when stopped before it was ready: %q %v\n%s", e.Level, e.Message, e.ContextMap(), e.Stack)
		}
	}
}
