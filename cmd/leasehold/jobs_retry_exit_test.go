package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// A retry refused because the job's record has grown too large to run
// again (coordinator ErrInvalid, answered 400 like bad input) is a failure
// of the operation, exit 1: the id given was fine. A bad id stays a usage
// error, exit 2.
func TestJobsRetryTooLargeIsAFailure(t *testing.T) {
	const id = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	refusal := fmt.Errorf("%w: job %s is too large to run again (its record and its queue's copy take 1600000 bytes, the store takes 1500000 in one request): enqueue a new job with a smaller payload", coordinator.ErrInvalid, id)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/jobs/"+id+"/retry" {
			apiserver.WriteError(w, http.StatusNotFound, "unexpected request "+r.Method+" "+r.URL.Path)
			return
		}
		apiserver.WriteError(w, http.StatusBadRequest, apiserver.CleanCoordError(refusal)) // as api.fail answers ErrInvalid
	}))
	defer srv.Close()

	code, out, errs := runInProcess("jobs", "retry", id, "--server", srv.URL)
	checkOneLineError(t, "retry of a job too large to run again", cliResult{stdout: out, stderr: errs, code: code}, exitFailure, "too large to run again")

	code, out, errs = runInProcess("jobs", "retry", "not-an-id", "--server", srv.URL)
	checkOneLineError(t, "retry of a bad id", cliResult{stdout: out, stderr: errs, code: code}, exitUsage, "leasehold jobs list")
}
