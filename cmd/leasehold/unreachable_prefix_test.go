package main

import (
	"testing"
)

// An unreachable daemon is reported like every other error: after
// "leasehold: " and the command's name.
func TestUnreachableDaemonErrorNamesCommand(t *testing.T) {
	srv := "http://" + closedPort(t)
	for _, tc := range []struct {
		cmd  string
		args []string
	}{
		{"enqueue", []string{"enqueue", "echo"}},
		{"jobs list", []string{"jobs", "list"}},
		{"jobs wait", []string{"jobs", "wait", "--all"}},
		{"workers list", []string{"workers", "list"}},
	} {
		code, out, errs := runInProcess(append(tc.args, "--server", srv)...)
		want := "leasehold: " + tc.cmd + ": cannot reach the daemon at " + srv + ": is 'leasehold daemon' running? (set --server)\n"
		if code != exitFailure || out != "" || errs != want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", tc.args, code, out, errs, want)
		}
	}
}
