package main

import (
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leasehold/leasehold/coordinator"
)

// A daemon whose disk has less free space than --min-free-disk refuses new
// jobs (the CLI exits 1 with one line naming the flag; the API answers
// 507) and writes nothing for them, while it runs the jobs it already
// holds to the end; with no reserve it takes new jobs again. The reserve
// is set above what the test's disk has free.
func TestDiskShortRefusesNewJobsOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	d := startDaemon(t, dir)
	held := strings.Fields(okCLI(t, "enqueue", "echo", `{"n":1}`, "--queue", "held", "--count", "3", "--server", d.server))
	if len(held) != 3 {
		t.Fatalf("enqueue --count 3 printed %q", held)
	}
	d.stop(t, syscall.SIGTERM)

	u, err := vfs.Default.GetDiskUsage(dir)
	if err != nil {
		t.Skipf("cannot read the free space of the test's disk: %v", err)
	}
	reserve := u.AvailBytes + 1<<30
	if reserve > 1<<40 {
		t.Skipf("%d bytes free: over what --min-free-disk takes", u.AvailBytes)
	}
	d = startDaemon(t, dir, "--queues", "default,held", "--min-free-disk", strconv.FormatUint(reserve, 10))
	for _, id := range held {
		waitStateCLI(t, d.server, id, coordinator.StateCompleted)
	}
	r := runCLI(t, nil, "", "enqueue", "echo", `{"n":2}`, "--server", d.server)
	checkOneLineError(t, "enqueue on a disk short of space", r, 1, "the daemon's disk is short of space")
	if !strings.Contains(r.stderr, "under the") || !strings.Contains(r.stderr, "lower --min-free-disk") {
		t.Errorf("the refusal does not give the figures and what to do: %q", r.stderr)
	}
	resp, err := http.Post(d.server+"/v1/jobs/batch", "application/json", strings.NewReader(`{"jobs":[{"kind":"echo"},{"kind":"echo"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error string `json:"error"`
	}
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusInsufficientStorage || !strings.Contains(body.Error, "short of space") {
		t.Fatalf("POST /v1/jobs/batch on a disk short of space: %d %q (%v), want 507 saying so", resp.StatusCode, body.Error, err)
	}
	if jobs := listAll(t, d.server); len(jobs) != 3 {
		t.Fatalf("%d jobs after the refusals, want the 3 held", len(jobs))
	}
	if n := strings.Count(d.log.String(), "disk space is short"); n != 1 {
		t.Errorf("two refusals logged the shortage %d times, want once:\n%s", n, d.log)
	}
	d.stop(t, syscall.SIGTERM)

	d = startDaemon(t, dir, "--min-free-disk", "0")
	okCLI(t, "enqueue", "echo", `{"n":3}`, "--server", d.server)
}

// A daemon whose store fails after a write error (a WAL write refused: a
// file size limit here, a full disk in production) stops with exit code 1
// and one line saying why and what to do, rather than living on with every
// call failing; started again, it has every job acknowledged before the
// failure, and re-queues the one it was running.
func TestDaemonStopsWhenItsStoreFails(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to set a file size limit with")
	}
	dir := filepath.Join(t.TempDir(), "data")
	d := startDaemonCmd(t, fileSizeLimited(dir, "--queues", "default"))
	running := strings.TrimSpace(okCLI(t, "enqueue", "sleep", `{"ms":60000}`, "--server", d.server))
	waitStateCLI(t, d.server, running, coordinator.StateRunning)

	acked := fillUntilRefused(t, d.server)
	refusedAt := time.Now()
	select {
	case <-d.done:
	case <-time.After(45 * time.Second):
		t.Fatalf("the daemon lives on 45 s after its store failed:\n%s", d.log)
	}
	// Nothing can be recorded on a failed store: the running job's
	// release is not retried until the drain's grace ends (it was, for
	// 10 s, a warning a second, with the watches' two a second beside it).
	if took := time.Since(refusedAt); took > 5*time.Second || strings.Contains(d.log.String(), "recording outcome failed; retrying") {
		t.Errorf("the daemon took %v to stop after its store failed, retrying what it could not record:\n%s", took, d.log)
	}
	if code := d.cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("the daemon exited %d after its store failed, want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(d.log.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "leasehold: daemon: the store failed after a write error (") || !strings.Contains(last, "file too large") || !strings.Contains(last, "start the daemon again") {
		t.Errorf("the daemon's last line %q does not say the store failed, why, and what to do", last)
	}

	d = startDaemon(t, dir, "--queues", "bulk")
	if n := d.log.requeued(); n != 1 {
		t.Errorf("the restart re-queued %d jobs left running, want the one sleep job", n)
	}
	jobs := listAll(t, d.server)
	for _, id := range acked {
		if jobs[id] == nil {
			t.Fatalf("job %s, acknowledged before the store failed, is lost (%d of %d acknowledged jobs there)", id, len(jobs)-1, len(acked))
		}
	}
	if j := jobs[running]; j == nil || j.State != coordinator.StateAvailable {
		t.Errorf("the job running when the store failed: %+v, want it available again", j)
	}
}

// A store that fails while a signal's stop drains the running jobs makes
// the daemon exit 1 too, saying why: the stop did not record everything.
func TestDaemonStoreFailingDuringAStopExits1(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to set a file size limit with")
	}
	dir := filepath.Join(t.TempDir(), "data")
	d := startDaemonCmd(t, fileSizeLimited(dir, "--queues", "default", "--shutdown-timeout", "3s"))
	running := strings.TrimSpace(okCLI(t, "enqueue", "sleep", `{"ms":60000}`, "--server", d.server))
	waitStateCLI(t, d.server, running, coordinator.StateRunning)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	// The API serves during the drain: fill the store until it fails.
	fillUntilRefused(t, d.server)
	select {
	case <-d.done:
	case <-time.After(45 * time.Second):
		t.Fatalf("the daemon lives on 45 s after its store failed during a stop:\n%s", d.log)
	}
	if code := d.cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("the daemon exited %d after its store failed during a stop, want 1:\n%s", code, d.log)
	}
	lines := strings.Split(strings.TrimSpace(d.log.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "leasehold: daemon: the store failed after a write error (") {
		t.Errorf("the daemon's last line %q does not say the store failed", last)
	}
}

// fileSizeLimited is a daemon on dir (see daemonArgs) whose files may not
// grow past 8,000 blocks of 512 bytes (dash) or 1 KiB (bash): a WAL file,
// which grows to the 16 MiB memtable, reaches it, and the store fails as
// on a full disk, with no root or small file system needed.
func fileSizeLimited(dir string, args ...string) *exec.Cmd {
	return exec.Command("sh", append([]string{"-c", `ulimit -f 8000 && exec "$0" "$@"`, binPath}, daemonArgs(dir, args...)...)...)
}

// fillUntilRefused enqueues batches of 50 jobs of 60 KB of random payload
// into queue bulk until an enqueue fails, and returns the ids acknowledged
// before.
func fillUntilRefused(t *testing.T, server string) []string {
	t.Helper()
	var acked []string
	for range 60 { // 150 MB: far over the limit
		pad := make([]byte, 45000)
		_, _ = crand.Read(pad)
		payload, _ := json.Marshal(map[string]string{"pad": base64.StdEncoding.EncodeToString(pad)})
		r := runCLI(t, nil, "", "enqueue", "echo", string(payload), "--queue", "bulk", "--count", "50", "--server", server)
		if r.code != 0 {
			return acked
		}
		acked = append(acked, strings.Fields(r.stdout)...)
	}
	t.Fatal("150 MB enqueued under a file size limit of at most 8 MB, and no enqueue failed")
	return nil
}
