package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a free 127.0.0.1 port that forwards every
// connection to a target, and can be told to misbehave: hang (Blackhole),
// slow down (Delay), or reset its connections (DropConnections).
//
// A blackhole stops forwarding bytes but keeps both sockets open, like a
// network partition that drops packets: the peer sees a hang, not a reset.
// Bytes already read are held and delivered after Heal, as TCP would
// retransmit them, so a connection that survived the partition carries on
// intact. New connections are accepted and hang as well.
//
// Every goroutine of a Proxy is owned by it: Close (registered with the test's
// cleanup by [NewProxy]) resets all connections and waits for them to end.
// A Proxy is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	wg     sync.WaitGroup
	ctx    context.Context // ends dials in progress on Close
	cancel context.CancelFunc

	mu       sync.Mutex
	target   string // host:port; "" refuses connections (resets them)
	toServer bool   // blackhole client->target bytes
	toClient bool   // blackhole target->client bytes
	delay    time.Duration
	changed  chan struct{} // closed and replaced whenever the state changes
	conns    map[*proxyConn]struct{}
	closed   bool
}

// NewProxy starts a proxy on a free loopback port that forwards to target,
// "host:port" or a URL such as "http://127.0.0.1:2379". The target must be a
// loopback address: test traffic stays on this machine. The proxy is closed
// when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	addr, err := loopbackHostPort(target)
	if err != nil {
		t.Fatalf("etcdtest: NewProxy: %v", err)
	}
	p, err := newProxy(addr)
	if err != nil {
		t.Fatalf("etcdtest: NewProxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// StartProxy is NewProxy outside of a test (a fault-injection harness, say):
// the caller closes the proxy.
func StartProxy(target string) (*Proxy, error) {
	addr, err := loopbackHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: StartProxy: %w", err)
	}
	return newProxy(addr)
}

// newProxy listens on a free loopback port and forwards to target, which may
// be "" (connections are reset until a target is set).
func newProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen on a free loopback port: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ln:      ln,
		ctx:     ctx,
		cancel:  cancel,
		target:  target,
		changed: make(chan struct{}),
		conns:   make(map[*proxyConn]struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// loopbackHostPort turns "host:port" or "scheme://host:port" into host:port
// and checks that host is a loopback address.
func loopbackHostPort(target string) (string, error) {
	hostport := target
	if strings.Contains(target, "://") {
		u, err := url.Parse(target)
		if err != nil {
			return "", fmt.Errorf("bad target %q: %w", target, err)
		}
		hostport = u.Host
	}
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", fmt.Errorf("bad target %q: want host:port: %w", target, err)
	}
	if host != "localhost" {
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return "", fmt.Errorf("target %q is not a loopback address", target)
		}
	}
	return hostport, nil
}

// Addr returns the proxy's listening address, 127.0.0.1:PORT.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL returns "http://" + Addr(), usable as an etcd client endpoint.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Blackhole stops forwarding in both directions; connections stay open.
func (p *Proxy) Blackhole() { p.BlackholeDirection(true, true) }

// BlackholeDirection stops forwarding bytes towards the target (toServer)
// and/or towards the client (toClient); false resumes that direction.
func (p *Proxy) BlackholeDirection(toServer, toClient bool) {
	p.update(func() { p.toServer, p.toClient = toServer, toClient })
}

// Delay holds every chunk of bytes for d before forwarding it, in each
// direction (a round trip gains 2·d). Zero removes the delay.
func (p *Proxy) Delay(d time.Duration) {
	p.update(func() { p.delay = max(d, 0) })
}

// Heal removes every blackhole and delay. Held bytes are delivered.
// Connections already reset stay reset.
func (p *Proxy) Heal() {
	p.update(func() { p.toServer, p.toClient, p.delay = false, false, 0 })
}

// DropConnections resets (TCP RST) every current connection, on both sides.
// New connections are accepted as usual.
func (p *Proxy) DropConnections() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.reset()
	}
}

// Close stops accepting, resets every connection and waits until all of the
// proxy's goroutines have returned. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if !already {
		p.cancel()
		_ = p.ln.Close()
		p.DropConnections()
	}
	p.wg.Wait()
	return nil
}

// setTarget changes where new connections go; "" resets them on accept.
func (p *Proxy) setTarget(target string) {
	p.update(func() { p.target = target })
}

func (p *Proxy) update(f func()) {
	p.mu.Lock()
	f()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

type proxyState struct {
	target             string
	toServer, toClient bool
	delay              time.Duration
	changed            <-chan struct{}
}

func (p *Proxy) state() proxyState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return proxyState{p.target, p.toServer, p.toClient, p.delay, p.changed}
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary errors (EMFILE...): back off briefly.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		client := c.(*net.TCPConn)
		// Read the target and register the connection under one lock, so
		// that after setTarget("") and DropConnections no connection to the
		// old target remains.
		p.mu.Lock()
		target := p.target
		if p.closed || target == "" {
			p.mu.Unlock()
			resetConn(client)
			continue
		}
		pc := &proxyConn{client: client, done: make(chan struct{})}
		p.conns[pc] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(pc, target)
	}
}

