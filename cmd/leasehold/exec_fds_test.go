package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A daemon started with descriptors its parent left open without
// close-on-exec (a supervisor's pipe or socket) passes none of them on to
// its --exec commands or its exec guard: a long-running command holding
// one would keep the supervisor waiting for EOF on it.
func TestExecCommandsGetNoInheritedFDs(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(w.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	inherited := fmt.Sprintf("pipe:[%d]", st.Ino)

	l := newLifeLine(t)
	// exec keeps the shell's pid, written to pidFile, for the sleep.
	hold := fmt.Sprintf(`hold=exec 3>%s; echo $$ >%s; echo >&3; exec sleep 1000`, l.path, l.pidFile)
	cmd := exec.Command(binPath, "daemon", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--log-format", "json",
		"--exec", hold)
	cmd.Env = cliEnv()
	log := newSPLog()
	cmd.Stdout, cmd.Stderr = log, log
	// The daemon's fds 3 to 5: a command's fd 3 is its gate (ADR 0019)
	// and its fd 4 its checkpoint socket (ADR 0034), so fd 5 is the first
	// one a command could inherit.
	cmd.ExtraFiles = []*os.File{w, w, w}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close() // the daemon's now
	p := &spProc{name: "daemon", cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.stop(t) })

	ln, _ := p.waitLog(t, 0, "listening", func(l spLine) bool { return l.Msg == "listening" })
	g, _ := p.waitLog(t, 0, "exec guard", func(l spLine) bool { return strings.HasPrefix(l.Msg, "exec guard started") })
	code, body := postBody(t, "http://"+ln.str("addr")+"/v1/jobs", `{"kind":"hold"}`)
	if code != http.StatusCreated {
		t.Fatalf("enqueue: %d %s", code, body)
	}
	<-l.started
	b, err := os.ReadFile(l.pidFile)
	if err != nil {
		t.Fatal(err)
	}
	command := strings.TrimSpace(string(b))
	if fds := holding(t, p.pid(), inherited); len(fds) != 3 {
		t.Fatalf("the daemon holds %s at fds %v, want 3 (the test's setup is wrong)", inherited, fds)
	}
	if fds := holding(t, mustAtoi(t, command), inherited); len(fds) > 0 {
		t.Errorf("the --exec command holds the daemon's inherited %s at fds %v", inherited, fds)
	}
	if fds := holding(t, mustAtoi(t, g.str("pid")), inherited); len(fds) > 0 {
		t.Errorf("the exec guard holds the daemon's inherited %s at fds %v", inherited, fds)
	}
	// The guard stops the command once the daemon is gone.
	p.kill(t)
	l.waitGone(t, "daemon killed by SIGKILL")
}

// holding lists the fds of process pid that refer to target, as
// /proc/PID/fd/N shows it.
func holding(t *testing.T, pid int, target string) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		if to, err := os.Readlink(dir + "/" + e.Name()); err == nil && to == target {
			fds = append(fds, e.Name())
		}
	}
	return fds
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not a pid", s)
	}
	return n
}
