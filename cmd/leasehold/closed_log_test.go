package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A daemon whose log reader goes away (its stderr a pipe whose reader
// ended: a log shipper restarted, `| tee` killed) goes on serving, and
// stops gracefully at SIGTERM (exit 0). Go ends a program whose write to a
// closed pipe on descriptor 2 raises SIGPIPE: the daemon died at its next
// log line, without its graceful stop, its running jobs left running.
func TestDaemonOutlivesItsLogReader(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binPath, daemonArgs(t.TempDir(), "--exec", "sigign=grep SigIgn /proc/self/status")...)
	cmd.Env = cliEnv()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close() // the daemon's is the only writer
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	// Read the log up to the "listening" line, then go away.
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" {
				addr <- rec.Addr
				return
			}
		}
		close(addr)
	}()
	var server string
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatal("the daemon's log ended before its listening line")
		}
		server = "http://" + a
	case <-time.After(20 * time.Second):
		t.Fatal("daemon not listening after 20s")
	}
	_ = r.Close()

	id := strings.TrimSpace(okCLI(t, "enqueue", "echo", `{"after":"the log reader went away"}`, "--server", server))
	okCLI(t, "jobs", "wait", id, "--server", server, "--timeout", "10s")
	// The daemon's commands get the default SIGPIPE (a pipeline such as
	// `producer | head -1` relies on it): not ignored.
	id = strings.TrimSpace(okCLI(t, "enqueue", "sigign", `{}`, "--server", server))
	okCLI(t, "jobs", "wait", id, "--server", server, "--timeout", "10s")
	res, _ := getJobCLI(t, server, id).Result.MarshalJSON()
	var line string
	if err := json.Unmarshal(res, &line); err != nil || !strings.HasPrefix(line, "SigIgn:") {
		t.Fatalf("the command's result %s: want its SigIgn line (%v)", res, err)
	}
	mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "SigIgn:")), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	if mask&(1<<(syscall.SIGPIPE-1)) != 0 {
		t.Errorf("an --exec command ignores SIGPIPE (SigIgn %x): the daemon's disposition leaked into it", mask)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM) // the daemon logs its stop
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("daemon did not stop within 20s of SIGTERM")
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() || ws.ExitStatus() != 0 {
		t.Fatalf("daemon ended by %s, exit %d; want a graceful stop, exit 0", ws.Signal(), ws.ExitStatus())
	}
}
