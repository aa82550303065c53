package etcdnode

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A member of a three-member cluster started alone waits for its peers;
// when its start is interrupted (SIGTERM to `leasehold etcd`), it stops
// without logging an error or a stack trace at etcd's default level: the
// caller says, once, that it was interrupted.
func TestInterruptedUnreadyMemberStopsQuietly(t *testing.T) {
	obs, logs := observer.New(zapcore.ErrorLevel) // etcd's default level
	logTee = obs
	defer func() { logTee = nil }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sctx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	// Interrupted once etcd has started, while the member waits for its
	// peers (nothing listens on their ports: it cannot be ready).
	startedHook = interrupt
	defer func() { startedHook = func() {} }()

	pu := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	ic := fmt.Sprintf("m1=%s,m2=http://127.0.0.1:%d,m3=http://127.0.0.1:%d", pu, freePort(t), freePort(t))
	n, err := Start(sctx, Config{Name: "m1", Dir: t.TempDir(), ClientURL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), PeerURL: pu, InitialCluster: ic})
	if err == nil {
		n.Close()
		t.Fatal("a member of three started alone was ready")
	}
	if !errors.Is(err, context.Canceled) || ctx.Err() != nil {
		t.Fatalf("Start interrupted while the member waited for its peers: %v; want the context's error", err)
	}
	starting.Wait()
	for _, e := range logs.All() {
		if e.Level >= zapcore.ErrorLevel || e.Stack != "" {
			t.Errorf("logged at level %v when stopped before it was ready: %q %v\n%s", e.Level, e.Message, e.ContextMap(), e.Stack)
		}
	}
}
