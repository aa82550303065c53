package main

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/etcdtest"
)

// A daemon started while etcd has no quorum waits for it, as a running
// daemon does, and starts once the quorum is back: it does not exit, and
// says once a retry what it is waiting for.
func TestDaemonStartedDuringAnOutageWaitsForIt(t *testing.T) {
	c := etcdtest.StartCluster(t, 3, etcdtest.WithElectionTimeout(50*time.Millisecond, 500*time.Millisecond))
	c.Stop(1)
	c.Stop(2)
	cmd := exec.Command(binPath, "daemon", "--etcd", c.Member(0).ClientURL(), "--listen", "127.0.0.1:0", "--lease-ttl", "2s", "--log-format", "json")
	cmd.Env = cliEnv()
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	defer func() { _ = cmd.Process.Kill() }()
	var log []string
	waitFor := func(what string) {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the daemon exited (%v) before %q:\n%s", <-exited, what, strings.Join(log, "\n"))
				}
				log = append(log, l)
				if strings.Contains(l, what) {
					return
				}
			case <-timeout:
				// Its goroutines say where it waits.
				_ = cmd.Process.Signal(syscall.SIGQUIT)
				n := 0
				for l := range lines {
					if n++; n < 200 && (strings.Contains(l, "leasehold/") || strings.HasPrefix(l, "goroutine")) {
						log = append(log, l)
					}
				}
				t.Fatalf("no %q within 60 s:\n%s", what, strings.Join(log, "\n"))
			}
		}
	}
	waitFor("cannot start a session: etcd does not answer (no quorum?); retrying")
	c.Restart(1)
	c.Restart(2)
	waitFor("worker started")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	if err := <-exited; err != nil {
		t.Fatalf("daemon after SIGTERM: %v", err)
	}
}
