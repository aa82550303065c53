package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
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

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/testutil"
)

// cliEnv is the environment of the binary under test: ours without any
// LEASEHOLD_* variable, plus extra.
func cliEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the binary with args and returns what it printed and its
// exit code.
func runCLI(t *testing.T, env []string, stdin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = cliEnv(env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return cliResult{stdout: out.String(), stderr: errb.String(), code: code}
}

// ok runs the binary and fails the test unless it exits 0.
func okCLI(t *testing.T, args ...string) string {
	t.Helper()
	r := runCLI(t, nil, "", args...)
	if r.code != 0 {
		t.Fatalf("leasehold %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// checkOneLineError checks that r failed with code and one line on stderr
// that contains want.
func checkOneLineError(t *testing.T, what string, r cliResult, code int, want string) {
	t.Helper()
	if r.code != code {
		t.Errorf("%s: exit %d, want %d (stderr %q)", what, r.code, code, r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "leasehold: ") || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Errorf("%s: stderr is not one 'leasehold: ' line: %q", what, r.stderr)
	}
	if !strings.Contains(r.stderr, want) {
		t.Errorf("%s: stderr %q does not contain %q", what, r.stderr, want)
	}
	if r.stdout != "" {
		t.Errorf("%s: unexpected stdout %q", what, r.stdout)
	}
}

// closedPort returns a local address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// daemonProc is a running `leasehold daemon`.
type daemonProc struct {
	cmd    *exec.Cmd
	server string
	log    *logWatcher
	done   chan struct{}
	err    error
}

// logWatcher collects a daemon's output and spots its "listening" line.
type logWatcher struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	seen  int
	ready chan string
}

func (l *logWatcher) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		rest := l.buf.Bytes()[l.seen:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		line := rest[:i]
		l.seen += i + 1
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "listening" {
			select {
			case l.ready <- rec.Addr:
			default:
			}
		}
	}
	return len(p), nil
}

func (l *logWatcher) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// requeued returns the "jobs" field of the daemon's line saying how many
// jobs left running it re-queued at start, or -1 if it has none.
func (l *logWatcher) requeued() int {
	for line := range strings.Lines(l.String()) {
		var rec struct {
			Msg  string `json:"msg"`
			Jobs int    `json:"jobs"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "re-queued the jobs left running" {
			return rec.Jobs
		}
	}
	return -1
}

func startDaemon(t *testing.T, dir string, args ...string) *daemonProc {
	t.Helper()
	return startDaemonStdin(t, dir, nil, args...)
}

// startDaemonStdin is startDaemon with stdin as the daemon's standard
// input.
func startDaemonStdin(t *testing.T, dir string, stdin io.Reader, args ...string) *daemonProc {
	t.Helper()
	cmd := exec.Command(binPath, daemonArgs(dir, args...)...)
	cmd.Stdin = stdin
	return startDaemonCmd(t, cmd)
}

// daemonArgs are the arguments of a test's daemon on dir.
func daemonArgs(dir string, args ...string) []string {
	return append([]string{"daemon", "--data", dir, "--listen", "127.0.0.1:0", "--log-format", "json"}, args...)
}

// startDaemonCmd starts cmd, a daemon (see daemonArgs), with the
// environment variables env, and waits until it listens.
func startDaemonCmd(t *testing.T, cmd *exec.Cmd, env ...string) *daemonProc {
	t.Helper()
	cmd.Env = cliEnv(env...)
	lw := &logWatcher{ready: make(chan string, 1)}
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{cmd: cmd, log: lw, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() { d.stop(t, syscall.SIGTERM) })
	select {
	case addr := <-lw.ready:
		d.server = "http://" + addr
	case <-d.done:
		t.Fatalf("daemon exited at start (%v):\n%s", d.err, lw)
	case <-time.After(20 * time.Second):
		t.Fatalf("daemon not listening after 20s:\n%s", lw)
	}
	return d
}

// stop signals the daemon and waits for it to exit; it returns its exit
// code.
func (d *daemonProc) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	select {
	case <-d.done:
	default:
		_ = d.cmd.Process.Signal(sig)
		select {
		case <-d.done:
		case <-time.After(20 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
			t.Errorf("daemon did not stop within 20s of %s:\n%s", sig, d.log)
		}
	}
	return d.cmd.ProcessState.ExitCode()
}

func getJobCLI(t *testing.T, server, id string) *coordinator.Job {
	t.Helper()
	var j coordinator.Job
	out := okCLI(t, "jobs", "get", id, "--json", "--server", server)
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("jobs get --json: %v\n%s", err, out)
	}
	return &j
}

func waitStateCLI(t *testing.T, server, id string, st coordinator.State) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if getJobCLI(t, server, id).State == st {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("job %s never %s", id, st)
}

func TestCLIUsageErrors(t *testing.T) {
	// Nothing listens at the server: a command that sent a request would
	// exit 1 (unreachable), so exit 2 also shows that nothing was sent.
	srv := "http://" + closedPort(t)
	data := filepath.Join(t.TempDir(), "data")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("a\x1bb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no command", nil, nil, "missing command"},
		{"unknown command", nil, []string{"frob"}, `unknown command "frob"`},
		{"enqueue without kind", nil, []string{"enqueue"}, "missing arguments"},
		{"malformed payload", nil, []string{"enqueue", "sleep", `{"ms":`}, `enqueue: payload is not valid JSON`},
		{"negative count", nil, []string{"enqueue", "sleep", "--count", "-1"}, "--count -1"},
		{"zero count", nil, []string{"enqueue", "sleep", "--count", "0"}, "--count 0"},
		{"delay and at", nil, []string{"enqueue", "sleep", "--delay", "1s", "--at", "2030-01-02T15:04:05Z"}, "--delay and --at"},
		{"bad at", nil, []string{"enqueue", "sleep", "--at", "tomorrow"}, "RFC 3339"},
		{"bad delay", nil, []string{"enqueue", "sleep", "--delay", "soon"}, "--delay"},
		{"bad priority", nil, []string{"enqueue", "sleep", "--priority", "9"}, "--priority 9"},
		{"bad max attempts", nil, []string{"enqueue", "sleep", "--max-attempts", "0"}, "--max-attempts 0"},
		{"bad kind", nil, []string{"enqueue", "no kind"}, "kind"},
		{"unique key with count", nil, []string{"enqueue", "echo", "--unique-key", "k", "--count", "2"}, "--unique-key"},
		{"enqueue etcd without scheme", nil, []string{"enqueue", "echo", "--etcd", "127.0.0.1:2379"}, "is not an http:// or https:// URL"},
		{"jobs list etcd cert without key", nil, []string{"jobs", "list", "--etcd", "http://127.0.0.1:2379", "--etcd-cert", "c.pem"}, "--etcd-cert and --etcd-key go together"},
		{"enqueue unknown flag", nil, []string{"enqueue", "echo", "--colour", "red"}, "unknown flag: --colour"},
		{"bad id", nil, []string{"jobs", "get", "nope"}, `bad job id "nope"`},
		{"get without id", nil, []string{"jobs", "get"}, "missing arguments"},
		{"cancel bad id", nil, []string{"jobs", "cancel", "01ARZ3NDEKTSV4RRFFQ69G5FA"}, "bad job id"},
		{"wait nothing", nil, []string{"jobs", "wait"}, "nothing to wait for"},
		{"wait ids and all", nil, []string{"jobs", "wait", "--all", "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, "not both"},
		{"unknown state", nil, []string{"jobs", "list", "--state", "done"}, `unknown state "done"`},
		{"bad limit", nil, []string{"jobs", "list", "--limit", "0"}, "--limit 0"},
		{"jobs unknown command", nil, []string{"jobs", "frob"}, `unknown command "frob"`},
		{"jobs unknown command with a subcommand's flag", nil, []string{"jobs", "lsit", "--server", srv, "--limit", "5"}, `unknown command "lsit": use list, get`},
		{"jobs with only a subcommand's flag", nil, []string{"jobs", "--limit", "5", "--server", srv}, "missing command: use list, get"},
		{"bad server URL", nil, []string{"workers", "list", "--server", "ftp://x"}, "--server"},
		{"server URL with /v1", nil, []string{"workers", "list", "--server", "http://127.0.0.1:7420/v1/"}, `--server "http://127.0.0.1:7420/v1/" ends in /v1: pass the daemon's base URL, e.g. http://127.0.0.1:7420`},
		{"id with a first character over 7", nil, []string{"jobs", "get", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ"}, "the first 0 to 7"},
		{"bad env value", []string{"LEASEHOLD_COUNT=many"}, []string{"enqueue", "echo"}, "LEASEHOLD_COUNT"},
		{"delay and at from env", []string{"LEASEHOLD_DELAY=1s", "LEASEHOLD_AT=2030-01-02T15:04:05Z"}, []string{"enqueue", "echo"}, "LEASEHOLD_DELAY and LEASEHOLD_AT"},
		{"daemon etcd without scheme", []string{"LEASEHOLD_DATA=" + data}, []string{"daemon", "--etcd", "127.0.0.1:2379"}, "is not an http:// or https:// URL"},
		{"daemon etcd from env", []string{"LEASEHOLD_ETCD=etcd.local:2379"}, []string{"daemon", "--data", data}, "is not an http:// or https:// URL"},
		{"daemon etcd CA missing", nil, []string{"daemon", "--etcd", "http://127.0.0.1:2379", "--etcd-ca", "/nonexistent/ca.pem"}, "--etcd-ca: open /nonexistent/ca.pem: no such file or directory: check the path"},
		{"daemon etcd user without password", nil, []string{"daemon", "--etcd", "http://127.0.0.1:2379", "--etcd-user", "u"}, "--etcd-user and --etcd-password go together"},
		{"daemon lease ttl", nil, []string{"daemon", "--data", data, "--lease-ttl", "1500ms"}, "--lease-ttl"},
		{"daemon concurrency", nil, []string{"daemon", "--data", data, "--concurrency", "0"}, "--concurrency 0"},
		{"daemon exec", nil, []string{"daemon", "--data", data, "--exec", "nocommand"}, "KIND=COMMAND"},
		{"daemon log level", nil, []string{"daemon", "--data", data, "--log-level", "loud"}, "--log-level"},
		{"daemon listen", nil, []string{"daemon", "--data", data, "--listen", "7420"}, "--listen"},
		{"daemon argument", nil, []string{"daemon", "extra"}, "too many arguments"},
		// Found in review: each was accepted, sent, or ran.
		{"daemon concurrency too high", nil, []string{"daemon", "--data", data, "--listen", "127.0.0.1:0", "--concurrency", "2000000000"}, "--concurrency 2000000000: want 1 to 100000"},
		{"bench concurrency too high", nil, []string{"bench", "--jobs", "1", "--concurrency", "2000000000"}, "--concurrency 2000000000: want 1 to 100000"},
		{"bench etcd without scheme", nil, []string{"bench", "--jobs", "1", "--etcd", "garbage"}, `--etcd "garbage" is not an http:// or https:// URL`},
		{"bench latency rate NaN", nil, []string{"bench", "--jobs", "1", "--latency-rate", "NaN"}, "--latency-rate NaN: want a positive rate"},
		{"bench latency rate Inf", nil, []string{"bench", "--jobs", "1", "--latency-rate", "Inf"}, "--latency-rate +Inf: want a positive rate"},
		{"daemon listen port too high", nil, []string{"daemon", "--data", data, "--listen", "127.0.0.1:99999"}, `--listen "127.0.0.1:99999": bad port "99999"`},
		{"daemon listen negative port", nil, []string{"daemon", "--data", data, "--listen", "127.0.0.1:-1"}, `bad port "-1"`},
		{"daemon listen unknown service", nil, []string{"daemon", "--data", data, "--listen", "127.0.0.1:nosuchservice"}, `bad port "nosuchservice"`},
		{"unique by args with count", nil, []string{"enqueue", "echo", "--unique-by-args", "--count", "2"}, "--unique-by-args with --count 2"},
		{"unique period from env with count", []string{"LEASEHOLD_UNIQUE_PERIOD=1h"}, []string{"enqueue", "echo", "--count", "2"}, "LEASEHOLD_UNIQUE_PERIOD with --count 2"},
		{"empty at", nil, []string{"enqueue", "echo", "--at="}, "--at is empty: leave it out to run the job now"},
		{"empty unique key", nil, []string{"enqueue", "echo", "--unique-key="}, "--unique-key is empty"},
		{"empty unique states", nil, []string{"enqueue", "echo", "--unique-states="}, "--unique-states is empty"},
		{"empty metadata", nil, []string{"enqueue", "echo", "--metadata="}, "--metadata is empty"},
		{"empty list kind", nil, []string{"jobs", "list", "--kind="}, "--kind is empty: leave it out for jobs of every kind"},
		{"empty list after", nil, []string{"jobs", "list", "--after="}, "--after is empty"},
		{"empty cancel kind", nil, []string{"jobs", "cancel", "--kind=", "--queue", "default"}, "--kind is empty: name one, or leave the flag out"},
		{"unique states unfinished", nil, []string{"enqueue", "echo", "--unique-states", "completed,running"}, `--unique-states "running": want completed, discarded or cancelled`},
		{"client token with line break", nil, []string{"jobs", "list", "--api-token", "a\nb"}, "--api-token holds a control character"},
		{"client token from env with line break", []string{"LEASEHOLD_API_TOKEN=a\nb"}, []string{"workers", "list"}, "LEASEHOLD_API_TOKEN holds a control character"},
		{"daemon token with control character", nil, []string{"daemon", "--data", data, "--listen", "127.0.0.1:0", "--api-token", "a\x01b"}, "--api-token holds a control character"},
		{"daemon token file with control character", nil, []string{"daemon", "--data", data, "--listen", "127.0.0.1:0", "--api-token-file", tokenFile}, "without control characters"},
		{"client log level", nil, []string{"jobs", "list", "--log-level", "bogus"}, `jobs list: --log-level "bogus": want debug, info, warn or error`},
		{"client log format", nil, []string{"enqueue", "echo", "--log-format", "bogus"}, `enqueue: --log-format "bogus": want text, json or auto`},
		{"client log format from env", []string{"LEASEHOLD_LOG_FORMAT=xml"}, []string{"workers", "list"}, `LEASEHOLD_LOG_FORMAT "xml"`},
		{"namespace through a daemon", nil, []string{"enqueue", "echo", "--namespace", "other", "--server", srv}, "--namespace applies with --etcd: through a daemon (--server) the daemon's namespace is used"},
		{"server and etcd", nil, []string{"jobs", "list", "--server", srv, "--etcd", "http://" + closedPort(t)}, "--server and --etcd are both set: pass one of them"},
		{"cancel filter only from env", []string{"LEASEHOLD_QUEUE=q2", "LEASEHOLD_ALL=true"}, []string{"jobs", "cancel"}, "nothing to cancel: pass a job ID, or filters --state, --kind, --queue (or --all)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			switch {
			case len(args) == 0, args[0] == "daemon", args[0] == "bench", args[0] == "frob", len(args) > 1 && args[1] == "frob",
				strings.Contains(strings.Join(args, " "), "--server"), strings.Contains(strings.Join(args, " "), "--etcd"):
			default:
				args = append(append([]string{}, args...), "--server", srv)
			}
			r := runCLI(t, c.env, "", args...)
			checkOneLineError(t, strings.Join(c.args, " "), r, exitUsage, c.want)
		})
	}
	if _, err := os.Stat(data); err == nil {
		t.Errorf("a refused daemon created its data directory %s", data)
	}
}

func TestCLIUnreachableDaemon(t *testing.T) {
	srv := "http://" + closedPort(t)
	wantFor := func(cmd string) string {
		return "leasehold: " + cmd + ": cannot reach the daemon at " + srv + ": is 'leasehold daemon' running? (set --server)\n"
	}
	for _, c := range []struct {
		cmd  string
		args []string
	}{
		{"enqueue", []string{"enqueue", "echo", "--server", srv}},
		{"jobs list", []string{"jobs", "list", "--server", srv}},
		{"jobs wait", []string{"jobs", "wait", "--all", "--server", srv}},
		{"workers list", []string{"workers", "list", "--server", srv}},
	} {
		r := runCLI(t, nil, "", c.args...)
		if want := wantFor(c.cmd); r.code != exitFailure || r.stderr != want || r.stdout != "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 and %q", c.args, r.code, r.stderr, want)
		}
	}
	want := wantFor("jobs list")
	// Inside an --exec job, LEASEHOLD_KIND is the job's kind, not --kind
	// (an invalid --kind would be refused with exit 2 before any request).
	r := runCLI(t, []string{"LEASEHOLD_JOB_ID=01ARZ3NDEKTSV4RRFFQ69G5FAV", "LEASEHOLD_KIND=not a kind"}, "", "jobs", "list", "--server", srv)
	if r.code != exitFailure || r.stderr != want {
		t.Errorf("LEASEHOLD_KIND inside a job: exit %d, stderr %q", r.code, r.stderr)
	}
	// The server can come from the environment.
	r = runCLI(t, []string{"LEASEHOLD_SERVER=" + srv}, "", "jobs", "list")
	if r.code != exitFailure || r.stderr != want {
		t.Errorf("LEASEHOLD_SERVER: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestCLIDaemonFlow(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "--exec", "upper=tr a-z A-Z", "--concurrency", "8")
	srv := d.server

	id := strings.TrimSpace(okCLI(t, "enqueue", "sleep", `{"ms":50}`, "--server", srv))
	if err := coordinator.ValidateID(id); err != nil {
		t.Fatalf("enqueue printed %q: %v", id, err)
	}
	if out := okCLI(t, "jobs", "wait", id, "--server", srv, "--timeout", "20s"); out != id+" completed\n" {
		t.Errorf("jobs wait: %q", out)
	}
	j := getJobCLI(t, srv, id)
	if j.State != coordinator.StateCompleted || compactJSON(t, j.Result) != `{"slept_ms":50}` || j.Attempt != 1 {
		t.Errorf("jobs get --json: %+v", j)
	}
	if out := okCLI(t, "jobs", "get", id, "--server", srv); !strings.Contains(out, "state:") || !strings.Contains(out, "completed") {
		t.Errorf("jobs get: %s", out)
	}

	// --json prints the job objects; an exec kind runs.
	var jobs []coordinator.Job
	out := okCLI(t, "enqueue", "upper", `"shout"`, "--json", "--queue", "default", "--priority", "2", "--server", srv)
	if err := json.Unmarshal([]byte(out), &jobs); err != nil || len(jobs) != 1 || jobs[0].Priority != 2 {
		t.Fatalf("enqueue --json: %v %s", err, out)
	}
	okCLI(t, "jobs", "wait", jobs[0].ID, "--server", srv)
	if j := getJobCLI(t, srv, jobs[0].ID); compactJSON(t, j.Result) != `"SHOUT"` {
		t.Errorf("exec result: %s", j.Result)
	}

	// --count uses batches of 1000 and prints one id per line.
	out = okCLI(t, "enqueue", "echo", `{"n":1}`, "--count", "2100", "--server", srv)
	ids := strings.Fields(out)
	seen := map[string]bool{}
	for _, x := range ids {
		seen[x] = true
	}
	if len(ids) != 2100 || len(seen) != 2100 {
		t.Fatalf("enqueue --count 2100 printed %d ids (%d distinct)", len(ids), len(seen))
	}
	if out := okCLI(t, "jobs", "wait", "--all", "--timeout", "30s", "--server", srv); out != "all jobs final: completed=2102 discarded=0 cancelled=0\n" {
		t.Errorf("jobs wait --all: %q", out)
	}
	out = okCLI(t, "jobs", "list", "--json", "--limit", "10000", "--state", "completed", "--server", srv)
	if err := json.Unmarshal([]byte(out), &jobs); err != nil || len(jobs) != 2102 {
		t.Errorf("jobs list --json: %v, %d jobs", err, len(jobs))
	}
	out = okCLI(t, "jobs", "list", "--kind", "upper", "--server", srv)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], "upper") {
		t.Errorf("jobs list table:\n%s", out)
	}
	var workers []coordinator.WorkerInfo
	out = okCLI(t, "workers", "list", "--json", "--server", srv)
	if err := json.Unmarshal([]byte(out), &workers); err != nil || len(workers) != 1 || workers[0].Concurrency != 8 ||
		strings.Join(workers[0].Kinds, ",") != "echo,fail,sleep,upper" {
		t.Errorf("workers list --json: %v %s", err, out)
	}

	// Bad input the daemon refuses: exit 2, one line, nothing written.
	r := runCLI(t, nil, "", "enqueue", "resize", "--server", srv)
	checkOneLineError(t, "unknown kind", r, exitUsage, "unknown kind resize: this daemon runs echo, fail, sleep, upper")
	big := `{"blob":"` + strings.Repeat("x", 1<<20) + `"}`
	r = runCLI(t, nil, big, "enqueue", "echo", "-", "--server", srv)
	checkOneLineError(t, "oversized payload", r, exitUsage, "1048576-byte limit")
	r = runCLI(t, nil, "", "enqueue", "sleep", `{"ms":-5}`, "--server", srv)
	checkOneLineError(t, "bad sleep payload", r, exitUsage, "out of range")
	r = runCLI(t, nil, "", "jobs", "get", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "--server", srv)
	checkOneLineError(t, "unknown job", r, exitFailure, "not found")

	// Unique keys.
	first := strings.TrimSpace(okCLI(t, "enqueue", "echo", "--unique-key", "nightly", "--delay", "1h", "--server", srv))
	r = runCLI(t, nil, "", "enqueue", "echo", "--unique-key", "nightly", "--server", srv)
	if r.code != 0 || strings.TrimSpace(r.stdout) != first || !strings.Contains(r.stderr, "job "+first+" already exists with unique key nightly") {
		t.Errorf("unique key hit: %+v", r)
	}
	r = runCLI(t, nil, "", "jobs", "wait", first, "--timeout", "300ms", "--server", srv)
	checkOneLineError(t, "wait timeout", r, exitFailure, "timed out")
	if out := okCLI(t, "jobs", "cancel", first, "--server", srv); out != first+" cancelled\n" {
		t.Errorf("jobs cancel: %q", out)
	}
	r = runCLI(t, nil, "", "jobs", "cancel", first, "--server", srv)
	checkOneLineError(t, "cancel twice", r, exitFailure, "already cancelled")

	// Flags come from LEASEHOLD_* when not on the command line; the
	// command line wins, also over the environment variable of a
	// conflicting flag.
	at := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
	r = runCLI(t, []string{"LEASEHOLD_SERVER=" + srv, "LEASEHOLD_PRIORITY=3", "LEASEHOLD_DELAY=1h", "LEASEHOLD_JSON=true"}, "",
		"enqueue", "echo", "--at", at.Format(time.RFC3339), "--max-attempts", "7")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &jobs) != nil || len(jobs) != 1 {
		t.Fatalf("enqueue with env: %+v", r)
	}
	if j := jobs[0]; j.Priority != 3 || j.MaxAttempts != 7 || !j.ScheduledAt.Equal(at) {
		t.Errorf("enqueue with env: priority %d max_attempts %d scheduled_at %s", j.Priority, j.MaxAttempts, j.ScheduledAt)
	}
	r = runCLI(t, []string{"LEASEHOLD_SERVER=" + srv, "LEASEHOLD_PRIORITY=3"}, "", "enqueue", "echo", "--priority", "4", "--json", "--delay", "1h")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &jobs) != nil || jobs[0].Priority != 4 {
		t.Errorf("command line over env: %+v", r)
	}

	var st apiserver.StatsResponse
	if err := json.Unmarshal([]byte(httpGet(t, srv+"/v1/stats")), &st); err != nil || st.Total != 2105 {
		t.Errorf("stats after bad input: %v %+v", err, st)
	}
	if code := d.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("daemon exit code %d after SIGTERM:\n%s", code, d.log)
	}
}

