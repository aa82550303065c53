package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestLongRequestsProbeTheDaemonFirst: 'jobs cancel --all' and 'backup'
// wait up to an hour for their answer, as a large backlog or a copy to
// another filesystem may rightly take that long. A daemon that accepts
// connections but does not answer (stopped with SIGSTOP, hung) held them
// for that hour; they now check that it answers at all (GET /v1/health,
// bounded like any request) and fail at once, exit 1, saying what to do,
// without sending the request.
func TestLongRequestsProbeTheDaemonFirst(t *testing.T) {
	defer func(d time.Duration) { probeTimeout = d }(probeTimeout)
	probeTimeout = 100 * time.Millisecond

	sent := make(chan string, 4)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/health" {
			sent <- r.Method + " " + r.URL.Path
		}
		select { // a daemon that does not answer
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)

	for _, args := range [][]string{
		{"jobs", "cancel", "--all"},
		{"backup", "/nonexistent/leasehold-backup"},
	} {
		done := make(chan cliResult, 1)
		go func() {
			code, out, errs := runInProcess(append(args, "--server", srv.URL)...)
			done <- cliResult{code: code, stdout: out, stderr: errs}
		}()
		var r cliResult
		select {
		case r = <-done:
		case req := <-sent:
			// Sent to a daemon that did not answer: it would wait
			// the hour. Let it go.
			t.Errorf("%s: sent %s to a daemon that does not answer", strings.Join(args, " "), req)
			srv.CloseClientConnections()
			r = <-done
		}
		if r.code != exitFailure || !strings.Contains(r.stderr, "did not answer in time") || r.stdout != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d and \"did not answer in time\"", strings.Join(args, " "), r.code, r.stdout, r.stderr, exitFailure)
		}
	}
}
