package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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

func (g *guardProc) logText() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.log.String()
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
	if l := g.logText(); !strings.Contains(l, "passed its deadline") || !strings.Contains(l, "killing its process group") {
		t.Errorf("guard's log does not say why it stopped the commands:\n%s", l)
	}

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
	g.tell(t, "+%d %d %d", daemonStops.pgid(), first, grace)
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

// A paused daemon's --exec command does not run beside the run that
// replaces it (DESIGN.md promise 6 for commands, ADR 0037): SIGSTOP
// freezes the daemon, not the command's process group, and before the
// exec guard acted on the session's deadline the command went on writing
// while another daemon ran the job again. Each run's command appends its
// fencing token to one file every 50 ms: no line of the first run may come
// after the first line of the second. The guard stops the first before its
// lease can expire, so the order holds however the machine is loaded.
func TestSharedPausedDaemonsCommandsStopBeforeTakeover(t *testing.T) {
	const ttl = 5 * time.Second // the guard's SIGKILL 0.5 s before the lease can expire
	c := newSPCluster(t, "pausexec", ttl)
	out := t.TempDir() + "/runs"
	tick := fmt.Sprintf(`tick=while :; do echo "$LEASEHOLD_TOKEN" >>%s; sleep 0.05; done`, out)
	a := c.daemon(t, "daemon A", "--exec", tick)
	id := strings.TrimSpace(c.cli(t, "enqueue", "tick", "{}"))
	lines := func() []string {
		b, _ := os.ReadFile(out)
		return strings.Fields(string(b))
	}
	waitLines := func(what string, cond func([]string) bool) []string {
		t.Helper()
		deadline := time.Now().Add(spWait)
		for {
			if ls := lines(); cond(ls) {
				return ls
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s within %v; the runs wrote %q", what, spWait, lines())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := waitLines("line of the first run", func(ls []string) bool { return len(ls) > 0 })[0]
	b := c.daemon(t, "daemon B", "--exec", tick)

	stopAt := time.Now()
	a.signal(t, syscall.SIGSTOP)
	ls := waitLines("20 lines of a second run", func(ls []string) bool {
		i := slices.IndexFunc(ls, func(l string) bool { return l != first })
		return i >= 0 && len(ls)-i >= 20
	})
	second := ls[slices.IndexFunc(ls, func(l string) bool { return l != first })]
	t.Logf("run %s took over %v after daemon A was paused", second, time.Since(stopAt).Round(time.Millisecond))
	start := slices.Index(ls, second)
	if last := lastIndex(ls, first); last > start {
		t.Errorf("the paused daemon's command (token %s) wrote %d lines after the run replacing it (token %s) had started: two runs of job %s at once", first, strings.Count(strings.Join(ls[start:], " "), first), second, id)
	}
	for _, l := range ls[start:] {
		if l != second && l != first {
			t.Errorf("a third run (token %s) wrote too: %q", l, ls)
			break
		}
	}
	a.waitLog(t, 0, "the guard's line", func(l spLine) bool {
		return strings.Contains(l.Msg, "exec guard: the session of a command's run passed its deadline")
	})

	// Resumed, the daemon finds its command stopped and its run lost; the
	// new run goes on undisturbed.
	a.signal(t, syscall.SIGCONT)
	a.waitLog(t, 0, "the resumed daemon's self-fencing", func(l spLine) bool { return strings.Contains(l.Msg, "fencing self") && !l.Time.Before(stopAt) })
	n := len(lines())
	waitLines("more lines of the second run", func(ls []string) bool { return len(ls) >= n+10 })
	if ls := lines(); lastIndex(ls, first) > start {
		t.Errorf("the resumed daemon's command (token %s) wrote again after the run replacing it had started", first)
	}
	c.cli(t, "jobs", "cancel", id)
	b.stopCleanly(t)
	a.stopCleanly(t)
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
