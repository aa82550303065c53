package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// execGuardArg, as the first argument, runs the binary as a daemon's exec
// guard (execGuard) instead of the command line; the daemon's --log-format
// and --log-level and its commands' temporary directory follow it.
const execGuardArg = "__exec-guard"

// execGuard is the process that a daemon with --exec kinds starts beside
// itself, so that the commands of its jobs do not outlive it however it
// dies, nor their runs however long it is paused. They run in process
// groups of their own, which a SIGKILL or SIGSTOP of the daemon does not
// reach; without the guard they would go on beside the runs that replace
// them (at once in embedded mode, after the lease's TTL in shared mode).
//
// The daemon writes to the guard's stdin, a pipe, one line per event
// (times are readings of CLOCK_BOOTTIME in nanoseconds, durations
// nanoseconds):
//
//	+PGID            a command's group started
//	+PGID D G        one whose run is the daemon's until D (its session's
//	                 deadline, ADR 0037); G is its kill grace
//	=PGID D          the session was renewed: the run is the daemon's until D
//	~PGID G          the daemon sent the group SIGTERM, and SIGKILLs it
//	                 after G
//	-PGID            the group has ended
//
// A group whose D passes gets SIGTERM at D + G/2 and SIGKILL at D + G,
// before the lease can expire (G is half the session's margin at most),
// unless the daemon has said that it ended (-): a daemon that is alive
// acts at D, and the commands of one that is paused stop all the same, so
// that no other daemon runs the job while they do. A group told ~ (with
// the daemon's own grace, which may be longer than the session has left:
// a job's timeout, a cancel) gets no SIGTERM from the guard, only SIGKILL
// at D + G or 1.25 times that grace after the ~, whichever comes first
// (the daemon, alive, kills it after its grace). Numbers above
// maxGuardNumber make the line ignored.
// When the pipe ends — the daemon closed it at its stop, or exited, or
// was killed — the guard SIGKILLs every group still listed and exits.
// SIGINT, SIGTERM and SIGHUP are the daemon's to act on: the guard ignores
// them, and it runs in a process group of its own, out of reach of the
// terminal's ^C.
//
// dir, if not "", is the daemon's directory of its commands' temporary
// files (execGroups.tempDir): the guard removes it as it exits, so that a
// killed daemon leaves none of them behind.
func execGuard(in io.Reader, log *slog.Logger, dir string) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	g := guardedGroups{}
	for {
		var due <-chan time.Time
		var timer *time.Timer
		if at, ok := g.next(); ok {
			// Re-read at least once a second: Go's timers stop while
			// the system is suspended, the boot clock does not.
			timer = time.NewTimer(min(max(at-bootTime(), 0), time.Second))
			due = timer.C
		}
		eof := false
		select {
		case line, ok := <-lines:
			if eof = !ok; !eof {
				g.apply(line)
			}
		case <-due:
			// The lines waiting to be taken first: a renewal (=) or an
			// end (-) that the daemon wrote before this moment must not
			// lose to the timer (select picks either when both are
			// ready).
			for drained := false; !drained && !eof; {
				select {
				case line, ok := <-lines:
					if eof = !ok; !eof {
						g.apply(line)
					}
				default:
					drained = true
				}
			}
			if !eof {
				g.act(bootTime(), log)
			}
		}
		if timer != nil {
			timer.Stop()
		}
		if eof {
			for pgid, gr := range g {
				gr.signal(pgid, syscall.SIGKILL)
			}
			if dir != "" {
				// After the kills: a command may have its file
				// open still; its name goes all the same.
				if err := os.RemoveAll(dir); err != nil {
					log.Warn("exec guard: cannot remove the commands' temporary files", slog.String("dir", dir), slog.Any("err", err))
				}
			}
			return exitOK
		}
	}
}

// guardedGroup is what the exec guard knows of one command's group.
type guardedGroup struct {
	// leader is the start time of the group's leader, the command's
	// shell, as /proc gave it at "+" ("" without /proc).
	leader   string
	deadline time.Duration // boot time the run is the daemon's until; 0: no deadline
	grace    time.Duration
	stopAt   time.Duration // once the daemon said it sent SIGTERM (~), when its SIGKILL is overdue; 0: not yet
	killAt   time.Duration // once the guard sent SIGTERM, when SIGKILL is due; 0: not yet
	killed   bool
}