// proxyConn is one proxied connection. Its goroutines end when done closes.
type proxyConn struct {
	client *net.TCPConn
	mu     sync.Mutex
	server *net.TCPConn // nil until dialled
	done   chan struct{}
	once   sync.Once
}

// reset closes both sockets with RST and ends the connection's goroutines.
func (c *proxyConn) reset() {
	c.once.Do(func() {
		close(c.done)
		c.mu.Lock()
		defer c.mu.Unlock()
		resetConn(c.client)
		if c.server != nil {
			resetConn(c.server)
		}
	})
}

// closeBoth closes both sockets normally (FIN) after both directions ended.
func (c *proxyConn) closeBoth() {
	c.once.Do(func() {
		close(c.done)
		c.mu.Lock()
		defer c.mu.Unlock()
		_ = c.client.Close()
		if c.server != nil {
			_ = c.server.Close()
		}
	})
}

func resetConn(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

func (p *Proxy) serve(c *proxyConn, target string) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()

	d := net.Dialer{Timeout: 5 * time.Second}
	sc, err := d.DialContext(p.ctx, "tcp", target)
	if err != nil {
		c.reset()
		return
	}
	c.mu.Lock()
	select {
	case <-c.done: // reset while dialling
		c.mu.Unlock()
		resetConn(sc.(*net.TCPConn))
		return
	default:
	}
	c.server = sc.(*net.TCPConn)
	c.mu.Unlock()

	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := false
	finished := 0
	pump := func(src, dst *net.TCPConn, toServer bool) {
		defer wg.Done()
		err := p.pump(c, src, dst, toServer)
		mu.Lock()
		defer mu.Unlock()
		finished++
		switch {
		case err != nil && !failed:
			failed = true
			c.reset()
		case err == nil:
			_ = dst.CloseWrite() // forward the half-close
			if finished == 2 && !failed {
				c.closeBoth()
			}
		}
	}
	wg.Add(2)
	go pump(c.client, c.server, true)
	go pump(c.server, c.client, false)
	wg.Wait()
}

// chunk is a piece of the byte stream with the time it was read.
type chunk struct {
	buf *[]byte
	n   int
	at  time.Time
	eof bool
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// pump copies src to dst, honouring blackhole and delay. It returns nil after
// forwarding src's EOF, or an error when the connection failed or was reset.
func (p *Proxy) pump(c *proxyConn, src, dst *net.TCPConn, toServer bool) error {
	queue := make(chan chunk, 64)
	readErr := make(chan error, 1)
	var rwg sync.WaitGroup
	rwg.Add(1)
	go func() { // reader: src -> queue
		defer rwg.Done()
		defer close(queue)
		for {
			if !p.waitOpen(c, toServer) {
				return
			}
			buf := bufPool.Get().(*[]byte)
			n, err := src.Read(*buf)
			if n > 0 {
				select {
				case queue <- chunk{buf: buf, n: n, at: time.Now()}:
				case <-c.done:
					bufPool.Put(buf)
					return
				}
			} else {
				bufPool.Put(buf)
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					select {
					case queue <- chunk{eof: true}:
					case <-c.done:
					}
					return
				}
				readErr <- err
				return
			}
		}
	}()
	defer rwg.Wait()

	for ch := range queue {
		if ch.eof {
			return nil
		}
		if !p.waitDue(c, ch.at) || !p.waitOpen(c, toServer) {
			c.reset()
			return errors.New("reset")
		}
		_, err := dst.Write((*ch.buf)[:ch.n])
		bufPool.Put(ch.buf)
		if err != nil {
			c.reset()
			return err
		}
	}
	// The queue closed without EOF: a read error or a reset.
	c.reset()
	select {
	case err := <-readErr:
		return err
	default:
		return errors.New("reset")
	}
}

// waitOpen blocks while the direction is blackholed; false if the connection
// ended meanwhile.
func (p *Proxy) waitOpen(c *proxyConn, toServer bool) bool {
	for {
		s := p.state()
		if (toServer && !s.toServer) || (!toServer && !s.toClient) {
			select {
			case <-c.done:
				return false
			default:
				return true
			}
		}
		select {
		case <-s.changed:
		case <-c.done:
			return false
		}
	}
}

// waitDue blocks until a chunk read at `at` has been delayed enough; false if
// the connection ended meanwhile.
func (p *Proxy) waitDue(c *proxyConn, at time.Time) bool {
	for {
		s := p.state()
		wait := time.Until(at.Add(s.delay))
		if wait <= 0 {
			return true
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
			return true
		case <-s.changed: // the delay changed: recompute
			timer.Stop()
		case <-c.done:
			timer.Stop()
			return false
		}
	}
}
