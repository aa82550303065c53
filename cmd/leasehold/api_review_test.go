package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/testutil"
)

func postBody(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// At stop the daemon takes no more requests, wakes long-polls, and lets
// the requests in flight finish: an enqueue caught on its way to the store
// is answered with its job, not cancelled with a 503 that leaves the
// client unsure whether it was written.
func TestHTTPStopFinishesRequestsInFlight(t *testing.T) {
	log := testutil.QuietLogger(t)
	ls := testutil.TempLocal(t, log)
	gate := kvtest.NewGate(ls)
	ws := &watchStarted{Store: gate, started: make(chan struct{}, 1)}
	coord, err := coordinator.New(ws, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv, stop := newHTTPServer(apiserver.New(apiserver.Config{Coord: coord, Kinds: payloadChecks(builtinKinds()), Logger: log}), nil, httpLimits{}, log)
	active := make(chan struct{}, 8)
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateActive {
			active <- struct{}{}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()

	// A job that stays available (no worker), to long-poll.
	code, body := postBody(t, base+"/v1/jobs", `{"kind":"echo"}`)
	<-active
	var created apiserver.CreateResponse
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &created) != nil {
		t.Fatalf("create: %d %s", code, body)
	}

	type answer struct {
		code int
		body string
	}
	gate.Arm()
	posted := make(chan answer, 1)
	go func() {
		c, b := postBody(t, base+"/v1/jobs", `{"kind":"echo"}`)
		posted <- answer{c, b}
	}()
	<-gate.Held()
	<-active // the enqueue's
	polled := make(chan answer, 1)
	go func() {
		resp, err := http.Get(base + "/v1/jobs/" + created.Job.ID + "?wait=5m")
		if err != nil {
			polled <- answer{0, err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		polled <- answer{resp.StatusCode, string(b)}
	}()
	// The long-poll's handler waits on the job. (Its connection turning
	// active would not do: net/http reports a connection active once it
	// has read any of a request, also when the stop then cuts that read
	// short, and the request goes unanswered.)
	<-ws.started
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	if p := <-polled; p.code != http.StatusOK {
		t.Errorf("long-poll at stop: %d %s, want 200 with the job as it is", p.code, p.body)
	}
	gate.Open()
	if p := <-posted; p.code != http.StatusCreated {
		t.Errorf("enqueue in flight at stop: %d %s, want 201", p.code, p.body)
	}
	<-stopped
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
}

// watchStarted says when a watch begins.
type watchStarted struct {
	kv.Store
	started chan struct{}
}

func (s *watchStarted) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	ch := s.Store.Watch(ctx, prefix, fromRev)
	select {
	case s.started <- struct{}{}:
	default:
	}
	return ch
}

// A long-poll outlives the server's ReadTimeout (2 minutes in the daemon,
// while a wait may last 5): it answers when the job ends, not when the
// connection's read deadline passes. (Go's server does not cut a handler
// that reads no more of its request; this guards that the daemon's
// configuration keeps it so.)
func TestLongPollOutlivesReadTimeout(t *testing.T) {
	log := testutil.QuietLogger(t)
	ls := testutil.TempLocal(t, log)
	coord, err := coordinator.New(ls, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv, stop := newHTTPServer(apiserver.New(apiserver.Config{Coord: coord, Kinds: payloadChecks(builtinKinds()), Logger: log}), nil, httpLimits{}, log)
	srv.ReadTimeout = 50 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		stop()
		<-served
	}()
	base := "http://" + ln.Addr().String()
	code, body := postBody(t, base+"/v1/jobs", `{"kind":"echo"}`)
	var created apiserver.CreateResponse
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &created) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	id := created.Job.ID
	polled := make(chan string, 1)
	go func() {
		resp, err := http.Get(base + "/v1/jobs/" + id + "?wait=30s")
		if err != nil {
			polled <- err.Error()
			return
		}
		defer resp.Body.Close()
		var j apiserver.JobResponse
		if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
			polled <- err.Error()
			return
		}
		polled <- string(j.Job.State)
	}()
	// Well past the read timeout (not a bound on anything: a slow machine
	// only makes the test weaker), the job ends.
	time.Sleep(300 * time.Millisecond)
	if code, body := postBody(t, base+"/v1/jobs/"+id+"/cancel", ""); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	if got := <-polled; got != string(coordinator.StateCancelled) {
		t.Fatalf("long-poll answered %q, want the job cancelled: it ended at the read timeout, before the job did", got)
	}
}