// maxGuardNumber bounds the numbers of the guard's lines: boot times and
// graces that large are no daemon's, and their sums (a deadline plus its
// grace) must not wrap into the past.
const maxGuardNumber = 1 << 61

// guardedGroups are the exec guard's groups, by process group id.
type guardedGroups map[int]*guardedGroup

// apply takes one line of the daemon's (see execGuard); others are
// ignored.
func (g guardedGroups) apply(line string) {
	f := strings.Fields(line)
	if len(f) == 0 || len(f[0]) < 2 {
		return
	}
	pgid, err := strconv.Atoi(f[0][1:])
	if err != nil || pgid <= 1 {
		return
	}
	var nums []time.Duration
	for _, x := range f[1:] {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil || n <= 0 || n > maxGuardNumber {
			return
		}
		nums = append(nums, time.Duration(n))
	}
	gr := g[pgid]
	switch {
	case f[0][0] == '+' && len(nums) == 0:
		g[pgid] = &guardedGroup{leader: leaderStart(pgid)}
	case f[0][0] == '+' && len(nums) == 2:
		g[pgid] = &guardedGroup{leader: leaderStart(pgid), deadline: nums[0], grace: nums[1]}
	case f[0][0] == '=' && len(nums) == 1 && gr != nil && gr.killAt == 0:
		gr.deadline = max(gr.deadline, nums[0])
	case f[0][0] == '~' && len(nums) == 1 && gr != nil && gr.killAt == 0 && gr.stopAt == 0:
		// A quarter more than the daemon's own grace: a daemon that is
		// alive kills the group first. The deadline still holds (next).
		gr.stopAt = bootTime() + nums[0] + nums[0]/4
	case f[0][0] == '-' && len(nums) == 0:
		delete(g, pgid)
	}
}

// next returns the boot time of the guard's next action, if it has one.
func (g guardedGroups) next() (at time.Duration, ok bool) {
	for _, gr := range g {
		var t time.Duration
		switch {
		case gr.killed:
			continue
		case gr.killAt != 0:
			t = gr.killAt
		case gr.stopAt != 0 && gr.deadline != 0:
			t = min(gr.stopAt, gr.deadline+gr.grace)
		case gr.stopAt != 0:
			t = gr.stopAt
		case gr.deadline != 0:
			t = gr.deadline + gr.grace/2
		default:
			continue
		}
		if !ok || t < at {
			at, ok = t, true
		}
	}
	return at, ok
}

// act signals the groups whose time has come at boot time now.
func (g guardedGroups) act(now time.Duration, log *slog.Logger) {
	for pgid, gr := range g {
		switch {
		case gr.killed:
		case gr.killAt != 0 && now >= gr.killAt || gr.stopAt != 0 && now >= gr.stopAt:
			gr.killed = true
			if groupAlive(pgid) && gr.signal(pgid, syscall.SIGKILL) {
				log.Warn("exec guard: a command stopped with SIGTERM was still running past its kill grace, and its daemon did not kill it (is the daemon paused?): killing its process group",
					slog.Int("pgid", pgid))
			}
		case gr.killAt == 0 && gr.stopAt != 0 && gr.deadline != 0 && now >= gr.deadline+gr.grace:
			// The daemon sent SIGTERM (its grace longer than the
			// session had left) and did not kill the group by the
			// deadline's: no second SIGTERM to the command's trap.
			gr.killed = true
			if groupAlive(pgid) && gr.signal(pgid, syscall.SIGKILL) {
				log.Warn("exec guard: the session of a command's run passed its deadline while the command, sent SIGTERM by its daemon, still ran, and the daemon did not kill it (is the daemon paused?): killing its process group before another daemon can take the job",
					slog.Int("pgid", pgid), slog.Duration("past_deadline", now-gr.deadline), slog.Duration("grace", gr.grace))
			}
		case gr.killAt == 0 && gr.stopAt == 0 && gr.deadline != 0 && now >= gr.deadline+gr.grace/2:
			gr.killAt = gr.deadline + gr.grace
			gr.signal(pgid, syscall.SIGTERM)
			log.Warn("exec guard: the session of a command's run passed its deadline and the daemon did not stop the command (is the daemon paused?): sending its process group SIGTERM, then SIGKILL, before another daemon can take the job",
				slog.Int("pgid", pgid), slog.Duration("past_deadline", now-gr.deadline), slog.Duration("grace", gr.grace))
		}
	}
}

