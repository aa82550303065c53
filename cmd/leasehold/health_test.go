package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/testutil"
)

// stallStore is a store whose reads, while stalled is set, wait for
// release without watching their context: as a local store's reads wait
// for its lock while a write stall holds it.
type stallStore struct {
	kv.Store
	stalled  atomic.Bool
	release  chan struct{}
	reads    atomic.Int64 // stalled reads started
	returned atomic.Int64 // stalled reads returned
}

func (s *stallStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if s.stalled.Load() {
		s.reads.Add(1)
		<-s.release
		defer s.returned.Add(1)
	}
	return s.Store.Range(ctx, r)
}

// getReady GETs /readyz. The client's timeout only turns a hang into a
// failure; nothing waits on it.
func getReady(t *testing.T, url string) (int, apiserver.ReadyResponse) {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Get(url + "/readyz")
	if err != nil {
		t.Errorf("/readyz did not answer: %v", err)
		return 0, apiserver.ReadyResponse{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	var r apiserver.ReadyResponse
	if err := json.Unmarshal(b, &r); err != nil {
		t.Errorf("/readyz: %s: %v", b, err)
	}
	return resp.StatusCode, r
}

// /readyz answers 503 within its bound when the store's read does not
// return (nor watch its context), runs one read at a time however many
// probes come, and the read left behind is awaited at the stop.
func TestReadyzAnswersWhileTheStoreStalls(t *testing.T) {
	log := testutil.QuietLogger(t)
	ls := testutil.TempLocal(t, log)
	store := &stallStore{Store: ls, release: make(chan struct{})}
	coord, err := coordinator.New(store, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	// ReadyTimeout: the bound a probe waits (2 s in the daemon); a slow
	// machine makes the test no weaker.
	a := apiserver.New(apiserver.Config{Coord: coord, Kinds: payloadChecks(builtinKinds()), Logger: log, ReadyTimeout: 100 * time.Millisecond})
	var logged testutil.SyncBuffer
	srv, stopHTTP := newHTTPServer(a, nil, httpLimits{}, slog.New(slog.NewTextHandler(&logged, nil)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	released, stopped := false, false
	defer func() {
		if !released {
			close(store.release)
		}
		if !stopped {
			stopHTTP()
		}
		<-served
	}()

	if code, r := getReady(t, base); code != http.StatusOK || r.Store != "ok" {
		t.Fatalf("/readyz before the stall: %d %+v", code, r)
	}
	store.stalled.Store(true)
	code, r := getReady(t, base)
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(r.Store, "unreachable") || !strings.Contains(r.Error, "did not answer") {
		t.Errorf("/readyz while the store stalls: %d %+v, want 503 with the store unreachable", code, r)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, r := getReady(t, base); code != http.StatusServiceUnavailable {
				t.Errorf("concurrent /readyz while the store stalls: %d %+v, want 503", code, r)
			}
		}()
	}
	wg.Wait()
	if n := store.reads.Load(); n != 1 {
		t.Errorf("%d store reads started by 5 probes of a stalled store, want 1 (the later probes await the one in flight)", n)
	}

	// The read outlived its probes; the daemon's HTTP stop owns it: it
	// waits for it (here, while it stalls, until the stop's bound, then
	// says so), and the probe's stop returns once it has returned.
	stopHTTP()
	stopped = true
	if !strings.Contains(logged.String(), "store read still in flight") {
		t.Errorf("the HTTP stop did not wait for the stalled store read of /readyz; its log:\n%s", logged.String())
	}
	close(store.release)
	released = true
	if err := a.StopProbe(context.Background()); err != nil {
		t.Errorf("probe stop once the store answers: %v", err)
	}
	if n := store.returned.Load(); n != 1 {
		t.Errorf("the probe's stop returned before the store read did (%d of 1 returned)", n)
	}
	if n := store.reads.Load(); n != 1 {
		t.Errorf("%d store reads, want 1: a read started after the stop", n)
	}
}
