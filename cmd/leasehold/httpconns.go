package main

// What the daemon's HTTP server gives slow and numerous clients: a write
// deadline for every response, counted from its first byte, and a bound
// on the connections open at once, beyond which a few more serve the
// health probes only.

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/apicall"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	// defaultHTTPWriteTimeout bounds the writing of one response, from
	// its first byte: twice the CLI's bound on a request (so that no
	// answer a CLI still waits for is cut), and enough for the largest
	// one, a 16 MiB page of GET /v1/jobs, at 300 KB/s. A client that
	// stops reading (or reads a trickle) frees its connection then,
	// rather than when TCP gives up, which a peer that keeps
	// acknowledging with a zero window never makes it do.
	defaultHTTPWriteTimeout = time.Minute
	// defaultHTTPMaxConns bounds the connections open at once: many
	// clients of `jobs wait` each hold one for up to the 5 m of a
	// long-poll, while 4,096 idle ones cost some 100 MB of goroutines
	// and buffers.
	defaultHTTPMaxConns = 4096
	// probeConns are the connections accepted beyond the bound, which
	// serve the health probes only (and close after each answer), so
	// that an orchestrator does not restart a daemon whose connections
	// slow clients filled; beyond them, connections wait in the
	// listen queue until one closes.
	probeConns = 8
	// httpMaxHeaderBytes bounds a request's header (Go's default is
	// 1 MiB): the API's requests carry a path, a query and a token, and
	// a browser's cookies for the host stay well below it.
	httpMaxHeaderBytes = 64 << 10
	// connsFullLogEvery spaces the log lines that say the bound is
	// reached.
	connsFullLogEvery = time.Minute
)

// probePaths are the requests a connection beyond the bound serves.
var probePaths = map[string]bool{"/healthz": true, "/readyz": true, "/v1/health": true}

// httpLimits are the daemon's bounds on its HTTP clients.
type httpLimits struct {
	// writeTimeout bounds the writing of each response, from its first
	// byte (0: none).
	writeTimeout time.Duration
	// maxConns bounds the connections open at once, beyond which
	// probeConns serve the probes only (0: no bound).
	maxConns int
}

// httpLimits returns the bounds of the daemon's flags, 0 meaning the
// default.
func (o *daemonOpts) httpLimits() httpLimits {
	l := httpLimits{writeTimeout: o.httpWriteTimeout, maxConns: o.httpMaxConns}
	if l.writeTimeout == 0 {
		l.writeTimeout = defaultHTTPWriteTimeout
	}
	if l.maxConns == 0 {
		l.maxConns = defaultHTTPMaxConns
	}
	return l
}

// limitHandler serves h with lim's write deadline, and answers only the
// probes on the connections beyond lim's bound.
func limitHandler(h http.Handler, lim httpLimits) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		// A kept-alive connection keeps the deadline of its last
		// response: none until this one starts (a long-poll's wait, a
		// backup's copy and the reads of any request write nothing).
		_ = rc.SetWriteDeadline(time.Time{})
		if ll := probesOnly(r.Context()); ll != nil {
			// Closed after its answer, so that it holds no probe's
			// place while idle.
			w.Header().Set("Connection", "close")
			if !probePaths[r.URL.Path] {
				// Refused before the API: marked so, for clients to
				// retry it knowing that nothing was written (not a
				// 503 at the store's deadline, whose write may be
				// made).
				ll.refused.Add(1)
				_ = rc.SetWriteDeadline(time.Now().Add(lim.writeTimeout))
				w.Header().Set("Retry-After", "1")
				w.Header().Set(apicall.NotProcessedHeader, "true")
				apiserver.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("the daemon has as many HTTP connections open as it serves at once (--http-max-connections %d) and did not process this request, nothing was written: retry later, or raise the bound", lim.maxConns))
				return
			}
		}
		if lim.writeTimeout <= 0 {
			h.ServeHTTP(w, r)
			return
		}
		dw := &deadlineWriter{ResponseWriter: w, rc: rc, d: lim.writeTimeout}
		h.ServeHTTP(dw, r)
		dw.start() // a response without a body is written after the handler
	})
}

// deadlineWriter sets the write deadline of its response, d from its
// first byte.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	d       time.Duration
	started bool
}

func (w *deadlineWriter) start() {
	if w.started {
		return
	}
	w.started = true
	// Not supported by a writer of tests: no deadline then.
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
}

