package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// TestJobsWaitOutlastsUnavailableStore: an answer that the store did not
// answer in time (503 with Retry-After: etcd without quorum, a leader
// election) does not end a jobs wait, which has no --timeout here and so
// waits until the jobs are final: it reads again, and exits 0 once they
// are. Before, the first 503 ended the wait, exit 1, as if it had failed.
func TestJobsWaitOutlastsUnavailableStore(t *testing.T) {
	const id = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	srv := waitDaemon(t, id, func(w http.ResponseWriter, n int32) (final, done bool) {
		if n <= 2 {
			w.Header().Set("Retry-After", "1")
			apiserver.WriteError(w, http.StatusServiceUnavailable, "the store did not answer within 10s (etcd unreachable or without quorum?): retry later")
			return false, true
		}
		return true, false
	})

	code, out, errs := runInProcess("jobs", "wait", id, "--server", srv.URL)
	if code != 0 || out != id+" completed\n" {
		t.Errorf("jobs wait ID through two 503s: exit %d, stdout %q, stderr %q; want exit 0 and %q", code, out, errs, id+" completed\n")
	}
	code, out, errs = runInProcess("jobs", "wait", "--all", "--server", srv.URL)
	if want := "all jobs final: completed=1 discarded=0 cancelled=0\n"; code != 0 || out != want {
		t.Errorf("jobs wait --all through two 503s: exit %d, stdout %q, stderr %q; want exit 0 and %q", code, out, errs, want)
	}
}

// TestJobsWaitOutlastsDaemonRestart: once the daemon has answered a wait,
// a connection cut before its answer (a daemon stopping, then refusing
// connections while it restarts) does not end the wait: it reads again
// and exits 0 once the job is final. Before, the first one ended it,
// exit 1, though the job went on. The daemon here answers, then cuts four
// reads (Go's transport retries a GET once on a reused connection, so at
// least two reach the command), then answers that the job is final.
func TestJobsWaitOutlastsDaemonRestart(t *testing.T) {
	const id = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	srv := waitDaemon(t, id, func(w http.ResponseWriter, n int32) (final, done bool) {
		switch {
		case n == 1:
			return false, false
		case n <= 5:
			cut(t, w)
			return false, true
		}
		return true, false
	})

	code, out, errs := runInProcess("jobs", "wait", id, "--server", srv.URL)
	if code != 0 || out != id+" completed\n" {
		t.Errorf("jobs wait ID through a restart: exit %d, stdout %q, stderr %q; want exit 0 and %q", code, out, errs, id+" completed\n")
	}
	code, out, errs = runInProcess("jobs", "wait", "--all", "--server", srv.URL)
	if want := "all jobs final: completed=1 discarded=0 cancelled=0\n"; code != 0 || out != want {
		t.Errorf("jobs wait --all through a restart: exit %d, stdout %q, stderr %q; want exit 0 and %q", code, out, errs, want)
	}
}

// TestJobsWaitGivesUpOnDaemonGone: a daemon that answered a wait and then
// refuses every connection ends the wait after waitUnreachable, exit 1,
// with a line that says so; one never reached ends it at once.
func TestJobsWaitGivesUpOnDaemonGone(t *testing.T) {
	const id = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	defer func(d time.Duration) { waitUnreachable = d }(waitUnreachable)
	waitUnreachable = 1500 * time.Millisecond

	// The first read is answered; the second (sent once the command has
	// the answer) has its connection cut and the daemon go away.
	gone := make(chan struct{})
	var once sync.Once
	srv := waitDaemon(t, id, func(w http.ResponseWriter, n int32) (final, done bool) {
		if n == 1 {
			return false, false
		}
		once.Do(func() { close(gone) })
		cut(t, w)
		return false, true
	})
	url := srv.URL
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		<-gone
		srv.Close()
	}()
	code, out, errs := runInProcess("jobs", "wait", id, "--server", url)
	<-closed
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if want := "leasehold: jobs wait: the daemon at " + url + " has not answered for"; code != 1 || out != "" || !strings.HasPrefix(lines[len(lines)-1], want) {
		t.Errorf("jobs wait ID on a daemon gone: exit %d, stdout %q, stderr %q; want exit 1 and a last line starting %q", code, out, errs, want)
	}
	code, _, errs = runInProcess("jobs", "wait", id, "--server", url)
	if want := "cannot reach the daemon"; code != 1 || !strings.Contains(errs, want) {
		t.Errorf("jobs wait ID on a daemon never reached: exit %d, stderr %q; want exit 1 and %q", code, errs, want)
	}
}

