package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/jsontext"
	"github.com/leasehold/leasehold/worker"
)

// Limits of --exec kinds.
const (
	// maxExecStdout bounds the stdout kept as a job's result.
	maxExecStdout = 64 << 10
	// execStderrTail is how much of the end of stderr is kept for the
	// error of a failed run.
	execStderrTail = 4 << 10
)

// execKillGrace is how long a cancelled command has between SIGTERM and
// SIGKILL. It stays below the worker's AbandonGrace, so a command that
// ignores SIGTERM is killed before its slot is taken from it.
var execKillGrace = 5 * time.Second

// execLostGrace is the kill grace of a command whose run was lost (its
// daemon's session reached its deadline) when the lease TTL is ttl: half the session's margin,
// the least time between the handler's cancel and the lease's expiry,
// after which another daemon may start the job again. The command must be
// dead by then (at a 30s TTL, 3s; at the 2s minimum, 200ms).
func execLostGrace(ttl time.Duration) time.Duration {
	return min(execKillGrace, coordinator.DefaultLeaseMargin(ttl)/2)
}

// killGrace is how long the command of a job whose context ended has
// between SIGTERM and SIGKILL.
func (s execSpec) killGrace(ctx context.Context) time.Duration {
	if errors.Is(context.Cause(ctx), coordinator.ErrSessionExpired) {
		return s.lostKillGrace()
	}
	return execKillGrace
}

// lostKillGrace is the kill grace of a command whose run was lost.
func (s execSpec) lostKillGrace() time.Duration {
	if s.lostGrace > 0 {
		return min(execKillGrace, s.lostGrace)
	}
	return execKillGrace
}

// execGroupPoll is how often stopLeftovers checks whether the processes a
// command left behind have exited.
const execGroupPoll = 50 * time.Millisecond

// execGate is the shell that precedes every --exec command, the command
// being its $0: it waits for a line on fd 3, which the daemon writes once
// the exec guard has been told of the command's process group, and exits
// without running the command at EOF (the daemon died first, so no guard
// would stop it). Then it becomes `sh -c COMMAND` (same pid, so same
// process group), fd 3 closed: the command runs exactly as without it.
const execGate = `read -r _ <&3 || exit 125; exec sh -c "$0" 3<&-`

// execSpec is one --exec KIND=COMMAND.
type execSpec struct {
	kind    string
	command string
	// lostGrace bounds the kill grace of a lost run (execLostGrace); 0:
	// execKillGrace.
	lostGrace time.Duration
	// maxCheckpoint bounds a checkpoint line the command writes: the
	// store's request limit, which no record exceeds; 0:
	// defaultMaxCheckpointLine.
	maxCheckpoint int
}

// checkpointLineMax is the longest checkpoint line read from the command.
func (s execSpec) checkpointLineMax() int {
	if s.maxCheckpoint > 0 {
		return s.maxCheckpoint
	}
	return defaultMaxCheckpointLine
}

func parseExec(s string) (execSpec, error) {
	kind, command, ok := strings.Cut(s, "=")
	kind, command = strings.TrimSpace(kind), strings.TrimSpace(command)
	if !ok || kind == "" || command == "" {
		return execSpec{}, usagef("--exec %q: want KIND=COMMAND, e.g. --exec 'resize=./resize.sh'", s)
	}
	if err := coordinator.ValidateKind(kind); err != nil {
		return execSpec{}, usagef("--exec %q: %s", s, apiserver.CleanCoordError(err))
	}
	return execSpec{kind: kind, command: command}, nil
}

