package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
)

// execGuardArg, as the only argument, runs the binary as a daemon's exec
// guard (execGuard) instead of the command line.
const execGuardArg = "__exec-guard"

// execGuard is the process that a daemon with --exec kinds starts beside
// itself, so that the commands of its jobs do not outlive it however it
// dies. They run in process groups of their own, which a SIGKILL of the
// daemon does not reach; without the guard they would go on beside the
// runs that replace them (at once in embedded mode, after the lease's TTL
// in shared mode).
//
// The daemon writes "+PGID" to the guard's stdin, a pipe, when a command's
// group starts and "-PGID" once it has ended. When the pipe ends — the
// daemon closed it at its stop, or exited, or was killed — the guard
// SIGKILLs every group still listed and exits. SIGINT, SIGTERM and SIGHUP
// are the daemon's to act on: the guard ignores them, and it runs in a
// process group of its own, out of reach of the terminal's ^C.
func execGuard(in io.Reader) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	groups := map[int]bool{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 2 {
			continue
		}
		pgid, err := strconv.Atoi(line[1:])
		if err != nil || pgid <= 1 {
			continue
		}
		switch line[0] {
		case '+':
			groups[pgid] = true
		case '-':
			delete(groups, pgid)
		}
	}
	for pgid := range groups {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	return exitOK
}

// startExecGuard starts the daemon's exec guard (execGuard) and has
// execGroups report to it. The returned function, called once the worker
// has stopped, ends the guard and waits for it.
func startExecGuard(stderr io.Writer, log *slog.Logger) (stop func(), err error) {
	// Before the guard and any command start: neither gets what the
	// daemon inherited.
	if err := inheritedFDsCloseOnExec(); err != nil {
		log.Warn("--exec commands may inherit descriptors this daemon inherited (a supervisor waiting for EOF on one waits for them too)", slog.Any("err", err))
	}
	// This very binary, even if it was replaced on disk since it started
	// (an upgrade in progress); its path where there is no /proc.
	self := "/proc/self/exe"
	if _, err := os.Stat(self); err != nil {
		if self, err = os.Executable(); err != nil {
			return nil, failf("cannot start the guard of --exec commands: cannot find this program's path: %v", err)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, failf("cannot start the guard of --exec commands: %v", err)
	}
	cmd := exec.Command(self, execGuardArg)
	cmd.Args[0] = os.Args[0] // ps shows what started the daemon, not /proc/self/exe
	cmd.Stdin, cmd.Stderr = r, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	_ = r.Close() // the guard's now; the daemon keeps only the write end
	if err != nil {
		_ = w.Close()
		return nil, failf("cannot start the guard of --exec commands: %v", err)
	}
	log.Info("exec guard started: commands of running jobs are killed if this daemon dies", slog.Int("pid", cmd.Process.Pid))
	execGroups.setGuard(w, log)
	exited := make(chan struct{})
	stopping := make(chan struct{})
	go func() {
		defer close(exited)
		err := cmd.Wait()
		select {
		case <-stopping:
		default:
			log.Error("exec guard exited: commands of running jobs would outlive this daemon if it were killed", slog.Any("err", err))
			execGroups.setGuard(nil, log)
		}
	}()
	return func() {
		close(stopping)
		execGroups.setGuard(nil, log)
		_ = w.Close()
		<-exited
	}, nil
}

// tellGuard writes op ('+' or '-') and pgid to the guard, if there is
// one. Call with s.mu held.
func (s *groupSet) tellGuard(op byte, pgid int) {
	if s.guard == nil {
		return
	}
	if _, err := fmt.Fprintf(s.guard, "%c%d\n", op, pgid); err != nil {
		s.log.Error("cannot reach the exec guard: commands of running jobs would outlive this daemon if it were killed", slog.Any("err", err))
		s.guard = nil
	}
}

// setGuard has s report the groups it adds and removes to w, the guard's
// stdin; nil stops that. The groups listed already are reported at once.
func (s *groupSet) setGuard(w io.Writer, log *slog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.guard, s.log = w, log
	for pgid := range s.groups {
		s.tellGuard('+', pgid)
	}
}
