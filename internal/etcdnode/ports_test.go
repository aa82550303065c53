package etcdnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// takenURL holds a loopback port for the test and returns its URL.
func takenURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return "http://" + ln.Addr().String()
}

// A taken client or peer port is an *AddrInUseError that says which, and
// leaves no data directory behind.
func TestStartAddrInUse(t *testing.T) {
	taken := takenURL(t)
	for _, peer := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		free := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
		cfg := Config{Dir: t.TempDir() + "/etcd", ClientURL: taken, PeerURL: free}
		if peer {
			cfg.ClientURL, cfg.PeerURL = free, taken
		}
		n, err := Start(ctx, cfg)
		cancel()
		if err == nil {
			n.Close()
			t.Fatalf("peer %v: started on the taken port %s", peer, taken)
		}
		var ae *AddrInUseError
		if !errors.As(err, &ae) || ae.Peer != peer || ae.URL != taken || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("peer %v: error %v (%#v), want an *AddrInUseError for %s", peer, err, ae, taken)
		}
	}
}

// What etcd logs while StartEtcd runs waits for release, and is written
// in order, except what is about the error StartEtcd returned (Start
// reports it); after release, entries are written at once.
func TestStartHoldDropsReturnedError(t *testing.T) {
	obs, logs := observer.New(zapcore.InfoLevel)
	hold := newStartHold()
	lg := zap.New(&quietStopCore{Core: obs, stopping: new(atomic.Bool), hold: hold})
	listenErr := &net.OpError{Op: "listen", Net: "tcp", Err: syscall.EADDRINUSE}

	lg.Warn("one")
	lg.With(zap.String("member", "m1")).Error("creating peer listener failed", zap.Error(listenErr))
	lg.Info("two")
	lg.Debug("below the level")
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d entries written during the hold: %v", n, logs.All())
	}
	hold.release(fmt.Errorf("start: %w", listenErr))
	lg.Error("after")
	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Message)
	}
	if want := "one,two,after"; strings.Join(got, ",") != want {
		t.Fatalf("written %q, want %q", got, want)
	}
}

// Without an error, release writes all that was held; an entry after
// which zap may end the process writes what was held first.
func TestStartHoldWritesAll(t *testing.T) {
	obs, logs := observer.New(zapcore.InfoLevel)
	hold := newStartHold()
	lg := zap.New(&quietStopCore{Core: obs, stopping: new(atomic.Bool), hold: hold})
	lg.Error("one", zap.Error(errors.New("x")))
	lg.DPanic("two") // does not panic: not a development logger
	lg.Info("three")
	hold.release(nil)
	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Message)
	}
	if want := "one,two,three"; strings.Join(got, ",") != want {
		t.Fatalf("written %q, want %q", got, want)
	}
}

// Client and peer URLs that no two listeners can both bind are refused
// before etcd runs.
func TestSameListenAddr(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"http://127.0.0.1:1", "http://127.0.0.1:1", true},
		{"http://0.0.0.0:1", "http://127.0.0.1:1", true},
		{"http://127.0.0.1:1", "http://[::]:1", true},
		{"http://localhost:1", "http://localhost:1", true},
		{"http://[::1]:1", "http://[0:0:0:0:0:0:0:1]:1", true},
		{"http://127.0.0.1:1", "http://127.0.0.1:2", false},
		{"http://127.0.0.1:1", "http://127.0.0.2:1", false},
		{"http://localhost:1", "http://127.0.0.1:1", true},
	} {
		if got := SameListenAddr(c.a, c.b); got != c.same {
			t.Errorf("SameListenAddr(%s, %s) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
	if _, err := (Config{ClientURL: "http://127.0.0.1:1", PeerURL: "http://127.0.0.1:1"}).withDefaults(); err == nil || !strings.Contains(err.Error(), "same address") {
		t.Errorf("same client and peer URL: %v, want refused", err)
	}
}

// A taken port is put on the URL that names its address exactly before one
// naming a host, which could be any address.
func TestAddrInUseBlamesExactAddressFirst(t *testing.T) {
	inUse := &net.OpError{Op: "listen", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5}, Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}
	cfg := Config{PeerURL: "http://member.example:5", ClientURL: "http://127.0.0.1:5"}
	var ae *AddrInUseError
	if err := addrInUse(inUse, cfg); !errors.As(err, &ae) || ae.Peer || ae.URL != cfg.ClientURL {
		t.Fatalf("addrInUse = %v, want the client URL %s", err, cfg.ClientURL)
	}
	cfg = Config{PeerURL: "http://member.example:5", ClientURL: "http://127.0.0.1:6"}
	if err := addrInUse(inUse, cfg); !errors.As(err, &ae) || !ae.Peer {
		t.Fatalf("addrInUse = %v, want the peer URL (a host name, the only one on port 5)", err)
	}
}

// blockingCore wraps a core and, writing the entry "held-1", says so on
// entered and waits for proceed.
type blockingCore struct {
	zapcore.Core
	entered, proceed chan struct{}
}

func (c blockingCore) Write(e zapcore.Entry, f []zapcore.Field) error {
	if e.Message == "held-1" {
		close(c.entered)
		<-c.proceed
	}
	return c.Core.Write(e, f)
}

// An entry logged while the held ones are being written comes after them.
func TestStartHoldKeepsOrderDuringRelease(t *testing.T) {
	obs, logs := observer.New(zapcore.InfoLevel)
	core := blockingCore{Core: obs, entered: make(chan struct{}), proceed: make(chan struct{})}
	hold := newStartHold()
	lg := zap.New(&quietStopCore{Core: core, stopping: new(atomic.Bool), hold: hold})
	lg.Info("held-1")
	lg.Info("held-2")
	released := make(chan struct{})
	go func() { hold.release(nil); close(released) }()
	<-core.entered // release is writing held-1
	later := make(chan struct{})
	go func() { lg.Info("later"); close(later) }()
	// It must wait for the release. The window only gives a broken hold
	// the chance to show itself; a correct one never ends it early.
	select {
	case <-later:
		t.Fatal("an entry logged during the release was written before the held ones")
	case <-time.After(50 * time.Millisecond):
	}
	close(core.proceed)
	<-released
	<-later
	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Message)
	}
	if want := "held-1,held-2,later"; strings.Join(got, ",") != want {
		t.Fatalf("written %q, want %q", got, want)
	}
}