// execHandler runs spec.command with sh -c for each job: the payload on
// stdin; LEASEHOLD_JOB_ID, LEASEHOLD_ATTEMPT, LEASEHOLD_TOKEN,
// LEASEHOLD_KIND, LEASEHOLD_IDEMPOTENCY_KEY, LEASEHOLD_CHECKPOINT_FD and
// (when an earlier run recorded one) LEASEHOLD_CHECKPOINT_FILE in its
// environment, and its checkpoint socket on fd execCheckpointFD (ADR
// 0034). Exit status 0 completes the job with stdout as its result
// (as JSON if it is UTF-8 JSON text, else as a JSON string); any other status fails
// the attempt with the end of stderr as the error. The command runs in its
// own process group, once the exec guard knows it (execGate); when the
// job's context ends (cancel, timeout, shutdown, lost lease) the group
// gets SIGTERM, then SIGKILL after execKillGrace (after spec.killGrace
// for a lost run, before the lease can expire); so do processes the command leaves in its group when it
// exits (stopLeftovers: an exit 0 is still a success, even if they held
// its output open), and the daemon reaps those it inherited (reapGroup).
func execHandler(spec execSpec, log *slog.Logger) worker.Handler {
	return func(ctx context.Context, j *worker.Job) error {
		// Done by startExecGuard already in a daemon; here for any other
		// caller.
		_ = inheritedFDsCloseOnExec()
		// The last checkpoint, for the command to resume from: a command
		// that cannot be given it would start over, so the attempt fails.
		cpFile, err := writeLastCheckpoint(j)
		if err != nil {
			return fmt.Errorf("exec %s: cannot write the last checkpoint for the command: %w", spec.kind, err)
		}
		if cpFile != "" {
			defer func() { _ = os.Remove(cpFile) }()
		}
		cpConn, cpTheirs, err := checkpointSocket()
		if err != nil {
			return fmt.Errorf("exec %s: cannot start %q: %w", spec.kind, spec.command, err)
		}
		defer func() { _ = cpConn.Close() }()
		// The command waits at execGate until the guard knows its group.
		gate, opener, err := os.Pipe()
		if err != nil {
			_ = cpTheirs.Close()
			return fmt.Errorf("exec %s: cannot start %q: %w", spec.kind, spec.command, err)
		}
		cmd := exec.Command("sh", "-c", execGate, spec.command)
		cmd.ExtraFiles = []*os.File{gate, cpTheirs} // fds 3 and execCheckpointFD
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Stdin = bytes.NewReader(j.Payload)
		stdout := &capBuffer{max: maxExecStdout}
		stderr := &tailBuffer{max: execStderrTail}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.WaitDelay = execKillGrace // see cmd.Wait below
		cmd.Env = execEnv(j, cpFile)
		err = cmd.Start()
		_ = gate.Close() // the shell's now
		_ = cpTheirs.Close()
		if err != nil {
			_ = opener.Close()
			return fmt.Errorf("exec %s: cannot start %q: %w", spec.kind, spec.command, err)
		}
		cpDone := startCheckpoints(cpConn, j, spec.checkpointLineMax(), log)
		// The guard learns of the group before the command runs: a daemon
		// killed before that closes the gate, and the shell exits.
		pgid := cmd.Process.Pid
		if execGroups.add(pgid, j.BootDeadline, spec.lostKillGrace()) {
			_, _ = opener.Write([]byte("\n")) // EPIPE: the shell is gone already
		} else {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		_ = opener.Close()
		// The shell is waited for without being reaped (waitExited): until
		// cmd.Wait reaps it, its zombie keeps pgid from being reused, so
		// the signals below, the guard and killAll reach this job's
		// processes and no one else's.
		exited := make(chan error, 1)
		go func() { exited <- waitExited(pgid) }()
		var xerr error
		var termAt time.Time // when the group got SIGTERM
		grace := execKillGrace
		select {
		case xerr = <-exited:
		case <-ctx.Done():
			if hasExited(pgid) {
				// It ended before its job did, not stopped by us: its
				// own outcome stands.
				xerr = <-exited
				break
			}
			termAt = time.Now()
			grace = spec.killGrace(ctx)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			execGroups.stopping(pgid, grace)
			t := time.NewTimer(grace)
			select {
			case xerr = <-exited:
			case <-t.C:
				log.Warn("command ignored SIGTERM: killing its process group", slog.String("job", j.ID), slog.Int("pgid", pgid))
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				xerr = <-exited
			}
			t.Stop()
		}
		// The checkpoints the command wrote before it exited are recorded
		// (or refused) before its outcome; none is taken after it, even
		// from a process it left that still holds its descriptor.
		endCheckpoints(cpConn)
		<-cpDone
		if xerr == nil {
			stopLeftovers(pgid, termAt, grace, j.ID, log)
		} else {
			// Cannot happen: nothing else reaps the shell. Its group is
			// left as it is rather than signalled under a stale id.
			log.Error("cannot wait for the command's shell: processes it leaves are not stopped", slog.String("job", j.ID), slog.Int("pgid", pgid), slog.Any("err", xerr))
		}
		// Told before the shell is reaped, while pgid is still this job's.
		guardStopped := execGroups.remove(pgid)
		// Grandchildren that escaped the group (setsid) and keep the
		// pipes open do not hold the job once the command has exited.
		werr := cmd.Wait()
		reapGroup(pgid)

		if !termAt.IsZero() {
			return fmt.Errorf("exec %s: command stopped (%w): %s", spec.kind, context.Cause(ctx), describeExit(werr, stderr))
		}
		if guardStopped && werr != nil {
			return fmt.Errorf("exec %s: command stopped by the exec guard at its session's deadline, which passed without a renewal (was this daemon paused?): %s", spec.kind, describeExit(werr, stderr))
		}
		if errors.Is(werr, exec.ErrWaitDelay) {
			// The command exited 0; a process that left its group
			// held its output open.
			werr = nil
		}
		if werr != nil {
			return fmt.Errorf("exec %s: %s", spec.kind, describeExit(werr, stderr))
		}
		out := bytes.TrimSpace(stdout.buf.Bytes())
		switch {
		case len(out) == 0:
			return nil
		case stdout.truncated:
			log.Warn("command output over the limit: result truncated", slog.String("job", j.ID), slog.Int("limit", maxExecStdout))
			return j.SetResult(string(out) + " [truncated]")
		case json.Valid(out) && utf8.Valid(out) && jsontext.LoneSurrogate(out) < 0:
			// JSON text that every reader takes: json.Valid also takes
			// invalid UTF-8 (a tool's Latin-1) and surrogates escaped
			// alone, which the store refuses in a result.
			return j.SetResult(json.RawMessage(out))
		default:
			return j.SetResult(string(out))
		}
	}
}

// inheritedFDsCloseOnExec marks every descriptor above stderr
// close-on-exec, once, so that a command or the exec guard gets only
// stdin, stdout, stderr and what is passed to it on purpose (ExtraFiles,
// which exec duplicates in the child). Go opens its own descriptors
// close-on-exec; the others are those the daemon inherited from its parent
// without it (a supervisor's pipe or socket), and a long-running command
// holding one would keep that parent waiting for EOF on it. The daemon's
// own use of them is unaffected.
var inheritedFDsCloseOnExec = sync.OnceValue(func() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	// Linux before 5.11: one at a time.
	dir, derr := os.ReadDir("/proc/self/fd")
	if derr != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %v; listing /proc/self/fd: %w", err, derr)
	}
	for _, e := range dir {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd) // EBADF for the directory's own fd, closed since
		}
	}
	return nil
})

