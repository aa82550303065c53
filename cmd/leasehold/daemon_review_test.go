package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A --max-payload larger than the embedded store takes is bad input: the
// daemon says so with exit 2 before it creates or opens the data directory
// (DESIGN: bad input, nothing written).
func TestDaemonMaxPayloadTooLargeWritesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	r := runCLI(t, nil, "", "daemon", "--data", dir, "--listen", "127.0.0.1:0", "--log-format", "json", "--max-payload", "40MiB")
	if r.code != 2 {
		t.Fatalf("exit %d, want 2\nstderr: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "use at most") {
		t.Errorf("stderr does not say what to do: %s", r.stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("data directory %s was created for a refused start (stat: %v)", dir, err)
	}
}

// config check runs the daemon's checks of the values together: it refuses
// the --max-payload the daemon would refuse.
func TestConfigCheckRefusesMaxPayloadOverStore(t *testing.T) {
	p := writeFile(t, t.TempDir(), "config.yaml", "max-payload: 40MiB\n")
	code, out, errs := runInProcess("config", "check", p)
	if code != 2 || !strings.Contains(out, "daemon: max payload 41943040 bytes does not fit") {
		t.Errorf("exit %d, want 2 naming the payload limit\nstdout: %s\nstderr: %s", code, out, errs)
	}
}

// A SIGTERM while the daemon is still dialing etcd is a stop asked for, not
// a failure: the daemon exits 0 rather than report that it cannot reach
// etcd (as it does for a signal during the worker's start).
func TestDaemonSignalDuringDialStopsCleanly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	// An "etcd" that takes connections and never answers: the dial waits.
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	cmd := exec.Command(binPath, "daemon", "--etcd", "http://"+ln.Addr().String(), "--listen", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = cliEnv()
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &errb, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c, ok := <-accepted
	if !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("the daemon never connected to the fake etcd")
	}
	defer func() { _ = c.Close() }()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 0 || strings.Contains(errb.String(), "cannot reach etcd") {
		t.Errorf("exit %d (%v) after SIGTERM during the dial, want 0 without an error\n%s", code, err, errb.String())
	}
}

// A --listen address in use fails in one line before the store is opened:
// the data directory is not created (nor, for an existing one, are its
// jobs left running re-queued) by a daemon that cannot serve.
func TestDaemonPortInUseWritesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	dir := filepath.Join(t.TempDir(), "data")
	r := runCLI(t, nil, "", "daemon", "--data", dir, "--listen", ln.Addr().String(), "--log-level", "error")
	checkOneLineError(t, "daemon on a port in use", r, 1, "cannot listen on "+ln.Addr().String())
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("data directory %s was created by a daemon that could not listen (stat: %v)", dir, err)
	}
}
