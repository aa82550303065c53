package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

const someJobID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"

// signalWriter records what is written to it and says so on wrote.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// jobs wait ID shows its progress (plain lines, stderr not a terminal)
// while a long-poll is out, not only when one answers: a job that lasts
// 12 s gets its line at 10 s. The clock and the ticks are the test's.
func TestJobsWaitIDsProgressDuringLongPoll(t *testing.T) {
	polled := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		state := coordinator.StateRunning
		if r.URL.Query().Get("wait") != "" {
			polled <- struct{}{}
			select {
			case <-release:
				state = coordinator.StateCompleted
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(apiserver.JobResponse{Job: &coordinator.Job{ID: someJobID, State: state}})
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before srv.Close
	c, err := newClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()

	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	stderr := &signalWriter{wrote: make(chan struct{}, 1)}
	p := &meter{w: stderr, what: "waiting", now: clock, start: clock()}
	tick := make(chan time.Time)
	o := &waitOpts{tick: tick, timeoutFlag: "--timeout"}
	var stdout bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- waitIDs(ctx, ctx, c, o, []string{someJobID}, &stdout, p) }()

	<-polled
	if s := stderr.String(); s != "" {
		t.Fatalf("progress at 0 s: %q, want nothing yet", s)
	}
	mu.Lock()
	now = now.Add(plainEvery)
	mu.Unlock()
	// Received by the wait, as the poll is out. The guard only turns a
	// hang of a broken wait into a failure before the test binary's
	// -timeout; it never decides a pass.
	var guard <-chan time.Time
	if dl, ok := t.Deadline(); ok {
		guard = time.After(time.Until(dl) * 9 / 10)
	}
	select {
	case tick <- now:
	case <-guard:
		t.Fatal("the wait took no progress tick while its long-poll was out")
	}
	<-stderr.wrote
	want := "waiting: [------------------------] 0/1   0% 0.0/s ETA ?  " + someJobID + " is not final yet\n"
	if s := stderr.String(); s != want {
		t.Errorf("progress at %s with the poll out: %q, want %q", plainEvery, s, want)
	}

	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	once.Do(func() { close(release) })
	if err := <-errc; err != nil {
		t.Fatalf("wait: %v", err)
	}
	if got := stdout.String(); got != someJobID+" completed\n" {
		t.Errorf("stdout %q, want the job's final state", got)
	}
	if s := stderr.String(); !strings.HasSuffix(s, "waiting: [########################] 1/1 100% 0.1/s in 12s\n") {
		t.Errorf("progress after the job: %q, want a last line at 12 s", s)
	}
}