// execGroups are the process groups of the commands running now.
var execGroups = &groupSet{groups: map[int]*execGroup{}}

// groupSet is a set of process groups that can be killed all at once, and
// that the exec guard is told of.
type groupSet struct {
	mu     sync.Mutex
	groups map[int]*execGroup
	killed bool // by killAll: no group is added any more

	guard io.Writer    // the exec guard's stdin (execGuard), or nil
	log   *slog.Logger // says when the guard cannot be reached
	tmp   string       // the commands' temporary files' directory, which the guard removes; "": the system's
}

// execGroup is one command's process group, as the guard knows it.
type execGroup struct {
	// deadline reads the boot time until which the run is the daemon's
	// (worker.Job.BootDeadline); nil when it has none (embedded mode).
	deadline  func() (time.Duration, bool)
	grace     time.Duration // the kill grace of a lost run
	told      time.Duration // the deadline the guard was last told; 0: none
	stopping  bool          // the daemon sent the group SIGTERM
	stopGrace time.Duration // and kills it after that
}

// execGuardTell is how often a moved deadline is told to the guard at
// most: far below the time between a session's renewals, which each move
// it by a third of the TTL, leaving the guard two thirds of it. A renewal
// acknowledged just before the deadline D must reach the guard before it
// acts, at D + G/2 (G the lost run's grace): tellEvery makes it more often
// where G is short.
const execGuardTell = 200 * time.Millisecond

