package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

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
