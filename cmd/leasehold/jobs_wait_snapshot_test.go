package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// At a jobs wait timeout, a job that cannot be read does not hide the jobs
// after it: each is read (a final one printed, counted as final), and the
// message names the job that could not be read and why.
func TestJobsWaitTimeoutReadsEveryJob(t *testing.T) {
	const (
		pending = "01ARZ3NDEKTSV4RRFFQ69G5FA1"
		broken  = "01ARZ3NDEKTSV4RRFFQ69G5FA2"
		done    = "01ARZ3NDEKTSV4RRFFQ69G5FA3"
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/v1/jobs/")
		switch {
		case r.Method != http.MethodGet:
			apiserver.WriteError(w, http.StatusNotFound, "unexpected request "+r.Method+" "+r.URL.Path)
		case id == pending:
			apiserver.WriteJSON(w, http.StatusOK, apiserver.JobResponse{Job: &coordinator.Job{ID: id, Kind: "k", State: coordinator.StateAvailable}})
		case id == done:
			apiserver.WriteJSON(w, http.StatusOK, apiserver.JobResponse{Job: &coordinator.Job{ID: id, Kind: "k", State: coordinator.StateCompleted}})
		default:
			apiserver.WriteError(w, http.StatusInternalServerError, "store unavailable")
		}
	}))
	defer srv.Close()

	code, out, errs := runInProcess("jobs", "wait", pending, broken, done, "--timeout", "50ms", "--server", srv.URL)
	checkWaitTimeoutError(t, "text", code, errs, "2 of 3 jobs are not final yet ("+pending+" first")
	if !strings.Contains(errs, broken) || !strings.Contains(errs, "store unavailable") {
		t.Errorf("text: stderr %q does not name job %s that could not be read, and why", errs, broken)
	}
	if out != done+" completed\n" {
		t.Errorf("text: stdout %q, want the line of the final job after the unreadable one", out)
	}

	code, out, errs = runInProcess("jobs", "wait", pending, broken, done, "--json", "--timeout", "50ms", "--server", srv.URL)
	checkWaitTimeoutError(t, "--json", code, errs, "2 of 3 jobs are not final yet (")
	var jobs []*coordinator.Job
	if err := json.Unmarshal([]byte(out), &jobs); err != nil {
		t.Fatalf("--json: stdout is not a JSON array of jobs (%v): %q", err, out)
	}
	if len(jobs) != 2 || jobs[0].ID != pending || jobs[1].ID != done || jobs[1].State != coordinator.StateCompleted {
		t.Errorf("--json: got %s, want the two jobs that could be read, in order", out)
	}
}
