package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apicall"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/prometheus/client_golang/prometheus"
)

// closeWatch is a listener whose connections say when the server closes
// them, by their remote address.
type closeWatch struct {
	net.Listener
	closed chan string
}

func (l *closeWatch) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		// So that a response of a few MiB outgrows what the sockets
		// hold, whatever the host's buffer sizes.
		_ = tc.SetWriteBuffer(16 << 10)
	}
	return &watchedConn{Conn: c, closed: l.closed}, nil
}

type watchedConn struct {
	net.Conn
	closed chan string
}

func (c *watchedConn) Close() error {
	err := c.Conn.Close()
	select {
	case c.closed <- c.RemoteAddr().String():
	default:
	}
	return err
}

// limitedServer serves coord's API as the daemon does, with lim (and
// reserve probe connections beyond lim.maxConns, if set); it returns the
// server's address, its limit listener (nil without a bound), and the
// addresses of the connections the server closed.
func limitedServer(t *testing.T, coord *coordinator.Coordinator, lim httpLimits, reserve int, idleForever bool) (string, *limitListener, <-chan string) {
	t.Helper()
	log := testutil.QuietLogger(t)
	a := apiserver.New(apiserver.Config{Coord: coord, Kinds: payloadChecks(builtinKinds()), Logger: log})
	srv, stop := newHTTPServer(a, nil, lim, log)
	if idleForever {
		// Idle connections stay open for the test, whatever its pace.
		srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout = 0, 0, 0
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan string, 1000)
	var ln net.Listener = &closeWatch{Listener: raw, closed: closed}
	var ll *limitListener
	if lim.maxConns > 0 {
		ll = newLimitListener(ln, lim.maxConns, reserve, log)
		ln = ll
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		stop()
		<-served
	})
	return raw.Addr().String(), ll, closed
}