// minGuardTell bounds how often deadlines are told to the guard.
const minGuardTell = 10 * time.Millisecond

// tellEvery is how often forwardDeadlines looks for moved deadlines: at
// most execGuardTell, and four times in the guard's slack G/2 of every
// group with a deadline (at the 2 s minimum TTL, G/2 is 100 ms).
func (s *groupSet) tellEvery() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	every := execGuardTell
	for _, g := range s.groups {
		if g.deadline != nil {
			every = min(every, g.grace/8)
		}
	}
	return max(every, minGuardTell)
}

// add adds pgid, the group of a command whose run is the daemon's until
// deadline (nil: no deadline), with grace its kill grace once lost; unless
// killAll was called: then it reports false.
func (s *groupSet) add(pgid int, deadline func() (time.Duration, bool), grace time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.killed {
		return false
	}
	g := &execGroup{grace: grace}
	if deadline != nil {
		if d, ok := deadline(); ok {
			g.deadline, g.told = deadline, d
		}
	}
	s.groups[pgid] = g
	s.tellAdded(pgid, g)
	return true
}

// stopping tells the guard that the daemon sent group pgid SIGTERM, and
// kills it after grace: it does so itself if it is paused meanwhile.
func (s *groupSet) stopping(pgid int, grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[pgid]; g != nil && !g.stopping {
		g.stopping, g.stopGrace = true, grace
		s.tellGuard(fmt.Sprintf("~%d %d", pgid, max(grace, 1)))
	}
}

// remove removes pgid, and reports whether the guard may have stopped its
// command: the deadline it was last told had passed by the guard's
// reckoning, and the daemon had not stopped the group itself.
func (s *groupSet) remove(pgid int) (guardMayHaveStopped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[pgid]; g != nil && g.told != 0 && !g.stopping {
		guardMayHaveStopped = bootTime() >= g.told+g.grace/2
	}
	delete(s.groups, pgid)
	s.tellGuard(fmt.Sprintf("-%d", pgid))
	return guardMayHaveStopped
}

// forwardDeadlines tells the guard each group's deadline as renewals move
// it, every tellEvery, until stop is closed. A group the daemon is
// stopping too: the guard kills it at its deadline if the daemon, paused,
// does not first.
func (s *groupSet) forwardDeadlines(stop <-chan struct{}) {
	tick := time.NewTimer(s.tellEvery())
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		tick.Reset(s.tellEvery())
		s.mu.Lock()
		for pgid, g := range s.groups {
			if g.deadline == nil {
				continue
			}
			if d, ok := g.deadline(); ok && d > g.told {
				g.told = d
				s.tellGuard(fmt.Sprintf("=%d %d", pgid, d))
			}
		}
		s.mu.Unlock()
	}
}

