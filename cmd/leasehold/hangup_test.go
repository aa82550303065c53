package main

import (
	"os/exec"
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

// A daemon started with SIGHUP ignored (`nohup leasehold daemon`) keeps
// it ignored: a hangup does not stop it.
func TestDaemonUnderNohupIgnoresHangup(t *testing.T) {
	// exec keeps the shell's pid for the daemon, and the ignored SIGHUP.
	cmd := exec.Command("sh", append([]string{"-c", `trap "" HUP; exec "$0" "$@"`, binPath}, daemonArgs(t.TempDir())...)...)
	d := startDaemonCmd(t, cmd)
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// A daemon stopping at the hangup would refuse this, or be gone.
	id := strings.TrimSpace(okCLI(t, "enqueue", "echo", "--server", d.server))
	okCLI(t, "jobs", "wait", id, "--timeout", "10s", "--server", d.server)
	if code := d.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit code %d after SIGTERM:\n%s", code, d.log)
	}
}
