package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A jobs wait --all whose store never answers (etcd without quorum, a hung
// daemon) gives up at its --timeout: it does not read again for another
// requestTimeout, and it says that nothing could be read, not that jobs
// are not final.
func TestJobsWaitAllTimeoutNothingRead(t *testing.T) {
	stop := make(chan struct{})
	var reads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reads.Add(1)
		select { // answers only once the client gives up
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })

	code, out, errs := runInProcess("jobs", "wait", "--all", "--timeout", "50ms", "--server", srv.URL)
	if code != exitFailure || out != "" {
		t.Errorf("exit %d, stdout %q; want exit 1 and nothing on stdout (no counts were read)", code, out)
	}
	want := "leasehold: jobs wait: timed out after 50ms: could not read the job counts from the daemon at " + srv.URL + " within the timeout"
	if strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, want) || strings.Contains(errs, "not final") {
		t.Errorf("stderr %q, want one line starting %q", errs, want)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("%d reads of the counts, want 1: a store that did not answer within the timeout is not asked again", n)
	}
}

// jobs wait --all reads the counts every 250 ms, or, when a read takes
// long (the daemon counts every kept job), pauses ten times as long as
// the read took, up to 10 s: a wait over a large namespace must not keep
// the daemon counting all the time.
func TestJobsWaitAllPausesByTheCountsCost(t *testing.T) {
	for _, tc := range []struct{ took, want time.Duration }{
		{0, waitAllPoll},
		{10 * time.Millisecond, waitAllPoll},
		{100 * time.Millisecond, time.Second},
		{400 * time.Millisecond, 4 * time.Second},
		{3 * time.Second, waitAllPollMax},
	} {
		if got := waitAllPause(tc.took); got != tc.want {
			t.Errorf("waitAllPause(%s) = %s, want %s", tc.took, got, tc.want)
		}
	}
}
