package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/apiserver"
)

// TestEnqueueNumberBeyondFloat64: a payload with a number no float64
// holds (1e400, -1e400) is valid JSON, which the daemon takes and keeps
// as written; enqueue sends it rather than call it "not valid JSON", and
// still refuses JSON that is not valid.
func TestEnqueueNumberBeyondFloat64(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	const payload = `{"e":1e400,"m":-1e400,"n":9007199254740993}`
	code, out, errs := runInProcess("enqueue", "echo", payload, "--server", e.srv.URL)
	if code != 0 {
		t.Fatalf("enqueue echo %s: exit %d: %s", payload, code, errs)
	}
	var res apiserver.JobResponse
	e.doJSON(t, http.MethodGet, "/v1/jobs/"+strings.TrimSpace(out), nil, http.StatusOK, &res)
	if res.Job == nil || string(res.Job.Payload) != payload {
		t.Errorf("payload stored as %s, want %s", res.Job.Payload, payload)
	}

	code, out, errs = runInProcess("enqueue", "echo", `{"e":1e}`, "--server", e.srv.URL)
	if code != exitUsage || out != "" || !strings.HasPrefix(errs, "leasehold: enqueue: payload is not valid JSON (invalid character '}' in exponent of numeric literal)") {
		t.Errorf(`enqueue echo {"e":1e}: exit %d, stdout %q, stderr %q; want exit %d and "payload is not valid JSON"`, code, out, errs, exitUsage)
	}
}
