package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testutil"
	"golang.org/x/sys/unix"
)

// A command that exits 0 leaving a background process that still holds
// its output (the README's `cmd &`) completes its job: exit 0 is success,
// and the process left behind is stopped.
func TestExecLeftoverHoldingOutputSucceeds(t *testing.T) {
	old := execKillGrace
	execKillGrace = 200 * time.Millisecond
	t.Cleanup(func() { execKillGrace = old })
	l := newLifeLine(t)
	spec, err := parseExec(fmt.Sprintf(`t=exec 3>%s; (echo >&3; exec sleep 1000) & echo $! >%s; echo '{"ok":true}'`, l.path, l.pidFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := execHandler(spec, testutil.QuietLogger(t))(context.Background(), execJob(`{}`)); err != nil {
		t.Errorf("command exited 0 leaving a process that holds its output: %v, want success", err)
	}
	l.waitGone(t, "completed job")
}

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

func setSubreaper(on bool) error {
	v := uintptr(0)
	if on {
		v = 1
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, v, 0); e != 0 {
		return e
	}
	return nil
}

// groupEntries lists the processes of group pgid that still have an entry
// in /proc (zombies included), as "pid state".
func groupEntries(t *testing.T, pgid int) []string {
	t.Helper()
	procs, ok := groupProcs(pgid)
	if !ok {
		t.Skip("no /proc")
	}
	return procs
}

// A daemon run as PID 1 (in a container) or as a subreaper inherits the
// processes its commands leave behind: once they are stopped it must reap
// them, or each stays a zombie holding a pid for the daemon's lifetime.
func TestExecReapsLeftoversItInherits(t *testing.T) {
	old := execKillGrace
	execKillGrace = 200 * time.Millisecond
	t.Cleanup(func() { execKillGrace = old })
	if err := setSubreaper(true); err != nil {
		t.Skipf("cannot become a subreaper: %v", err)
	}
	t.Cleanup(func() { _ = setSubreaper(false) })
	dir := t.TempDir()
	pgidFile, pidFile := filepath.Join(dir, "pgid"), filepath.Join(dir, "pid")
	spec, err := parseExec(fmt.Sprintf(`t=echo $$ >%s; sleep 1000 >/dev/null 2>&1 </dev/null & echo $! >%s`, pgidFile, pidFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, 0, nil)
			}
		}
	})
	if err := execHandler(spec, testutil.QuietLogger(t))(context.Background(), execJob(`{}`)); err != nil {
		t.Fatalf("command failed: %v", err)
	}
	b, err := os.ReadFile(pgidFile)
	if err != nil {
		t.Fatal(err)
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if left := groupEntries(t, pgid); len(left) > 0 {
		t.Errorf("processes of the job's group left after it (pid state): %v", left)
	}
}

// A command that exited 0 before its job's context ended (a timeout that
// falls while a process it left behind still holds its output) has
// succeeded: the end of the context does not turn that into a failure,
// which would run the job again.
func TestExecExitedBeforeCancelSucceeds(t *testing.T) {
	old := execKillGrace
	execKillGrace = time.Hour // the process left behind gets no time of its own
	t.Cleanup(func() { execKillGrace = old })
	l := newLifeLine(t)
	shellPid := filepath.Join(t.TempDir(), "shell")
	spec, err := parseExec(fmt.Sprintf(`t=echo $$ >%s; exec 3>%s; echo >&3; (exec sleep 1000) & echo $! >%s; echo '{"ok":true}'`, shellPid, l.path, l.pidFile))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- execHandler(spec, testutil.QuietLogger(t))(ctx, execJob(`{}`)) }()
	<-l.started // the shell wrote its pid first
	b, err := os.ReadFile(shellPid)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if fd, err := unix.PidfdOpen(pid, 0); err == nil { // else already reaped
		t.Cleanup(func() { _ = unix.Close(fd) })
		procExit{fd}.waitExit(t, "the command's shell")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("command exited 0 before its job was cancelled: %v, want success", err)
	}
	l.waitGone(t, "completed job")
}
