package main

import (
	"strings"
	"syscall"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
)

// SIGHUP (a terminal that hangs up: an ssh session that drops) stops the
// daemon gracefully, as SIGTERM does: exit 0, its running job released,
// nothing left running for the next start to re-queue. It used to end the
// daemon at once, as a crash.
func TestDaemonStopsGracefullyAtHangup(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, "--shutdown-timeout", "100ms")
	id := strings.TrimSpace(okCLI(t, "enqueue", "sleep", `{"ms":60000}`, "--server", d.server))
	waitStateCLI(t, d.server, id, coordinator.StateRunning)
	if code := d.stop(t, syscall.SIGHUP); code != 0 {
		t.Fatalf("exit code %d after SIGHUP, want 0 (a graceful stop):\n%s", code, d.log)
	}
	e := startDaemon(t, dir, "--shutdown-timeout", "100ms")
	if n := e.log.requeued(); n > 0 {
		t.Errorf("the next start re-queued %d jobs left running: SIGHUP did not stop the daemon gracefully", n)
	}
	if j := getJobCLI(t, e.server, id); j.Attempt > 2 || j.State.Final() {
		t.Errorf("released job: state %s attempt %d", j.State, j.Attempt)
	}
}
