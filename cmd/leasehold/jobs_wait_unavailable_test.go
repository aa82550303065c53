package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
