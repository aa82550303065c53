package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// guardProc is a real exec guard (the built binary) and its stdin.
type guardProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	mu  sync.Mutex
	log bytes.Buffer
}

func startGuardProc(t *testing.T) *guardProc {
	t.Helper()
	g := &guardProc{}
	g.cmd = exec.Command(binPath, execGuardArg, "json", "info")
	g.cmd.Stderr = lockedWriter{&g.mu, &g.log}
	var err error
	if g.in, err = g.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = g.in.Close() // the guard SIGKILLs what is still listed and exits
		_ = g.cmd.Wait()
	})
	return g
}

func (g *guardProc) tell(t *testing.T, format string, args ...any) {
	t.Helper()
	if _, err := fmt.Fprintf(g.in, format+"\n", args...); err != nil {
		t.Fatalf("telling the guard: %v", err)
	}
}

// waitLog waits until the guard's log says what.
func (g *guardProc) waitLog(t *testing.T, what string) {
	t.Helper()
	deadline := time.Now().Add(spWait)
	for {
		g.mu.Lock()
		l := g.log.String()
		g.mu.Unlock()
		if strings.Contains(l, what) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guard's log does not say %q within %v:\n%s", what, spWait, l)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// guardedCmd is a command in a process group of its own, as --exec runs
// one, that notes each SIGTERM in a file and, if ignoreTerm, carries on.
type guardedCmd struct {
	cmd   *exec.Cmd
	marks string
	done  chan struct{}
	err   error
}

func startGuardedCmd(t *testing.T, ignoreTerm bool) *guardedCmd {
	t.Helper()
	c := &guardedCmd{marks: t.TempDir() + "/marks", done: make(chan struct{})}
	onTerm := "echo term >>" + c.marks + "; exit 0"
	if ignoreTerm {
		onTerm = "echo term >>" + c.marks
	}
	c.cmd = exec.Command("sh", "-c", fmt.Sprintf(`trap '%s' TERM; echo started >>%s; while :; do sleep 0.05; done`, onTerm, c.marks))
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	})
	// Started (its trap set) before the test goes on.
	for !strings.Contains(c.read(), "started") {
		select {
		case <-c.done:
			t.Fatalf("test command exited at once: %v", c.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return c
}

func (c *guardedCmd) pgid() int { return c.cmd.Process.Pid }

func (c *guardedCmd) read() string {
	b, _ := os.ReadFile(c.marks)
	return string(b)
}

// waitEnd waits for the command to end and returns the signal that ended
// it (0 if it exited).
func (c *guardedCmd) waitEnd(t *testing.T, what string) syscall.Signal {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(spWait):
		t.Fatalf("%s: the command still runs after %v", what, spWait)
	}
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal()
		}
	}
	return 0
}

func (c *guardedCmd) running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// The exec guard stops the command of a run whose session passed its
// deadline, as the daemon would if it were not paused: SIGTERM, then
// SIGKILL for one that ignores it. A deadline moved by a renewal (=), a
// group the daemon is stopping itself (~) or that ended (-), and a group
// without a deadline (embedded mode) are left to the daemon. The order of
// each check comes from a second group whose later deadline the guard
// acts on after the first's: no wait is a timed assertion.
func TestExecGuardStopsCommandsPastTheirDeadline(t *testing.T) {
	const grace = 400 * time.Millisecond
	g := startGuardProc(t)

	// A deadline passes: SIGTERM, then SIGKILL.
	stubborn := startGuardedCmd(t, true)
	obeys := startGuardedCmd(t, false)
	now := bootTime()
	g.tell(t, "+%d %d %d", stubborn.pgid(), now+300*time.Millisecond, grace)
	g.tell(t, "+%d %d %d", obeys.pgid(), now+300*time.Millisecond, grace)
	if sig := stubborn.waitEnd(t, "a command ignoring SIGTERM past its deadline"); sig != syscall.SIGKILL || !strings.Contains(stubborn.read(), "term") {
		t.Errorf("a command that ignores SIGTERM, past its deadline: ended by signal %v, marks %q; want SIGTERM noted, then SIGKILL", sig, stubborn.read())
	}
	if sig := obeys.waitEnd(t, "a command past its deadline"); sig != 0 || !strings.Contains(obeys.read(), "term") {
		t.Errorf("a command past its deadline: ended by signal %v, marks %q; want SIGTERM noted and a clean exit", sig, obeys.read())
	}
	// Said after each signal is sent: waited for.
	g.waitLog(t, "passed its deadline")
	g.waitLog(t, "killing its process group")

	// A renewal moves the deadline; removed, without a deadline, or
	// stopped by the daemon (which then ends it within the grace): left
	// alone. The marker's deadline is past the others' first deadlines
	// and graces.
	renewed, removed, none, daemonStops := startGuardedCmd(t, false), startGuardedCmd(t, false), startGuardedCmd(t, false), startGuardedCmd(t, true)
	marker := startGuardedCmd(t, false)
	now = bootTime()
	first := now + time.Second
	g.tell(t, "+%d %d %d", renewed.pgid(), first, grace)
	g.tell(t, "=%d %d", renewed.pgid(), now+time.Hour)
	g.tell(t, "+%d %d %d", removed.pgid(), first, grace)
	g.tell(t, "-%d", removed.pgid())
	g.tell(t, "+%d", none.pgid())
	// Its deadline is not the one passing here: the guard kills a group
	// the daemon is stopping at its deadline (TestExecGuardKillsAStoppingGroupAtItsDeadline).
	g.tell(t, "+%d %d %d", daemonStops.pgid(), now+time.Hour, grace)
	g.tell(t, "~%d %d", daemonStops.pgid(), time.Hour) // SIGKILL due in an hour, from the guard
	_ = syscall.Kill(-daemonStops.pgid(), syscall.SIGTERM)
	g.tell(t, "+%d %d %d", marker.pgid(), first+2*grace, grace)
	marker.waitEnd(t, "the marker command")
	for name, c := range map[string]*guardedCmd{"renewed": renewed, "removed": removed, "without a deadline": none, "stopped by the daemon": daemonStops} {
		if !c.running() {
			t.Errorf("a command %s was ended by the guard (marks %q)", name, c.read())
		}
	}
	if n := strings.Count(daemonStops.read(), "term"); n != 1 {
		t.Errorf("a command the daemon stopped got %d SIGTERMs, want the daemon's one alone", n)
	}

	// One the daemon stops but does not kill (paused after its SIGTERM):
	// SIGKILL from the guard, a quarter past the daemon's grace.
	pausedStop := startGuardedCmd(t, true)
	g.tell(t, "+%d %d %d", pausedStop.pgid(), bootTime()+time.Hour, grace)
	_ = syscall.Kill(-pausedStop.pgid(), syscall.SIGTERM)
	g.tell(t, "~%d %d", pausedStop.pgid(), grace)
	if sig := pausedStop.waitEnd(t, "a command stopped by a daemon that did not kill it"); sig != syscall.SIGKILL {
		t.Errorf("a command stopped with SIGTERM by a daemon that did not kill it: ended by %v, want the guard's SIGKILL", sig)
	}
}

