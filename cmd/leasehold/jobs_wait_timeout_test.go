package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// A jobs wait whose --timeout passes still prints the jobs as they are
// (with --json, the same array as on success; else a line per final job),
// counts the jobs that are not final, and exits 1 with one line saying
// what to do. No worker runs, so the waited-for job never becomes final.
// The timeouts are a second, not less: the reads a wait makes after its
// timeout are bounded by it too, and a loaded machine can take longer
// than 50 ms to answer them.
func TestJobsWaitTimeoutPrintsJobsAsTheyAre(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	pending := e.create(t, apiserver.CreateRequest{Kind: "echo"})
	done := e.create(t, apiserver.CreateRequest{Kind: "echo"})
	var cancelled apiserver.JobResponse
	e.doJSON(t, "POST", "/v1/jobs/"+done.ID+"/cancel", nil, 200, &cancelled)
	if cancelled.Job == nil || cancelled.Job.State != coordinator.StateCancelled {
		t.Fatalf("cancel: %+v, want cancelled", cancelled.Job)
	}
	const want = "1 of 2 jobs is not final yet (" // the cancelled one is final

	code, out, errs := runInProcess("jobs", "wait", pending.ID, done.ID, "--json", "--timeout", "1s", "--server", e.srv.URL)
	checkWaitTimeoutError(t, "--json", code, errs, want)
	var jobs []*coordinator.Job
	if err := json.Unmarshal([]byte(out), &jobs); err != nil {
		t.Fatalf("--json at a timeout: stdout is not a JSON array of jobs (%v): %q", err, out)
	}
	if len(jobs) != 2 || jobs[0].ID != pending.ID || jobs[0].State != coordinator.StateAvailable ||
		jobs[1].ID != done.ID || jobs[1].State != coordinator.StateCancelled {
		t.Errorf("--json at a timeout: got %s, want the two jobs in order, available then cancelled", out)
	}

	code, out, errs = runInProcess("jobs", "wait", pending.ID, done.ID, "--timeout", "1s", "--server", e.srv.URL)
	checkWaitTimeoutError(t, "text", code, errs, want)
	if out != done.ID+" cancelled\n" {
		t.Errorf("text at a timeout: stdout %q, want the final job's line only", out)
	}

	code, out, errs = runInProcess("jobs", "wait", "--all", "--json", "--timeout", "1s", "--server", e.srv.URL)
	checkWaitTimeoutError(t, "--all --json", code, errs, "available=1")
	var counts map[coordinator.State]int
	if err := json.Unmarshal([]byte(out), &counts); err != nil {
		t.Fatalf("--all --json at a timeout: stdout is not the counts (%v): %q", err, out)
	}
	if counts[coordinator.StateAvailable] != 1 || counts[coordinator.StateCancelled] != 1 {
		t.Errorf("--all --json at a timeout: counts %v, want available=1 cancelled=1", counts)
	}

	code, out, errs = runInProcess("jobs", "wait", "--all", "--timeout", "1s", "--server", e.srv.URL)
	checkWaitTimeoutError(t, "--all", code, errs, "available=1")
	if want := "not all jobs final: completed=0 discarded=0 cancelled=1\n"; out != want {
		t.Errorf("--all at a timeout: stdout %q, want the counts line, %q", out, want)
	}
}

func checkWaitTimeoutError(t *testing.T, what string, code int, stderr, want string) {
	t.Helper()
	if code != exitFailure {
		t.Errorf("%s: exit %d, want %d", what, code, exitFailure)
	}
	if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "leasehold: jobs wait: timed out") ||
		!strings.Contains(stderr, want) || !strings.Contains(stderr, "raise --timeout or wait again") {
		t.Errorf("%s: stderr %q, want one line saying it timed out with %q and what to do", what, stderr, want)
	}
}

// A wait for one job that times out names it, in the singular.
func TestJobsWaitTimeoutOneJob(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	j := e.create(t, apiserver.CreateRequest{Kind: "echo"})
	code, out, errs := runInProcess("jobs", "wait", j.ID, "--timeout", "1s", "--server", e.srv.URL)
	if out != "" {
		t.Errorf("stdout %q, want nothing: the job is not final", out)
	}
	checkWaitTimeoutError(t, "one job", code, errs, "timed out after 1s: job "+j.ID+" is not final yet: raise --timeout or wait again")
}
