package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// TestEnqueueAtLimit: --at takes times up to coordinator.MaxScheduledAt,
// 2262-01-01T00:00:00Z itself included (the coordinator clamps retries
// and snoozes to it: it is a time a job can have), and refuses one a
// nanosecond later naming the exact limit, not a whole-second rendering
// that reads as the limit itself.
func TestEnqueueAtLimit(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})

	code, out, errs := runInProcess("enqueue", "echo", "{}", "--at", "2262-01-01T00:00:00Z", "--server", e.srv.URL)
	if code != 0 {
		t.Fatalf("--at 2262-01-01T00:00:00Z: exit %d: %s", code, errs)
	}
	var res apiserver.JobResponse
	e.doJSON(t, http.MethodGet, "/v1/jobs/"+strings.TrimSpace(out), nil, http.StatusOK, &res)
	if res.Job == nil || !res.Job.ScheduledAt.Equal(coordinator.MaxScheduledAt) || res.Job.State != coordinator.StateScheduled {
		b, _ := json.Marshal(res.Job)
		t.Errorf("--at 2262-01-01T00:00:00Z: job %s, want scheduled at %s", b, coordinator.MaxScheduledAt)
	}

	for _, at := range []string{"2262-01-01T00:00:00.000000001Z", "2262-01-01T00:30:00+00:00"} {
		code, out, errs = runInProcess("enqueue", "echo", "{}", "--at", at, "--server", e.srv.URL)
		want := "leasehold: enqueue: --at " + at + " is after 2262-01-01T00:00:00Z, the latest time a job can be scheduled for: use an earlier time\n"
		if code != exitUsage || out != "" || errs != want {
			t.Errorf("--at %s: exit %d, stdout %q, stderr %q; want exit %d and %q", at, code, out, errs, exitUsage, want)
		}
	}
	// Earlier in another zone, though its wall clock reads later.
	if code, _, errs = runInProcess("enqueue", "echo", "{}", "--at", "2262-01-01T00:30:00+01:00", "--server", e.srv.URL); code != 0 {
		t.Errorf("--at 2262-01-01T00:30:00+01:00 (23:30Z the day before): exit %d: %s", code, errs)
	}
	if n := e.total(t); n != 2 {
		t.Errorf("%d jobs stored, want 2", n)
	}
}

// TestEnqueueAtWithoutZone: a --at without a time zone (what date
// +%FT%T prints) is refused, before any request, saying that the zone is
// what is missing, rather than that it is not an RFC 3339 time.
func TestEnqueueAtWithoutZone(t *testing.T) {
	for _, at := range []string{"2030-01-02T15:04:05", "2030-01-02T15:04:05.5"} {
		code, out, errs := runInProcess("enqueue", "echo", "{}", "--at", at, "--server", "http://127.0.0.1:1")
		want := `leasehold: enqueue: --at "` + at + `" has no time zone: add Z for UTC or an offset such as +02:00 (date -u +%FT%TZ, date --iso-8601=seconds)` + "\n"
		if code != exitUsage || out != "" || errs != want {
			t.Errorf("--at %s: exit %d, stdout %q, stderr %q; want exit %d and %q", at, code, out, errs, exitUsage, want)
		}
	}
}
