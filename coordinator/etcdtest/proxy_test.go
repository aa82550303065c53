package etcdtest_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/etcdtest"
)

// echoServer echoes every line it reads and reports each line received.
type echoServer struct {
	ln       net.Listener
	received chan string
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln, received: make(chan string, 100)}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Go(func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						if errors.Is(err, io.EOF) {
							_, _ = c.Write([]byte("bye\n"))
						}
						s.received <- "<" + errName(err) + ">"
						return
					}
					s.received <- line
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func errName(err error) string {
	switch {
	case errors.Is(err, io.EOF):
		return "EOF"
	case errors.Is(err, syscall.ECONNRESET):
		return "RST"
	default:
		return err.Error()
	}
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

func send(t *testing.T, c net.Conn, line string) {
	t.Helper()
	if _, err := c.Write([]byte(line)); err != nil {
		t.Fatalf("write %q: %v", line, err)
	}
}

// readLine reads a line within d; "" and the error on timeout or failure.
func readLine(c net.Conn, r *bufio.Reader, d time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	return r.ReadString('\n')
}

func expectLine(t *testing.T, c net.Conn, r *bufio.Reader, want string) {
	t.Helper()
	got, err := readLine(c, r, 5*time.Second)
	if err != nil || got != want {
		t.Fatalf("read %q, %v; want %q", got, err, want)
	}
}

func expectHang(t *testing.T, c net.Conn, r *bufio.Reader) {
	t.Helper()
	got, err := readLine(c, r, 200*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q, %v; want a hang (read deadline exceeded)", got, err)
	}
}

func expectReceived(t *testing.T, s *echoServer, want string) {
	t.Helper()
	select {
	case got := <-s.received:
		if got != want {
			t.Fatalf("server received %q, want %q", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("server did not receive %q", want)
	}
}

func expectNotReceived(t *testing.T, s *echoServer) {
	t.Helper()
	select {
	case got := <-s.received:
		t.Fatalf("server received %q, want nothing", got)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestProxyForwardsAndHalfCloses(t *testing.T) {
	srv := newEchoServer(t)
	p := etcdtest.NewProxy(t, srv.ln.Addr().String())
	if p.URL() != "http://"+p.Addr() {
		t.Fatalf("URL %q for Addr %q", p.URL(), p.Addr())
	}
	c, r := dial(t, p.Addr())
	send(t, c, "hello\n")
	expectReceived(t, srv, "hello\n")
	expectLine(t, c, r, "hello\n")
	// A half-close reaches the server, whose answer and close come back.
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	expectReceived(t, srv, "<EOF>")
	expectLine(t, c, r, "bye\n")
	if _, err := readLine(c, r, 5*time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("after the server closed: %v, want EOF", err)
	}
}

func TestProxyBlackholeHangsAndHeals(t *testing.T) {
	srv := newEchoServer(t)
	p := etcdtest.NewProxy(t, srv.ln.Addr().String())
	c, r := dial(t, p.Addr())
	send(t, c, "one\n")
	expectLine(t, c, r, "one\n")
	expectReceived(t, srv, "one\n")

	p.Blackhole()
	send(t, c, "two\n")
	expectNotReceived(t, srv)
	expectHang(t, c, r)
	// A connection opened during the blackhole is accepted and hangs too.
	c2, r2 := dial(t, p.Addr())
	send(t, c2, "new\n")
	expectHang(t, c2, r2)
	expectNotReceived(t, srv)

	p.Heal() // held bytes are delivered, both streams intact
	expectLine(t, c, r, "two\n")
	expectLine(t, c2, r2, "new\n")
	send(t, c, "three\n")
	expectLine(t, c, r, "three\n")
}

func TestProxyBlackholeDirection(t *testing.T) {
	srv := newEchoServer(t)
	p := etcdtest.NewProxy(t, srv.ln.Addr().String())
	c, r := dial(t, p.Addr())

	p.BlackholeDirection(false, true) // requests pass, answers do not
	send(t, c, "req\n")
	expectReceived(t, srv, "req\n")
	expectHang(t, c, r)
	p.BlackholeDirection(true, false) // answers pass, requests do not
	expectLine(t, c, r, "req\n")
	send(t, c, "held\n")
	expectNotReceived(t, srv)
	p.BlackholeDirection(false, false)
	expectReceived(t, srv, "held\n")
	expectLine(t, c, r, "held\n")
}

func TestProxyDelay(t *testing.T) {
	srv := newEchoServer(t)
	p := etcdtest.NewProxy(t, srv.ln.Addr().String())
	c, r := dial(t, p.Addr())
	const d = 150 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	send(t, c, "slow\n")
	expectLine(t, c, r, "slow\n")
	if rtt := time.Since(start); rtt < 2*d {
		t.Fatalf("round trip %v with a %v delay each way", rtt, d)
	}
	p.Heal()
	start = time.Now()
	send(t, c, "fast\n")
	expectLine(t, c, r, "fast\n")
	if rtt := time.Since(start); rtt > d {
		t.Fatalf("round trip %v after Heal", rtt)
	}
}

func TestProxyDropConnections(t *testing.T) {
	srv := newEchoServer(t)
	p := etcdtest.NewProxy(t, srv.ln.Addr().String())
	c, r := dial(t, p.Addr())
	send(t, c, "a\n")
	expectLine(t, c, r, "a\n")
	expectReceived(t, srv, "a\n")

	p.Blackhole() // a hung connection is reset all the same
	p.DropConnections()
	if _, err := readLine(c, r, 5*time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client read after DropConnections: %v, want ECONNRESET", err)
	}
	expectReceived(t, srv, "<RST>")

	p.Heal()
	c2, r2 := dial(t, p.Addr())
	send(t, c2, "b\n")
	expectLine(t, c2, r2, "b\n")
}

func TestProxyCloseEndsEverything(t *testing.T) {
	srv := newEchoServer(t)
	p := etcdtest.NewProxy(t, srv.ln.Addr().String())
	for range 5 {
		c, r := dial(t, p.Addr())
		send(t, c, "x\n")
		expectLine(t, c, r, "x\n")
	}
	p.Blackhole()
	c, _ := dial(t, p.Addr())
	send(t, c, "stuck\n")
	done := make(chan struct{})
	go func() { _ = p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs")
	}
	_ = p.Close() // idempotent
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("proxy still accepts after Close")
	}
}