// runsFile is one file that the --exec commands of a test's jobs append
// their run's fencing token to, every 50 ms while they run. Appends from
// processes of one machine are ordered, so two runs of one job overlapped
// if a line of the earlier run follows the first line of the later: no
// clock is read.
type runsFile string

func newRunsFile(t *testing.T) runsFile { return runsFile(t.TempDir() + "/runs") }

// exec is the --exec value of kind, whose command writes to f until it is
// stopped.
func (f runsFile) exec(kind string) string {
	return fmt.Sprintf(`%s=while :; do echo "$LEASEHOLD_TOKEN" >>%s; sleep 0.05; done`, kind, f)
}

func (f runsFile) lines() []string {
	b, _ := os.ReadFile(string(f))
	return strings.Fields(string(b))
}

// wait waits until the lines satisfy cond, and returns them.
func (f runsFile) wait(t *testing.T, what string, cond func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(spWait)
	for {
		if ls := f.lines(); cond(ls) {
			return ls
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v; the runs wrote %q", what, spWait, f.lines())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// first waits for the first line, the token of the first run.
func (f runsFile) first(t *testing.T) string {
	t.Helper()
	return f.wait(t, "line of the first run", func(ls []string) bool { return len(ls) > 0 })[0]
}

// next waits for n lines of a run other than first's, and returns its
// token.
func (f runsFile) next(t *testing.T, first string, n int) string {
	t.Helper()
	ls := f.wait(t, fmt.Sprintf("%d lines of a second run", n), func(ls []string) bool {
		i := slices.IndexFunc(ls, func(l string) bool { return l != first })
		return i >= 0 && len(ls)-i >= n
	})
	return ls[slices.IndexFunc(ls, func(l string) bool { return l != first })]
}

// checkApart fails t if the run of token first wrote after the first line
// of the run of token second, or a third run wrote.
func (f runsFile) checkApart(t *testing.T, first, second string) {
	t.Helper()
	ls := f.lines()
	start := slices.Index(ls, second)
	if last := lastIndex(ls, first); last > start {
		t.Errorf("the first run's command (token %s) wrote %d lines after the run replacing it (token %s) had started: two runs of one job at once", first, strings.Count(strings.Join(ls[start:], " "), first), second)
	}
	for _, l := range ls[start:] {
		if l != second && l != first {
			t.Errorf("a third run (token %s) wrote too: %q", l, ls)
			break
		}
	}
}

// A paused daemon's --exec command does not run beside the run that
// replaces it (DESIGN.md promise 6 for commands, ADR 0037): SIGSTOP
// freezes the daemon, not the command's process group, and before the
// exec guard acted on the session's deadline the command went on writing
// while another daemon ran the job again. The guard stops it before its
// lease can expire, so the runs stay apart however the machine is loaded.
func TestSharedPausedDaemonsCommandsStopBeforeTakeover(t *testing.T) {
	const ttl = 5 * time.Second // the guard's SIGKILL 0.5 s before the lease can expire
	c := newSPCluster(t, "pausexec", ttl)
	runs := newRunsFile(t)
	a := c.daemon(t, "daemon A", "--exec", runs.exec("tick"))
	id := strings.TrimSpace(c.cli(t, "enqueue", "tick", "{}"))
	first := runs.first(t)
	b := c.daemon(t, "daemon B", "--exec", runs.exec("tick"))

	stopAt := time.Now()
	a.signal(t, syscall.SIGSTOP)
	second := runs.next(t, first, 20)
	t.Logf("run %s took over %v after daemon A was paused", second, time.Since(stopAt).Round(time.Millisecond))
	runs.checkApart(t, first, second)
	a.waitLog(t, 0, "the guard's line", func(l spLine) bool {
		return strings.Contains(l.Msg, "exec guard: the session of a command's run passed its deadline")
	})

	// Resumed, the daemon finds its command stopped and its run lost; the
	// new run goes on undisturbed.
	a.signal(t, syscall.SIGCONT)
	a.waitLog(t, 0, "the resumed daemon's self-fencing", func(l spLine) bool { return strings.Contains(l.Msg, "fencing self") && !l.Time.Before(stopAt) })
	n := len(runs.lines())
	runs.wait(t, "more lines of the second run", func(ls []string) bool { return len(ls) >= n+10 })
	runs.checkApart(t, first, second)
	c.cli(t, "jobs", "cancel", id)
	b.stopCleanly(t)
	a.stopCleanly(t)
}

// An embedded daemon restarted after a SIGKILL re-queues the jobs left
// running at once: it must not run them again before the dead daemon's
// guard has killed their commands. The guard holds a lock in the data
// directory for its whole life, and a starting daemon waits for it. The
// old guard normally exits within moments (even a stopped one: the kernel
// continues a stopped process whose process group is orphaned), so here
// the test holds the lock as a slow guard would, and the new daemon must
// wait for it before it runs the job again.
func TestEmbeddedRestartWaitsForTheOldGuard(t *testing.T) {
	dir := t.TempDir()
	lockPath := filepath.Join(dir, execGuardLockName)
	runs := newRunsFile(t)
	a := spStart(t, "daemon A", binPath, daemonArgs(dir, "--exec", runs.exec("tick"), "--shutdown-timeout", "1s")...)
	ln, _ := a.waitLog(t, 0, "listening", func(l spLine) bool { return l.Msg == "listening" })
	if code, body := postBody(t, "http://"+ln.str("addr")+"/v1/jobs", `{"kind":"tick"}`); code != http.StatusCreated {
		t.Fatalf("enqueue: %d %s", code, body)
	}
	first := runs.first(t)
	guard := guardPid(t, a)
	lock, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("the guard's lock: %v", err)
	}
	defer func() { _ = lock.Close() }()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("lock %s while the daemon and its guard run: %v, want it held by the guard", lockPath, err)
	}
	a.signal(t, syscall.SIGKILL)
	<-a.done
	guard.waitExit(t, "the guard of a daemon killed by SIGKILL")
	// As a guard that has not yet killed the old commands would.
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("lock %s once the guard exited: %v", lockPath, err)
	}
	b := spStart(t, "daemon B", binPath, daemonArgs(dir, "--exec", runs.exec("tick"), "--shutdown-timeout", "1s")...)
	b.waitLog(t, 0, "the wait for the old guard", func(l spLine) bool { return strings.HasPrefix(l.Msg, "waiting for the exec guard") })
	for _, l := range b.logLines() {
		if l.Msg == "re-queued the jobs left running" || l.Msg == "listening" {
			t.Fatalf("daemon B went on while an earlier guard held %s: %q", lockPath, l.Raw)
		}
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	b.waitLog(t, 0, "listening", func(l spLine) bool { return l.Msg == "listening" })
	second := runs.next(t, first, 10)
	runs.checkApart(t, first, second)
	b.stopCleanly(t)

	// A daemon without --exec waits too: an earlier one's --exec may have
	// given its commands a built-in kind's name.
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("lock %s once daemon B stopped: %v", lockPath, err)
	}
	c := spStart(t, "daemon C", binPath, daemonArgs(dir, "--shutdown-timeout", "1s")...)
	c.waitLog(t, 0, "the wait for the old guard", func(l spLine) bool { return strings.HasPrefix(l.Msg, "waiting for the exec guard") })
	for _, l := range c.logLines() {
		if l.Msg == "listening" {
			t.Fatalf("daemon C (no --exec) went on while an earlier guard held %s", lockPath)
		}
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	c.waitLog(t, 0, "listening", func(l spLine) bool { return l.Msg == "listening" })
	c.stopCleanly(t)
}

// lastIndex is the index of the last s in ls, or -1.
func lastIndex(ls []string, s string) int {
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i] == s {
			return i
		}
	}
	return -1
}