// waitDaemon is a fake daemon for jobs wait: it serves GET /v1/jobs/{id}
// and GET /v1/stats, the nth read of each (from 1) going first to
// step(w, n). done: step answered it itself; else the job (or the counts)
// is answered completed if final, else running.
func waitDaemon(t *testing.T, id string, step func(w http.ResponseWriter, n int32) (final, done bool)) *httptest.Server {
	var jobReads, statsReads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		state := coordinator.StateRunning
		var finalized *time.Time
		switch r.URL.Path {
		case "/v1/jobs/" + id:
			final, done := step(w, jobReads.Add(1))
			if done {
				return
			}
			if final {
				now := time.Now()
				state, finalized = coordinator.StateCompleted, &now
			}
			_ = json.NewEncoder(w).Encode(apiserver.JobResponse{Job: &coordinator.Job{ID: id, Kind: "echo", Queue: "default", State: state, Errors: []coordinator.AttemptError{}, FinalizedAt: finalized}})
		case "/v1/stats":
			final, done := step(w, statsReads.Add(1))
			if done {
				return
			}
			if final {
				state = coordinator.StateCompleted
			}
			_ = json.NewEncoder(w).Encode(apiserver.StatsResponse{Counts: map[coordinator.State]int{state: 1}, Total: 1})
		default:
			apiserver.WriteError(w, http.StatusNotFound, "unexpected request "+r.Method+" "+r.URL.Path)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// cut ends the request's connection without an answer, as a daemon that
// stops does.
func cut(t *testing.T, w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	_ = conn.Close()
}

// A wait that reads through the daemon's connection bound says so, not
// that the store did not answer: the bound's 503 is marked as not
// processed (the store was never asked).
func TestJobsWaitReasonAtConnectionBound(t *testing.T) {
	w := &waitReads{}
	c := &client{server: "http://127.0.0.1:1"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&cliError{code: exitFailure, status: http.StatusServiceUnavailable, notProcessed: true, msg: "refused"}, "the daemon is at its --http-max-connections"},
		{&cliError{code: exitFailure, status: http.StatusServiceUnavailable, msg: "the store did not answer within 10s"}, "the store did not answer in time"},
	} {
		again, err := w.retry(tc.err, c)
		if err != nil || again != tc.want {
			t.Errorf("retry(%q) = %q, %v; want %q", tc.err, again, err, tc.want)
		}
	}
}

// TestJobsWaitPausesAfterAnEarlyAnswer: a draining daemon answers each
// long-poll at once with the job as it is (StopWaits), for as long as its
// drain lasts; jobs wait pauses after each such answer rather than read
// again at once, request after request.
func TestJobsWaitPausesAfterAnEarlyAnswer(t *testing.T) {
	const id = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	const early = 5
	srv := waitDaemon(t, id, func(w http.ResponseWriter, n int32) (final, done bool) {
		return n > early, false
	})
	var pauses atomic.Int32
	defer func(f func(context.Context, time.Duration)) { pause = f }(pause)
	pause = func(context.Context, time.Duration) { pauses.Add(1) }

	code, out, errs := runInProcess("jobs", "wait", id, "--server", srv.URL)
	if code != 0 || out != id+" completed\n" {
		t.Fatalf("jobs wait ID: exit %d, stdout %q, stderr %q; want exit 0 and %q", code, out, errs, id+" completed\n")
	}
	if n := pauses.Load(); n < early {
		t.Errorf("%d pauses after %d answers not final that came at once; want one after each", n, early)
	}
}