// signal sends sig to group pgid, unless its id is another's now, and
// reports whether it did. The daemon says "-PGID" before it reaps the
// command's shell, so the id is the job's while the guard lists it; but
// the guard may act before it reads a "-" that is on its way, and at the
// pipe's end the shells of a killed daemon are init's to reap. A process
// with pid PGID that started at another time than the shell did may lead
// another group of that id: it is left alone. No process with that pid
// means no new group of that id (a group's id is its leader's pid), and
// processes the command left in the group still get sig.
func (gr *guardedGroup) signal(pgid int, sig syscall.Signal) bool {
	if now := leaderStart(pgid); gr.leader != "" && now != "" && now != gr.leader {
		return false
	}
	_ = syscall.Kill(-pgid, sig)
	return true
}

// leaderStart returns the start time of process pid (field 22 of
// /proc/PID/stat, in clock ticks since boot), or "" if there is no such
// process or no /proc.
func leaderStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// pid (comm) state ppid ...: comm may hold anything, so the fields
	// are counted after its closing parenthesis; starttime is the 20th.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// bootTime reads CLOCK_BOOTTIME, the clock of the deadlines the daemon
// gives the guard (coordinator.Session.BootDeadline): unlike Go's
// monotonic clock, it counts time suspended, as the lease's TTL does.
func bootTime() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return time.Duration(ts.Nano())
}

// startExecGuard starts the daemon's exec guard (execGuard) and has
// execGroups report to it. The returned function, called once the worker
// has stopped, ends the guard and waits for it.
//
// With lockPath (embedded mode: execGuardLockName in the data directory,
// which the daemon holds already), the guard holds an exclusive flock on
// that file for its whole life, and it is started only once the flock is
// taken: the guard of the daemon that had the directory before has then
// exited, so it has killed that daemon's commands, and the jobs the
// worker's start re-queues cannot run beside them.
func startExecGuard(ctx context.Context, g *globalOpts, stderr io.Writer, log *slog.Logger, lockPath string) (stop func(), err error) {
	// Before the guard and any command start: neither gets what the
	// daemon inherited.
	if err := inheritedFDsCloseOnExec(); err != nil {
		log.Warn("--exec commands may inherit descriptors this daemon inherited (a supervisor waiting for EOF on one waits for them too)", slog.Any("err", err))
	}
	var lock *os.File
	if lockPath != "" {
		if lock, err = lockForGuard(ctx, lockPath, log); err != nil {
			return nil, err
		}
		// The guard's copy holds the flock from here on.
		defer func() { _ = lock.Close() }()
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
	// The commands' temporary files (a job's last checkpoint) go in a
	// directory of this daemon's, which the guard removes as it exits.
	tmp, err := os.MkdirTemp("", "leasehold-exec-") // mode 0700
	if err != nil {
		return nil, failf("cannot start the guard of --exec commands: %v", err)
	}
	cmd := exec.Command(self, execGuardArg, g.logFormat, g.logLevel, tmp)
	cmd.Args[0] = os.Args[0] // ps shows what started the daemon, not /proc/self/exe
	cmd.Stdin, cmd.Stderr = r, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if lock != nil {
		cmd.ExtraFiles = []*os.File{lock} // fd 3, held until the guard exits
	}
	err = cmd.Start()
	_ = r.Close() // the guard's now; the daemon keeps only the write end
	if err != nil {
		_ = w.Close()
		_ = os.Remove(tmp)
		return nil, failf("cannot start the guard of --exec commands: %v", err)
	}
	if lock != nil {
		// For the message of a daemon that finds it held.
		_ = lock.Truncate(0)
		_, _ = lock.WriteAt([]byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0)
	}
	log.Info("exec guard started: commands of running jobs are killed if this daemon dies, and stopped at their session's deadline if it is paused", slog.Int("pid", cmd.Process.Pid))
	execGroups.setGuard(w, log)
	execGroups.setTempDir(tmp)
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
	forwarded := make(chan struct{})
	go func() {
		defer close(forwarded)
		execGroups.forwardDeadlines(stopping)
	}()
	return func() {
		close(stopping)
		<-forwarded
		execGroups.setGuard(nil, log)
		execGroups.setTempDir("")
		_ = w.Close()
		<-exited
		_ = os.RemoveAll(tmp) // the guard's job, unless it died before
	}, nil
}

// execGuardLockName is the file in an embedded daemon's data directory
// whose exclusive flock its exec guard holds for its whole life, with the
// guard's pid in it (startExecGuard).
const execGuardLockName = "exec-guard.lock"

// execGuardLockWait bounds how long a starting daemon waits for the guard
// of the daemon that had its data directory before; it exits within
// moments of that daemon's death, having killed its commands.
var execGuardLockWait = 30 * time.Second

// lockForGuard opens path and takes an exclusive flock on it, waiting for
// the guard that holds it (up to execGuardLockWait, or until ctx ends).
func lockForGuard(ctx context.Context, path string, log *slog.Logger) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, failf("cannot start the guard of --exec commands: %v", err)
	}
	start := time.Now()
	for logged := false; ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			if logged {
				log.Info("the exec guard of the daemon that had this data directory before has exited: its commands are stopped", slog.Duration("waited", time.Since(start).Round(time.Millisecond)))
			}
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			_ = f.Close()
			return nil, failf("cannot start the guard of --exec commands: lock %s: %v", path, err)
		}
		holder := strings.TrimSpace(readSmallFile(path))
		if !logged {
			logged = true
			log.Warn("waiting for the exec guard of the daemon that had this data directory before: it is still stopping that daemon's commands, whose jobs this daemon re-queues", slog.String("lock", path), slog.String("guard_pid", holder))
		}
		if time.Since(start) >= execGuardLockWait {
			_ = f.Close()
			return nil, failf("the exec guard (pid %s) of the daemon that had this data directory before still holds %s after %v, so that daemon's --exec commands may still run: stop that process (it kills them as it exits), then start again", holder, path, execGuardLockWait)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitForOldGuard waits, as lockForGuard, for the guard of an earlier
// daemon on the data directory to exit, if one ever ran there, and
// releases the lock at once: for a daemon without --exec.
func waitForOldGuard(ctx context.Context, path string, log *slog.Logger) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	f, err := lockForGuard(ctx, path, log)
	if err != nil {
		return err
	}
	return f.Close()
}

