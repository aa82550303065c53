package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/worker"
)

// execJob is a job for calling an --exec handler directly.
func execJob(payload string) *worker.Job {
	return &worker.Job{Job: coordinator.Job{ID: "01JF00000000000000000000EX", Kind: "t", Attempt: 1, Payload: json.RawMessage(payload)}}
}

// lifeLine is a FIFO that the processes of a test command hold open for
// writing: started is closed when one of them writes a byte to it, gone
// once none of them holds it any more, that is once they have all
// exited. pidFile is where the command writes the pid to kill if the test
// fails.
type lifeLine struct {
	path, pidFile  string
	started, gone  chan struct{}
	readerFinished chan struct{}
}

func newLifeLine(t *testing.T) *lifeLine {
	t.Helper()
	dir := t.TempDir()
	l := &lifeLine{
		path: filepath.Join(dir, "life"), pidFile: filepath.Join(dir, "pid"),
		started: make(chan struct{}), gone: make(chan struct{}), readerFinished: make(chan struct{}),
	}
	if err := syscall.Mkfifo(l.path, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(l.readerFinished)
		defer close(l.gone)
		f, err := os.Open(l.path) // until a writer opens it
		if err != nil {
			return
		}
		defer f.Close()
		var b [1]byte
		if n, _ := f.Read(b[:]); n == 1 {
			close(l.started)
		}
		_, _ = io.Copy(io.Discard, f) // EOF once every writer has exited
	}()
	t.Cleanup(func() {
		// Kill a survivor, and unblock the reader if no writer ever came.
		if b, err := os.ReadFile(l.pidFile); err == nil {
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if f, err := os.OpenFile(l.path, os.O_RDWR|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
		<-l.readerFinished
	})
	return l
}

// waitGone fails the test unless every holder of the FIFO exits soon.
func (l *lifeLine) waitGone(t *testing.T, what string) {
	t.Helper()
	select {
	case <-l.gone:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: a process of the command's group survived the end of the job", what)
	}
}

// A process of the command's group that ignores SIGTERM while the shell
// obeys it, and that does not hold the command's output open, must not
// outlive a cancelled job.
func TestExecCancelKillsWholeGroup(t *testing.T) {
	old := execKillGrace
	execKillGrace = 200 * time.Millisecond
	t.Cleanup(func() { execKillGrace = old })
	l := newLifeLine(t)
	spec, err := parseExec(fmt.Sprintf(`t=exec 3>%s; (trap "" TERM; echo >&3; exec sleep 1000) >/dev/null 2>&1 </dev/null & echo $! >%s; wait`, l.path, l.pidFile))
	if err != nil {
		t.Fatal(err)
	}
	h := execHandler(spec, testutil.QuietLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- h(ctx, execJob(`{}`)) }()
	<-l.started
	cancel()
	err = <-errc
	if err == nil || !strings.Contains(err.Error(), "command stopped") {
		t.Errorf("cancelled command: %v, want a 'command stopped' error", err)
	}
	l.waitGone(t, "cancelled job")
}

// A command that exits leaving a background process behind does not leave
// it running after its job.
func TestExecLeftoverProcessesStopped(t *testing.T) {
	old := execKillGrace
	execKillGrace = 200 * time.Millisecond
	t.Cleanup(func() { execKillGrace = old })
	l := newLifeLine(t)
	spec, err := parseExec(fmt.Sprintf(`t=exec 3>%s; (trap "" TERM; echo >&3; exec sleep 1000) >/dev/null 2>&1 </dev/null & echo $! >%s; echo '{"ok":true}'`, l.path, l.pidFile))
	if err != nil {
		t.Fatal(err)
	}
	j := execJob(`{}`)
	if err := execHandler(spec, testutil.QuietLogger(t))(context.Background(), j); err != nil {
		t.Fatalf("command failed: %v", err)
	}
	l.waitGone(t, "completed job")
}

// A second signal stops the daemon at once; the commands of its running
// jobs must not outlive it (they run in process groups of their own, which
// neither the terminal's ^C nor the daemon's death reaches).
func TestDaemonSecondSignalKillsCommands(t *testing.T) {
	l := newLifeLine(t)
	hold := fmt.Sprintf(`hold=exec 3>%s; echo >&3; sleep 1000 & echo $! >%s; wait`, l.path, l.pidFile)
	p := spStart(t, "daemon", binPath, "daemon", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--log-format", "json",
		"--exec", hold, "--shutdown-timeout", "1h")
	ln, _ := p.waitLog(t, 0, "listening", func(l spLine) bool { return l.Msg == "listening" })
	code, body := postBody(t, "http://"+ln.str("addr")+"/v1/jobs", `{"kind":"hold"}`)
	if code != http.StatusCreated {
		t.Fatalf("enqueue: %d %s", code, body)
	}
	<-l.started
	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, 0, "the stop", func(l spLine) bool { return strings.HasPrefix(l.Msg, "stopping: signal received") })
	p.signal(t, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(spWait):
		t.Fatalf("the daemon did not stop at a second signal:\n%s", p.log)
	}
	l.waitGone(t, "daemon stopped by a second signal")
}

// A daemon killed by SIGKILL cannot stop the commands of its running jobs
// itself; its exec guard must, at once, so that they do not run beside
// the runs that replace them (a restarted embedded daemon re-queues the
// job at once).
func TestDaemonKilledKillsCommands(t *testing.T) {
	l := newLifeLine(t)
	hold := fmt.Sprintf(`hold=exec 3>%s; echo >&3; sleep 1000 & echo $! >%s; wait`, l.path, l.pidFile)
	p := spStart(t, "daemon", binPath, "daemon", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--log-format", "json",
		"--exec", hold)
	ln, _ := p.waitLog(t, 0, "listening", func(l spLine) bool { return l.Msg == "listening" })
	code, body := postBody(t, "http://"+ln.str("addr")+"/v1/jobs", `{"kind":"hold"}`)
	if code != http.StatusCreated {
		t.Fatalf("enqueue: %d %s", code, body)
	}
	guard := guardPid(t, p)
	<-l.started
	p.signal(t, syscall.SIGKILL)
	<-p.done
	l.waitGone(t, "daemon killed by SIGKILL")
	guard.waitExit(t, "the guard of a daemon killed by SIGKILL")
}

// A daemon that stops leaves no guard behind.
func TestDaemonStopEndsExecGuard(t *testing.T) {
	p := spStart(t, "daemon", binPath, "daemon", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--log-format", "json",
		"--exec", "t=true")
	p.waitLog(t, 0, "listening", func(l spLine) bool { return l.Msg == "listening" })
	guard := guardPid(t, p)
	p.signal(t, syscall.SIGTERM)
	<-p.done
	guard.waitExit(t, "the guard of a stopped daemon")
}

// procExit tells when a process that need not be the test's child exits.
type procExit struct{ fd int }

// guardPid finds the exec guard in the log of daemon p.
func guardPid(t *testing.T, p *spProc) procExit {
	t.Helper()
	l, _ := p.waitLog(t, 0, "exec guard", func(l spLine) bool { return strings.HasPrefix(l.Msg, "exec guard started") })
	pid, err := strconv.Atoi(l.str("pid"))
	if err != nil {
		t.Fatalf("exec guard's pid: %q", l.Raw)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("exec guard %d: %v", pid, err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	return procExit{fd}
}

// waitExit fails the test unless the process exits soon: its pidfd
// becomes readable when it does.
func (e procExit) waitExit(t *testing.T, what string) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(spWait/time.Millisecond))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			t.Fatalf("%s: poll: %v", what, err)
		case n == 0:
			t.Fatalf("%s is still running after %s", what, spWait)
		}
		return
	}
}
