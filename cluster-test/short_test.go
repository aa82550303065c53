package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The cluster tests start real processes (3 etcd members, daemons) and take
// 2-3 minutes each, so a plain `go test ./...` skips them. Run them with
//
//	LEASEHOLD_CLUSTER_TEST=1 go test -timeout 20m -run 'TestShort' -v ./cluster-test
//
// LEASEHOLD_CLUSTER_TEST_SEED fixes the seed; LEASEHOLD_CLUSTER_TEST_OUT
// keeps the output (report.json, timeline.svg, violations.txt, logs,
// histories) in that directory instead of the test's temporary one.
func clusterTest(t *testing.T, extra ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("cluster test: skipped with -short")
	}
	if os.Getenv("LEASEHOLD_CLUSTER_TEST") != "1" {
		t.Skip("cluster test: set LEASEHOLD_CLUSTER_TEST=1 to run it (2-3 minutes of real processes)")
	}
	out := t.TempDir()
	if dir := os.Getenv("LEASEHOLD_CLUSTER_TEST_OUT"); dir != "" {
		out = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
	}
	args := append([]string{"--short", "--out", out}, extra...)
	if seed := os.Getenv("LEASEHOLD_CLUSTER_TEST_SEED"); seed != "" {
		args = append(args, "--seed", seed)
	}
	var errBuf bytes.Buffer
	cfg, err := parseFlags(args, &errBuf)
	if err != nil {
		t.Fatalf("flags %v: %v %s", args, err, errBuf.String())
	}
	code, summary := run(t.Context(), cfg, &lineLogger{t: t})
	if code != 0 {
		t.Fatalf("exit code %d: %s (output in %s)", code, summary, out)
	}
}

func TestShort(t *testing.T) { clusterTest(t) }

func TestShortEmbedded(t *testing.T) { clusterTest(t, "--mode", "embedded") }

// TestShortBrokenBuild is the proof that the harness can fail: a binary
// built without the fencing condition (tag leasehold_nofence) must make it
// report violations.
func TestShortBrokenBuild(t *testing.T) {
	if os.Getenv("LEASEHOLD_CLUSTER_TEST") != "1" || testing.Short() {
		clusterTest(t) // skips, saying why
		return
	}
	bin := filepath.Join(t.TempDir(), "leasehold-nofence")
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-tags", "leasehold_nofence", "-o", bin, "./cmd/leasehold")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags leasehold_nofence: %v\n%s", err, out)
	}
	clusterTest(t, "--binary", bin, "--expect-violations")
}

// lineLogger sends the harness's output to t.Log, a line at a time.
type lineLogger struct {
	t   *testing.T
	mu  sync.Mutex
	buf []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.t.Log(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
}