func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("compact %s: %v", b, err)
	}
	return buf.String()
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

func TestCLISecondDaemonRefused(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir)
	r := runCLI(t, nil, "", "daemon", "--data", dir, "--listen", closedPort(t), "--log-format", "json")
	checkOneLineError(t, "second daemon", r, exitFailure, "data directory "+dir+" is in use")
	if !strings.Contains(r.stderr, fmt.Sprintf("pid %d", d.cmd.Process.Pid)) || !strings.Contains(r.stderr, "--data") {
		t.Errorf("refusal does not name the holder or the fix: %q", r.stderr)
	}
	// The first daemon is untouched.
	id := strings.TrimSpace(okCLI(t, "enqueue", "echo", "--server", d.server))
	if out := okCLI(t, "jobs", "wait", id, "--timeout", "20s", "--server", d.server); out != id+" completed\n" {
		t.Errorf("first daemon after the refusal: %q", out)
	}
}

func TestCLIRecoveryAndGracefulStop(t *testing.T) {
	dir := t.TempDir()
	// Killed with a job running: the restart re-queues it at once and it
	// runs again without using an attempt.
	a := startDaemon(t, dir)
	id := strings.TrimSpace(okCLI(t, "enqueue", "sleep", `{"ms":1000}`, "--server", a.server))
	waitStateCLI(t, a.server, id, coordinator.StateRunning)
	a.stop(t, syscall.SIGKILL)

	b := startDaemon(t, dir, "--shutdown-timeout", "100ms")
	if b.log.requeued() != 1 {
		t.Errorf("restart did not re-queue the job:\n%s", b.log)
	}
	okCLI(t, "jobs", "wait", id, "--timeout", "20s", "--server", b.server)
	j := getJobCLI(t, b.server, id)
	if j.State != coordinator.StateCompleted || j.Attempt != 1 || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "run lost") {
		t.Errorf("job after recovery: state %s attempt %d errors %+v", j.State, j.Attempt, j.Errors)
	}

	// SIGTERM with a job running past --shutdown-timeout: the daemon stops
	// promptly, exits 0, and the job is released for the next run.
	id2 := strings.TrimSpace(okCLI(t, "enqueue", "sleep", `{"ms":60000}`, "--server", b.server))
	waitStateCLI(t, b.server, id2, coordinator.StateRunning)
	start := time.Now()
	if code := b.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("graceful stop took %s with --shutdown-timeout 100ms", took)
	}
	c := startDaemon(t, dir, "--shutdown-timeout", "100ms")
	if strings.Contains(c.log.String(), "re-queued 1 jobs") {
		t.Errorf("graceful stop left its job running:\n%s", b.log)
	}
	j = getJobCLI(t, c.server, id2)
	if j.State.Final() || j.Attempt > 2 {
		t.Errorf("released job: state %s attempt %d", j.State, j.Attempt)
	}
}

