package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/testutil"
)

// A bulk cancel that fails part way answers, beside its error, the jobs
// it cancelled and asked to stop before (cancelled, cancel_requested):
// 'jobs cancel --all' says them on its error line, where it said only the
// error, and a user who read it could not tell whether anything was done.
func TestCLICancelManyFailingPartWaySaysWhatItDid(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/health":
			apiserver.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		case "/v1/jobs/cancel":
			w.Header().Set("Retry-After", "1")
			apiserver.WriteJSON(w, http.StatusServiceUnavailable, apiserver.CancelManyErrorResponse{
				Error:            "the store did not answer within 10s: the outcome is unknown, the change may or may not have been made: check, then retry later",
				CancelManyResult: coordinator.CancelManyResult{Cancelled: 3, CancelRequested: 1},
			})
		default:
			apiserver.WriteError(w, http.StatusNotFound, "unexpected request "+r.Method+" "+r.URL.Path)
		}
	}))
	defer srv.Close()
	code, out, errs := runInProcess("jobs", "cancel", "--all", "--server", srv.URL)
	r := cliResult{code: code, stdout: out, stderr: errs}
	checkOneLineError(t, "a daemon's bulk cancel failing part way", r, exitFailure, "cancelled 3 jobs and requested the cancel of 1 running job before it failed: the store did not answer")
	if !strings.Contains(r.stderr, "the outcome is unknown") {
		t.Errorf("stderr %q no longer says that the outcome is unknown", r.stderr)
	}

	// In shared mode (--etcd) the CLI serves the API in process
	// (newCLIAPI): its error answer carries the counts the same way. Here
	// a store whose read of the timers index fails, after the queue's
	// available jobs were cancelled.
	log := testutil.QuietLogger(t)
	coord, err := coordinator.New(timersFail{testutil.TempLocal(t, log)}, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := coord.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "echo"}); err != nil {
			t.Fatal(err)
		}
	}
	shared := httptest.NewServer(newCLIAPI(coord))
	defer shared.Close()
	code, out, errs = runInProcess("jobs", "cancel", "--all", "--server", shared.URL)
	r = cliResult{code: code, stdout: out, stderr: errs}
	checkOneLineError(t, "the in-process API's bulk cancel failing part way", r, exitFailure, "cancelled 2 jobs and requested the cancel of 0 running jobs before it failed: ")
	if !strings.Contains(r.stderr, errTimersFail.Error()) {
		t.Errorf("stderr %q does not say the store's error", r.stderr)
	}
}

var errTimersFail = errors.New("timers index unreadable")

// timersFail is a store whose reads of the timers index (scheduled and
// retryable jobs) fail.
type timersFail struct{ kv.Store }

func (s timersFail) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if strings.HasSuffix(r.Start, "/t/") {
		return kv.RangeResult{}, errTimersFail
	}
	return s.Store.Range(ctx, r)
}
