package main

import (
	"errors"
	"net"
	"sync"
	"time"
)

// proxy is a TCP proxy on a free loopback port in front of one etcd
// member's client URL. Each daemon reaches each member through its own
// proxy, so the nemesis can cut one daemon off from etcd.
//
// A blackholed direction stops forwarding bytes but keeps both sockets
// open, as a partition that drops packets does: the peer sees a hang, not a
// reset. Bytes already read are held and delivered after heal, as TCP would
// retransmit them. (etcdtest.Proxy behaves the same but needs a testing.TB.)
type proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	toServer bool // blackhole client->server
	toClient bool // blackhole server->client
	delay    time.Duration
	changed  chan struct{}
	conns    map[*pconn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

type pconn struct {
	client, server *net.TCPConn
	once           sync.Once
	done           chan struct{}
}

func (c *pconn) reset() {
	c.once.Do(func() {
		close(c.done)
		for _, s := range []*net.TCPConn{c.client, c.server} {
			if s != nil {
				_ = s.SetLinger(0)
				_ = s.Close()
			}
		}
	})
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[*pconn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) update(f func()) {
	p.mu.Lock()
	f()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// Blackhole stops forwarding towards the server and/or the client.
func (p *proxy) Blackhole(toServer, toClient bool) {
	p.update(func() { p.toServer, p.toClient = toServer, toClient })
}

// Delay holds each chunk d before forwarding it.
func (p *proxy) Delay(d time.Duration) { p.update(func() { p.delay = d }) }

// Heal removes blackholes and delays.
func (p *proxy) Heal() { p.update(func() { p.toServer, p.toClient, p.delay = false, false, 0 }) }

// DropConnections resets every open connection.
func (p *proxy) DropConnections() {
	p.mu.Lock()
	cs := make([]*pconn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.reset()
	}
}

func (p *proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.DropConnections()
	p.wg.Wait()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		pc := &pconn{client: c.(*net.TCPConn), done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			pc.reset()
			continue
		}
		p.conns[pc] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(pc)
	}
}

func (p *proxy) serve(c *pconn) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	sc, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		c.reset()
		return
	}
	c.server = sc.(*net.TCPConn)
	select {
	case <-c.done: // reset while dialling
		_ = sc.Close()
		return
	default:
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(c, c.client, c.server, true) }()
	go func() { defer wg.Done(); p.pump(c, c.server, c.client, false) }()
	wg.Wait()
}

func (p *proxy) pump(c *pconn, src, dst *net.TCPConn, toServer bool) {
	defer c.reset()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		at := time.Now()
		if n > 0 {
			if !p.wait(c, toServer, at) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait blocks while the direction is blackholed or the chunk read at `at`
// is not yet due; false if the connection ended meanwhile.
func (p *proxy) wait(c *pconn, toServer bool, at time.Time) bool {
	for {
		p.mu.Lock()
		held := (toServer && p.toServer) || (!toServer && p.toClient)
		due := time.Until(at.Add(p.delay))
		changed := p.changed
		p.mu.Unlock()
		if !held && due <= 0 {
			return true
		}
		var timer <-chan time.Time
		if !held {
			timer = time.After(due)
		}
		select {
		case <-c.done:
			return false
		case <-changed:
		case <-timer:
		}
	}
}