// --data and --etcd both on the command line of a command that takes
// either store is refused (the directory would be ignored); from the
// environment, --etcd still chooses shared mode.
func TestDataAndEtcdTogetherRefused(t *testing.T) {
	dir := t.TempDir()
	for _, cmd := range []string{"daemon", "bench"} {
		r := runCLI(t, nil, "", cmd, "--data", dir, "--etcd", "http://127.0.0.1:1")
		checkOneLineError(t, cmd+" --data --etcd", r, exitUsage, "--data and --etcd are both set")
	}
	r := runCLI(t, []string{"LEASEHOLD_ETCD=http://127.0.0.1:1"}, "", "bench", "--data", dir)
	checkOneLineError(t, "bench --data, LEASEHOLD_ETCD", r, exitUsage, "--data is the embedded store's directory")
	r = runCLI(t, nil, "", "bench", "--data", dir, "--mode", "shared")
	checkOneLineError(t, "bench --data --mode shared", r, exitUsage, "--data is the embedded store's directory")
	// The embedded store's disk reserve means nothing on etcd.
	r = runCLI(t, nil, "", "daemon", "--min-free-disk", "1GiB", "--etcd", "http://127.0.0.1:1")
	checkOneLineError(t, "daemon --min-free-disk --etcd", r, exitUsage, "--min-free-disk and --etcd are both set")
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("the refused commands wrote into --data: %v, %v", entries, err)
	}
}