// readSmallFile returns the first bytes of the file at path, or "".
func readSmallFile(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	b := make([]byte, 64)
	n, _ := f.Read(b)
	return string(b[:n])
}

// runExecGuard runs the exec guard with args: the daemon's --log-format
// and --log-level, for its log lines, and the directory of its commands'
// temporary files.
func runExecGuard(args []string, in io.Reader, stderr io.Writer) int {
	g := &globalOpts{logFormat: "json"}
	if len(args) >= 2 {
		g.logFormat, g.logLevel = args[0], args[1]
	}
	dir := ""
	if len(args) >= 3 {
		dir = args[2]
	}
	log, err := newLogger(g, stderr)
	if err != nil {
		log = slog.New(slog.NewJSONHandler(stderr, nil))
	}
	return execGuard(in, log, dir)
}

// tellGuard writes line to the guard (see execGuard), if there is one.
// Call with s.mu held.
func (s *groupSet) tellGuard(line string) {
	if s.guard == nil {
		return
	}
	if _, err := io.WriteString(s.guard, line+"\n"); err != nil {
		s.log.Error("cannot reach the exec guard: commands of running jobs would outlive this daemon if it were killed, and run on if it were paused", slog.Any("err", err))
		s.guard = nil
	}
}

// tellAdded tells the guard of group pgid. Call with s.mu held.
func (s *groupSet) tellAdded(pgid int, g *execGroup) {
	if g.told == 0 {
		s.tellGuard(fmt.Sprintf("+%d", pgid))
		return
	}
	s.tellGuard(fmt.Sprintf("+%d %d %d", pgid, g.told, max(g.grace, 1)))
	if g.stopping {
		s.tellGuard(fmt.Sprintf("~%d %d", pgid, max(g.stopGrace, 1)))
	}
}

// setGuard has s report the groups it adds and removes to w, the guard's
// stdin; nil stops that. The groups listed already are reported at once.
func (s *groupSet) setGuard(w io.Writer, log *slog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.guard, s.log = w, log
	for pgid, g := range s.groups {
		s.tellAdded(pgid, g)
	}
}

// setTempDir sets the directory of the commands' temporary files ("":
// the system's).
func (s *groupSet) setTempDir(dir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tmp = dir
}

// tempDir is the directory of the commands' temporary files.
func (s *groupSet) tempDir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tmp
}