// killAll sends SIGKILL to every group, and to every group added later:
// the daemon is about to exit at once, and the commands of its jobs run
// in process groups of their own, which its death does not reach.
func (s *groupSet) killAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killed = true
	for pgid := range s.groups {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// stopLeftovers ends what is left of process group pgid once its leader,
// the command's shell, has exited: a background child, or one that ignores
// SIGTERM although the shell obeyed it. They get SIGTERM (unless termAt
// says when they already did), then SIGKILL once grace has passed since.
// No process of a job outlives it.
func stopLeftovers(pgid int, termAt time.Time, grace time.Duration, job string, log *slog.Logger) {
	if !groupAlive(pgid) {
		return
	}
	if termAt.IsZero() {
		log.Warn("command exited leaving processes in its group: stopping them", slog.String("job", job), slog.Int("pgid", pgid))
		termAt = time.Now()
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		execGroups.stopping(pgid, grace)
	}
	// Nothing says when the last of them exits: look every execGroupPoll.
	tick := time.NewTicker(execGroupPoll)
	defer tick.Stop()
	for time.Since(termAt) < grace {
		<-tick.C
		if !groupAlive(pgid) {
			return
		}
	}
	log.Warn("processes left by the command ignored SIGTERM: killing its process group", slog.String("job", job), slog.Int("pgid", pgid))
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	// Wait for them to die (SIGKILL is not synchronous), so that
	// reapGroup finds them exited; one stuck in the kernel is left.
	for killed := time.Now(); time.Since(killed) < execKillGrace && groupAlive(pgid); {
		<-tick.C
	}
}

// waitExited waits for process pid, a child, to exit, and leaves it to be
// reaped (by cmd.Wait): its zombie keeps its pid, and so the id of the
// process group it leads, from being reused until then.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// hasExited reports whether process pid, a child not yet reaped, has
// exited, without reaping it.
func hasExited(pid int) bool {
	for {
		var info unix.Siginfo // Signo stays 0 if it has not exited
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return err == nil && info.Signo != 0
		}
	}
}

// reapGroup reaps the exited processes of group pgid whose parent is now
// the daemon. The processes a command leaves behind become the children of
// the nearest subreaper when their parent exits: init, or the daemon
// itself when it runs as PID 1 (in a container) or as a subreaper. Nobody
// else would reap those, and each would stay a zombie holding a pid. Call
// it once the command's shell has been waited for.
func reapGroup(pgid int) {
	for {
		pid, err := syscall.Wait4(-pgid, nil, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil || pid <= 0:
			return // ECHILD: none is the daemon's child; 0: none has exited
		}
	}
}

// groupAlive reports whether process group pgid has a process that has
// not exited. Zombies do not count: the command's shell stays one until
// cmd.Wait reaps it, and an orphan that exited until init reaps it, which
// some inits (and a daemon run as PID 1) never do.
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	procs, ok := groupProcs(pgid)
	if !ok {
		return true // no /proc (a daemon cannot start its guard then): a zombie counts
	}
	for _, p := range procs {
		if !strings.HasSuffix(p, " Z") {
			return true
		}
	}
	return false
}

// groupProcs lists the processes of group pgid that have an entry in
// /proc, zombies included, as "PID STATE"; ok is false without /proc.
func groupProcs(pgid int) (procs []string, ok bool) {
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	want := strconv.Itoa(pgid)
	for _, e := range dir {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold anything.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) >= 3 && f[2] == want {
			procs = append(procs, e.Name()+" "+f[0])
		}
	}
	return procs, true
}

// describeExit says how a command ended, with the last lines of stderr.
func describeExit(err error, stderr *tailBuffer) string {
	var how string
	var ee *exec.ExitError
	switch {
	case err == nil:
		how = "exited with status 0"
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			how = "killed by signal " + ws.Signal().String()
		} else {
			how = fmt.Sprintf("exited with status %d", ee.ExitCode())
		}
	case errors.Is(err, exec.ErrWaitDelay):
		how = "exited, but its children kept its output open"
	default:
		how = err.Error()
	}
	if tail := lastLines(stderr.Bytes(), 3, 512); tail != "" {
		return how + ": " + tail
	}
	return how + " (no stderr output)"
}

// lastLines returns the last n non-empty lines of b joined by " | ", at
// most max bytes.
func lastLines(b []byte, n, max int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var keep []string
	for i := len(lines) - 1; i >= 0 && len(keep) < n; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			keep = append([]string{l}, keep...)
		}
	}
	s := strings.Join(keep, " | ")
	if len(s) > max {
		s = "..." + s[len(s)-max:]
	}
	return s
}

// capBuffer keeps the first max bytes written to it.
type capBuffer struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	room := b.max - b.buf.Len()
	if room < len(p) {
		b.truncated = true
		b.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	b.buf.Write(p)
	return len(p), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) Bytes() []byte { return b.buf }