// A shared daemon given --min-free-disk or --data by its config file (or
// the environment), where --etcd chose shared mode, says that it ignores
// them: an operator who set a reserve must not believe it is kept.
func TestSharedDaemonSaysItIgnoresMinFreeDisk(t *testing.T) {
	cfg := writeFile(t, t.TempDir(), "config.yaml", "min-free-disk: 1GiB\netcd: http://"+closedPort(t)+"\n")
	p := spStart(t, "daemon", binPath, "daemon", "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json")
	l, _ := p.waitLog(t, 0, "the warning that --min-free-disk is ignored", func(l spLine) bool {
		return l.str("level") == "WARN" && strings.HasPrefix(l.Msg, "settings of the embedded store are ignored in shared mode")
	})
	if got := fmt.Sprint(l.Fields["settings"]); got != "[--min-free-disk]" {
		t.Errorf("settings %s, want [--min-free-disk]", got)
	}
}

// A daemon says at start, once each, which of its secrets other users of
// the host can read: a token on its command line (ps shows it), a token
// file or TLS key that group or others may read. A 0600 file draws no
// warning.
func TestDaemonWarnsOfExposedSecrets(t *testing.T) {
	dir := t.TempDir()
	cert, key := testutil.WriteCert(t, dir)
	tokenFile := writeFile(t, dir, "token", "s3cret\n")
	if err := os.Chmod(tokenFile, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		keyMode os.FileMode
		token   []string
		want    []string // each warning's flag, "" for the command line's token
	}{
		{"token on the command line, readable key", 0o644, []string{"--api-token", "s3cret"}, []string{"", "--tls-key"}},
		{"private files", 0o600, []string{"--api-token-file", tokenFile}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.Chmod(key, c.keyMode); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"daemon", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--log-format", "json",
				"--tls-cert", cert, "--tls-key", key}, c.token...)
			p := spStart(t, "daemon", binPath, args...)
			defer p.stop(t)
			_, n := p.waitLog(t, 0, "its listening line", func(l spLine) bool { return l.Msg == "listening" })
			var got []string
			p.log.mu.Lock()
			for _, l := range p.log.lines[:n] {
				switch {
				case l.Msg == "a secret file is readable by other users of the host: chmod 600 it":
					got = append(got, l.str("flag"))
				case strings.HasPrefix(l.Msg, "--api-token is on the command line"):
					got = append(got, "")
				}
			}
			p.log.mu.Unlock()
			if !slices.Equal(got, c.want) {
				t.Errorf("warnings for %q, want %q:\n%s", got, c.want, p.log)
			}
		})
	}
}
