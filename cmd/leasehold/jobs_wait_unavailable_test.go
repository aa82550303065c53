package main

import (
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
	var jobReads, statsReads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		unavailable := func() {
			w.Header().Set("Retry-After", "1")
			apiserver.WriteError(w, http.StatusServiceUnavailable, "the store did not answer within 10s (etcd unreachable or without quorum?): retry later")
		}
		switch r.URL.Path {
		case "/v1/jobs/" + id:
			if jobReads.Add(1) <= 2 {
				unavailable()
				return
			}
			now := time.Now()
			_ = json.NewEncoder(w).Encode(apiserver.JobResponse{Job: &coordinator.Job{ID: id, Kind: "echo", Queue: "default", State: coordinator.StateCompleted, Errors: []coordinator.AttemptError{}, FinalizedAt: &now}})
		case "/v1/stats":
			if statsReads.Add(1) <= 2 {
				unavailable()
				return
			}
			_ = json.NewEncoder(w).Encode(apiserver.StatsResponse{Counts: map[coordinator.State]int{coordinator.StateCompleted: 1}, Total: 1})
		default:
			apiserver.WriteError(w, http.StatusNotFound, "unexpected request "+r.Method+" "+r.URL.Path)
		}
	}))
	defer srv.Close()

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
	var jobReads, statsReads atomic.Int32
	cut := func(w http.ResponseWriter) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = conn.Close()
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		switch r.URL.Path {
		case "/v1/jobs/" + id:
			switch n := jobReads.Add(1); {
			case n == 1:
				_ = json.NewEncoder(w).Encode(apiserver.JobResponse{Job: &coordinator.Job{ID: id, Kind: "echo", Queue: "default", State: coordinator.StateRunning, Errors: []coordinator.AttemptError{}}})
			case n <= 5:
				cut(w)
			default:
				_ = json.NewEncoder(w).Encode(apiserver.JobResponse{Job: &coordinator.Job{ID: id, Kind: "echo", Queue: "default", State: coordinator.StateCompleted, Errors: []coordinator.AttemptError{}, FinalizedAt: &now}})
			}
		case "/v1/stats":
			switch n := statsReads.Add(1); {
			case n == 1:
				_ = json.NewEncoder(w).Encode(apiserver.StatsResponse{Counts: map[coordinator.State]int{coordinator.StateRunning: 1}, Total: 1})
			case n <= 5:
				cut(w)
			default:
				_ = json.NewEncoder(w).Encode(apiserver.StatsResponse{Counts: map[coordinator.State]int{coordinator.StateCompleted: 1}, Total: 1})
			}
		default:
			apiserver.WriteError(w, http.StatusNotFound, "unexpected request "+r.Method+" "+r.URL.Path)
		}
	}))
	defer srv.Close()

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
	var reads atomic.Int32
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if reads.Add(1) == 1 {
			_ = json.NewEncoder(w).Encode(apiserver.JobResponse{Job: &coordinator.Job{ID: id, Kind: "echo", Queue: "default", State: coordinator.StateRunning, Errors: []coordinator.AttemptError{}}})
			return
		}
		once.Do(func() { close(gone) })
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			_ = conn.Close()
		}
	}))
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