func testCoord(t *testing.T) *coordinator.Coordinator {
	t.Helper()
	log := testutil.QuietLogger(t)
	coord, err := coordinator.New(testutil.TempLocal(t, log), coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return coord
}

// rawConn is a client connection that sends requests by hand.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

func (c *rawConn) send(t *testing.T, path string) {
	t.Helper()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
}

// answer reads the response to the request sent, and its body. The
// read's bound only turns a hang into a failure.
func (c *rawConn) answer(t *testing.T) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// A client that asks for a large page of jobs and stops reading holds
// its connection only until the write deadline, from the response's first
// byte: the server closes it (the client gets a cut body), while other
// requests are served.
func TestHTTPWriteDeadlineCutsAStalledReader(t *testing.T) {
	coord := testCoord(t)
	ctx := context.Background()
	// 4 jobs of 512 KiB: a page of 2 MiB, more than the sockets' buffers
	// hold (limitedServer's and the client's are small).
	payload := json.RawMessage(`"` + strings.Repeat("a", 512<<10) + `"`)
	for range 4 {
		if _, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "echo", Queue: "idle", Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	addr, _, closed := limitedServer(t, coord, httpLimits{writeTimeout: 500 * time.Millisecond}, 0, false)

	stalled := dialRaw(t, addr)
	if tc, ok := stalled.Conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	stalled.send(t, "/v1/jobs?queue=idle&limit=4")

	// Served meanwhile, on other connections.
	for range 3 {
		if body := httpGet(t, "http://"+addr+"/v1/stats"); !strings.Contains(body, `"total":4`) {
			t.Errorf("GET /v1/stats beside the stalled client: %s", body)
		}
	}

	// The effect: the server closes the stalled connection (the bound
	// only turns a connection never cut into a failure).
	for cut := false; !cut; {
		select {
		case a := <-closed:
			cut = a == stalled.LocalAddr().String()
		case <-time.After(time.Minute):
			t.Fatal("the stalled client's connection is still open after a minute")
		}
	}
	resp, err := http.ReadResponse(stalled.r, nil)
	if err != nil {
		t.Fatalf("no response head: %v", err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil {
		t.Fatalf("the stalled client got the whole page (%d bytes) after its connection closed", n)
	}
	t.Logf("the stalled client got %d bytes of the page, then %v", n, err)
}

// A long-poll waits longer than the write deadline and is answered: the
// deadline counts from its answer's first byte, not from its request.
func TestHTTPWriteDeadlineSparesLongPolls(t *testing.T) {
	coord := testCoord(t)
	res, err := coord.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "echo", Queue: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	addr, _, _ := limitedServer(t, coord, httpLimits{writeTimeout: 100 * time.Millisecond}, 0, false)
	hc := &http.Client{Timeout: time.Minute} // a hang fails the test rather than its run
	defer hc.CloseIdleConnections()
	// First an ordinary request, whose deadline the kept-alive
	// connection keeps.
	for _, path := range []string{"/v1/stats", "/v1/jobs/" + res.Job.ID + "?wait=1s"} {
		resp, err := hc.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s, %v", path, resp.StatusCode, b, err)
		}
		if strings.Contains(path, "wait") && !strings.Contains(string(b), `"state":"available"`) {
			t.Errorf("the long-poll answered %s", b)
		}
	}
}

// Beyond the bound, a connection serves the probes only (other requests
// are answered 503, and it is closed after each answer); beyond those,
// a connection waits until one closes, and is then served.
func TestHTTPConnectionBound(t *testing.T) {
	addr, ll, _ := limitedServer(t, testCoord(t), httpLimits{writeTimeout: time.Minute, maxConns: 2}, 1, true)

	var regular []*rawConn
	for range 2 {
		c := dialRaw(t, addr)
		c.send(t, "/healthz")
		if resp, body := c.answer(t); resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("a connection within the bound: %d %s, closed %v", resp.StatusCode, body, resp.Close)
		}
		regular = append(regular, c)
	}

	over := dialRaw(t, addr)
	over.send(t, "/v1/stats")
	resp, body := over.answer(t)
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(body, "--http-max-connections") || !apicall.NotProcessed(resp) || !strings.Contains(body, "nothing was written") {
		t.Errorf("a request beyond the bound: %d, closed %v, Retry-After %q, %s %q: %s; want 503, closed, Retry-After, marked not processed, and the flag named",
			resp.StatusCode, resp.Close, resp.Header.Get("Retry-After"), apicall.NotProcessedHeader, resp.Header.Get(apicall.NotProcessedHeader), body)
	}
	probe := dialRaw(t, addr)
	probe.send(t, "/healthz")
	if resp, body := probe.answer(t); resp.StatusCode != http.StatusOK || !resp.Close || apicall.NotProcessed(resp) {
		t.Errorf("a probe beyond the bound: %d %s, closed %v, %s %q; want 200, closed, unmarked", resp.StatusCode, body, resp.Close,
			apicall.NotProcessedHeader, resp.Header.Get(apicall.NotProcessedHeader))
	}

	// Closed by the server after their answers.
	for _, c := range []*rawConn{over, probe} {
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		if n, err := io.Copy(io.Discard, c.r); n != 0 || err != nil {
			t.Errorf("a connection beyond the bound after its answer: %d bytes more, %v; want it closed", n, err)
		}
	}
	waitFor(t, time.Minute, "the probe connections to close", func() bool { return ll.probesOpen.Load() == 0 })
	// The metrics: 2 open (within the bound), 2 taken beyond it, 1
	// request refused there; the bound.
	checkConnMetrics(t, ll, map[string]float64{
		"leasehold_http_connections": 2, "leasehold_http_max_connections": 2,
		"leasehold_http_probe_connections_total": 2, "leasehold_http_refused_requests_total": 1,
	})
	// The probes' place taken by an idle connection: the next one waits.
	idle := dialRaw(t, addr)
	waitFor(t, time.Minute, "the idle connection to take the probes' place", func() bool { return ll.probesOpen.Load() == 1 })
	waiting := dialRaw(t, addr)
	waiting.send(t, "/v1/stats")
	// Not answered while every place is taken (a read that times out
	// cannot fail the test wrongly: an answer here is the failure).
	_ = waiting.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := waiting.r.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a connection beyond every place was read from (%v): want it to wait", err)
	}
	waiting.r = bufio.NewReader(waiting.Conn) // the timed-out reader keeps its error

	_ = regular[0].Close()
	resp, body = waiting.answer(t)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"total"`) {
		t.Errorf("the waiting connection, once one closed: %d %s; want 200", resp.StatusCode, body)
	}
	_ = idle
	checkConnMetrics(t, ll, map[string]float64{"leasehold_http_probe_connections_total": 3, "leasehold_http_refused_requests_total": 1})
}

// checkConnMetrics checks the values of ll's metrics named in want.
func checkConnMetrics(t *testing.T, ll *limitListener, want map[string]float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(ll.collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				got[mf.GetName()] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				got[mf.GetName()] = m.GetCounter().GetValue()
			}
		}
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (served: %v), want %v", name, g, ok, v)
		}
	}
}

// The flags refuse a negative value in one line, take 0 as the default,
// and show in the daemon's help.
func TestHTTPLimitFlags(t *testing.T) {
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"daemon", "--http-max-connections=-1"}, "--http-max-connections -1 is negative: want a number of connections such as 4096, or 0 for the default"},
		{nil, []string{"daemon", "--http-write-timeout=-1s"}, "--http-write-timeout -1s is negative: want a duration such as 1m, or 0 for the default"},
		{[]string{"LEASEHOLD_HTTP_MAX_CONNECTIONS=-5"}, []string{"daemon"}, "LEASEHOLD_HTTP_MAX_CONNECTIONS -5 is negative"},
		{nil, []string{"daemon", "--http-max-connections", "many"}, `--http-max-connections "many": want a whole number`},
	} {
		r := runCLI(t, c.env, "", append(c.args, "--data", t.TempDir())...)
		checkOneLineError(t, strings.Join(append(c.env, c.args...), " "), r, exitUsage, c.want)
	}
	if got := (&daemonOpts{}).httpLimits(); got != (httpLimits{writeTimeout: defaultHTTPWriteTimeout, maxConns: defaultHTTPMaxConns}) {
		t.Errorf("0 for both: %+v, want the defaults", got)
	}
	_, help, _ := runInProcess("daemon", "--help")
	for _, f := range []string{"--http-write-timeout duration", "--http-max-connections int"} {
		if !strings.Contains(help, f) {
			t.Errorf("daemon --help does not show %s", f)
		}
	}
}

// The daemon bounds its connections by the flag (here by its variable):
// with one open, the next answers a probe but not the API.
func TestDaemonHTTPMaxConnections(t *testing.T) {
	cmd := exec.Command(binPath, daemonArgs(t.TempDir())...)
	d := startDaemonCmd(t, cmd, "LEASEHOLD_HTTP_MAX_CONNECTIONS=1")
	addr := strings.TrimPrefix(d.server, "http://")
	first := dialRaw(t, addr)
	first.send(t, "/v1/stats")
	if resp, body := first.answer(t); resp.StatusCode != http.StatusOK {
		t.Fatalf("the first connection: %d %s", resp.StatusCode, body)
	}
	for path, want := range map[string]int{"/v1/stats": http.StatusServiceUnavailable, "/readyz": http.StatusOK} {
		c := dialRaw(t, addr)
		c.send(t, path)
		if resp, body := c.answer(t); resp.StatusCode != want {
			t.Errorf("GET %s beside an open connection: %d %s; want %d", path, resp.StatusCode, body, want)
		}
	}

	// An enqueue beside the open connection is refused, sent again, and
	// refused each time: one line that says nothing was written and
	// names the flag, not that its outcome is unknown; and nothing is.
	r := runCLI(t, nil, "", "enqueue", "echo", "--server", d.server)
	checkOneLineError(t, "enqueue beside an open connection", r, exitFailure, "nothing was written (it has as many HTTP connections open as it serves at once): retry later, or raise its --http-max-connections")
	t.Logf("enqueue beside an open connection: %s", r.stderr)
	if strings.Contains(r.stderr, "unknown") || !strings.Contains(r.stderr, fmt.Sprintf("refused the request %d times", busy.Attempts)) {
		t.Errorf("enqueue beside an open connection: %q; want %d refusals and no unknown outcome", r.stderr, busy.Attempts)
	}
	// The open connection serves on: nothing was written, and the
	// metrics count the refusals (the GET above and the enqueue's).
	first.send(t, "/v1/stats")
	if resp, body := first.answer(t); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"total":0`) {
		t.Errorf("stats after the refused enqueue: %d %s; want no job", resp.StatusCode, body)
	}
	first.send(t, "/metrics")
	_, metrics := first.answer(t)
	for _, want := range []string{
		"leasehold_http_max_connections 1\n",
		fmt.Sprintf("leasehold_http_refused_requests_total %d\n", 1+busy.Attempts),
		fmt.Sprintf("leasehold_http_probe_connections_total %d\n", 2+busy.Attempts),
		"leasehold_http_connections ", // its value: this connection and the probes' not yet closed
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Once the connection closes, the enqueue goes through (sent again
	// if it came before the daemon saw the close).
	_ = first.Close()
	r = runCLI(t, nil, "", "enqueue", "echo", "--server", d.server)
	if r.code != 0 || len(strings.Fields(r.stdout)) != 1 {
		t.Fatalf("enqueue once the connection closed: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if body := httpGet(t, d.server+"/v1/stats"); !strings.Contains(body, `"total":1`) {
		t.Errorf("stats after the enqueue: %s; want one job", body)
	}
}
