package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
)

// rangeCountingStore counts range reads, and fails them while failRanges
// is set.
type rangeCountingStore struct {
	kv.Store
	ranges     atomic.Int64
	failRanges atomic.Bool
}

var errRangesCut = errors.New("rangeCountingStore: reads cut")

func (s *rangeCountingStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	s.ranges.Add(1)
	if s.failRanges.Load() {
		return kv.RangeResult{}, errRangesCut
	}
	return s.Store.Range(ctx, r)
}

// newSharedAPI serves the API as a shared-mode CLI command does (any kind
// of a live daemon, no kinds of its own) over a counting store.
func newSharedAPI(t *testing.T) (*rangeCountingStore, *httptest.Server) {
	t.Helper()
	log := quietLogger(t)
	ls := tempLocal(t, log)
	store := &rangeCountingStore{Store: ls}
	coord, err := coordinator.New(store, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newAPI(apiConfig{Coord: coord, Shared: true, Logger: log}))
	t.Cleanup(srv.Close)
	return store, srv
}

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

// A shared-mode batch reads the live daemons' kinds once, not once per
// job (each read scans every worker and ownership key).
func TestAPISharedBatchReadsLiveKindsOnce(t *testing.T) {
	store, srv := newSharedAPI(t)
	const n = 50
	jobs := make([]string, n)
	for i := range jobs {
		jobs[i] = `{"kind":"resize","payload":{}}`
	}
	before := store.ranges.Load()
	code, body := postBody(t, srv.URL+"/v1/jobs/batch", `{"jobs":[`+strings.Join(jobs, ",")+`]}`)
	if code != http.StatusCreated {
		t.Fatalf("batch: %d %s", code, body)
	}
	if reads := store.ranges.Load() - before; reads >= n {
		t.Errorf("a batch of %d jobs made %d range reads: the live kinds are read per job", n, reads)
	}
}

// A store that cannot be read is not the client's fault: a batch answers
// 5xx, as a single create does, never 400 (which the CLI reports as bad
// input, exit 2).
func TestAPISharedBatchStoreErrorIsNotBadInput(t *testing.T) {
	store, srv := newSharedAPI(t)
	store.failRanges.Store(true)
	for _, c := range []struct{ path, body string }{
		{"/v1/jobs", `{"kind":"resize"}`},
		{"/v1/jobs/batch", `{"jobs":[{"kind":"resize"}]}`},
	} {
		code, body := postBody(t, srv.URL+c.path, c.body)
		if code < 500 {
			t.Errorf("POST %s with the store unreadable: %d %s, want 5xx", c.path, code, body)
		}
	}
}

// At stop the daemon takes no more requests, wakes long-polls, and lets
// the requests in flight finish: an enqueue caught on its way to the store
// is answered with its job, not cancelled with a 503 that leaves the
// client unsure whether it was written.
func TestHTTPStopFinishesRequestsInFlight(t *testing.T) {
	log := quietLogger(t)
	ls := tempLocal(t, log)
	gate := kvtest.NewGate(ls)
	ws := &watchStarted{Store: gate, started: make(chan struct{}, 1)}
	coord, err := coordinator.New(ws, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv, stop := newHTTPServer(newAPI(apiConfig{Coord: coord, Kinds: builtinKinds(), Logger: log}), nil, log)
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
	var created createResponse
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
	log := quietLogger(t)
	ls := tempLocal(t, log)
	coord, err := coordinator.New(ls, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv, stop := newHTTPServer(newAPI(apiConfig{Coord: coord, Kinds: builtinKinds(), Logger: log}), nil, log)
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
	var created createResponse
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
		var j jobResponse
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
