package main

import (
	"testing"

	"github.com/leasehold/leasehold/internal/apiserver"
)

// A bulk cancel counts in good English: "1 job", not "1 jobs".
func TestJobsCancelManyCountsOneJob(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	e.create(t, apiserver.CreateRequest{Kind: "echo"})
	code, out, errs := runInProcess("jobs", "cancel", "--all", "--server", e.srv.URL)
	if want := "cancelled 1 job; cancel requested for 0 running jobs (their daemons stop them)\n"; code != 0 || out != want {
		t.Errorf("jobs cancel --all of one job: exit %d, stdout %q, stderr %q; want %q", code, out, errs, want)
	}
	if got := nJobs(1, "running "); got != "1 running job" {
		t.Errorf("nJobs(1, running) = %q", got)
	}
}