func (w *deadlineWriter) WriteHeader(code int) {
	w.start()
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.start()
	return w.ResponseWriter.Write(p)
}

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// probesOnlyKey marks the context of a connection beyond the bound with
// its listener.
type probesOnlyKey struct{}

// probesOnly returns the listener that accepted ctx's connection beyond
// its bound, nil for a connection within it.
func probesOnly(ctx context.Context) *limitListener {
	v, _ := ctx.Value(probesOnlyKey{}).(*limitListener)
	return v
}

// connContext marks the context of a connection that limitListener
// accepted beyond its bound (http.Server.ConnContext).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if lc, ok := c.(*limitedConn); ok && lc.probesOnly != nil {
		return context.WithValue(ctx, probesOnlyKey{}, lc.l)
	}
	return ctx
}

// limitListener accepts at most max connections open at once, then
// reserve more that serve the probes only; beyond those, Accept waits
// for one to close, and connections wait in the listen queue.
type limitListener struct {
	net.Listener
	regular, reserve chan struct{} // a token per open connection
	max              int
	log              *slog.Logger
	done             chan struct{}
	closeOnce        sync.Once
	lastFull         atomic.Int64 // unix nanoseconds of the last "bound reached" line
	probesOpen       atomic.Int64 // connections open beyond the bound
	// For the metrics: the connections open (within the bound and
	// beyond), those accepted beyond it so far, and the requests refused
	// on them (503).
	open, probesTaken, refused atomic.Int64
}

func newLimitListener(ln net.Listener, max, reserve int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, regular: make(chan struct{}, max), reserve: make(chan struct{}, reserve), max: max, log: log, done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	slot, err := l.acquire()
	if err != nil {
		return nil, err
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-slot
		return nil, err
	}
	if slot == l.reserve {
		// A regular place may have freed while Accept waited.
		select {
		case l.regular <- struct{}{}:
			<-l.reserve
			slot = l.regular
		default:
		}
	}
	lc := &limitedConn{Conn: c, slot: slot, l: l}
	l.open.Add(1)
	if slot == l.reserve {
		lc.probesOnly = &l.probesOpen
		l.probesOpen.Add(1)
		l.probesTaken.Add(1)
	}
	return lc, nil
}

// acquire takes a regular place, else a probe's, waiting for one to
// free while both are taken.
func (l *limitListener) acquire() (chan struct{}, error) {
	select {
	case l.regular <- struct{}{}:
		return l.regular, nil
	default:
	}
	if now := time.Now().UnixNano(); now-l.lastFull.Load() >= int64(connsFullLogEvery) {
		l.lastFull.Store(now)
		l.log.Warn("the HTTP connections reached their bound: further requests other than the probes are refused (503) or wait until a connection closes; raise --http-max-connections if the clients are legitimate",
			slog.Int("max_connections", l.max))
	}
	select {
	case l.regular <- struct{}{}:
		return l.regular, nil
	case l.reserve <- struct{}{}:
		return l.reserve, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitedConn gives its place back once closed.
type limitedConn struct {
	net.Conn
	slot chan struct{}
	l    *limitListener
	// probesOnly counts the open connections beyond the bound, of which
	// it is one; nil within the bound.
	probesOnly *atomic.Int64
	closeOnce  sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.l.open.Add(-1)
		if c.probesOnly != nil {
			c.probesOnly.Add(-1)
		}
		<-c.slot
	})
	return err
}

// collectors are the listener's metrics: the connections open and its
// bound, the connections taken beyond the bound (probes only) and the
// requests refused on them.
func (l *limitListener) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_http_connections", Help: "HTTP connections open now, those beyond --http-max-connections (which serve the probes only) included."},
			func() float64 { return float64(l.open.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasehold_http_max_connections", Help: "The bound on the HTTP connections open at once (--http-max-connections), beyond which a few more serve the probes only."},
			func() float64 { return float64(l.max) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "leasehold_http_probe_connections_total", Help: "HTTP connections accepted beyond --http-max-connections, which serve the probes only."},
			func() float64 { return float64(l.probesTaken.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "leasehold_http_refused_requests_total", Help: "HTTP requests other than the probes refused (503, not processed, nothing written) on connections beyond --http-max-connections."},
			func() float64 { return float64(l.refused.Load()) }),
	}
}
