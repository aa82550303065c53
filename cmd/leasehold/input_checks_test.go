package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apicall"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// TestEnqueueCountSplitsBatchesBySize: 1000 jobs of 20 KB are over
// apicall.BatchBytes, the most a batch request carries (half of what a
// daemon always takes); enqueue --count splits them by size as well as by
// count, and every job is sent once. A server that answers without storing stands in for the daemon:
// under the race detector a daemon takes seconds over each 16 MiB batch.
func TestEnqueueCountSplitsBatchesBySize(t *testing.T) {
	payload, err := json.Marshal(map[string]string{"blob": strings.Repeat("x", 20<<10)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sizes []int64
	var jobs int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req apiserver.BatchRequest
		if r.URL.Path != "/v1/jobs/batch" || json.NewDecoder(r.Body).Decode(&req) != nil {
			apiserver.WriteError(w, http.StatusBadRequest, "want a batch")
			return
		}
		var res apiserver.BatchResponse
		mu.Lock()
		sizes = append(sizes, r.ContentLength)
		for range req.Jobs {
			jobs++
			res.Jobs = append(res.Jobs, &coordinator.Job{ID: fmt.Sprintf("01ARZ3NDEKTSV4RRFFQ69G%04d", jobs)})
			res.Existed = append(res.Existed, false)
		}
		mu.Unlock()
		apiserver.WriteJSON(w, http.StatusCreated, res)
	}))
	defer srv.Close()
	code, out, errs := runInProcess("enqueue", "echo", string(payload), "--count", "1000", "--server", srv.URL)
	if code != 0 {
		t.Fatalf("enqueue --count 1000 of 20 KB: exit %d: %s", code, errs)
	}
	ids := strings.Fields(out)
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	if len(ids) != 1000 || len(seen) != 1000 || jobs != 1000 {
		t.Errorf("printed %d ids (%d distinct), sent %d jobs; want 1000", len(ids), len(seen), jobs)
	}
	if len(sizes) < 2 {
		t.Errorf("%d requests (%v bytes), want at least 2 of at most %d bytes", len(sizes), sizes, apicall.BatchBytes)
	}
	for _, n := range sizes {
		if n > apicall.BatchBytes+64<<10 {
			t.Errorf("a request of %d bytes, over the client's batch size %d", n, apicall.BatchBytes)
		}
	}
	// Small jobs still go 1000 to a batch.
	if n, err := batchSize(apiserver.CreateRequest{Kind: "echo"}); err != nil || n != apicall.BatchJobs {
		t.Errorf("batchSize of a small job = %d, %v; want %d", n, err, apicall.BatchJobs)
	}
}

// TestCancelFiltersNotFromEnvironment: LEASEHOLD_QUEUE and the like, set
// for other commands, are no filters of jobs cancel: a forgotten ID does
// not cancel a whole queue, a given ID is not refused, and explicit
// filters are not narrowed or widened by them.
func TestCancelFiltersNotFromEnvironment(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	var q2 []*coordinator.Job
	for range 3 {
		q2 = append(q2, e.create(t, apiserver.CreateRequest{Kind: "echo", Queue: "q2", Delay: "1h"}))
	}
	other := e.create(t, apiserver.CreateRequest{Kind: "echo", Delay: "1h"})
	t.Setenv("LEASEHOLD_QUEUE", "q2")
	t.Setenv("LEASEHOLD_STATE", "scheduled")
	t.Setenv("LEASEHOLD_KIND", "echo")
	t.Setenv("LEASEHOLD_ALL", "true")
	state := func(id string) coordinator.State {
		t.Helper()
		j, err := e.coord.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return j.State
	}

	code, out, errs := runInProcess("jobs", "cancel", "--server", e.srv.URL)
	if code != exitUsage || !strings.Contains(errs, "nothing to cancel") {
		t.Errorf("jobs cancel without ID or flags: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for _, j := range q2 {
		if st := state(j.ID); st != coordinator.StateScheduled {
			t.Fatalf("job %s of q2 is %s after a cancel without ID", j.ID, st)
		}
	}

	code, out, errs = runInProcess("jobs", "cancel", other.ID, "--server", e.srv.URL)
	if code != 0 || out != other.ID+" cancelled\n" {
		t.Errorf("jobs cancel ID: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	t.Setenv("LEASEHOLD_QUEUE", "default")
	code, out, errs = runInProcess("jobs", "cancel", "--queue", "q2", "--server", e.srv.URL)
	if code != 0 || !strings.HasPrefix(out, "cancelled 3 jobs") {
		t.Errorf("jobs cancel --queue q2: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestServerAndEtcdTogether: --server and --etcd from one source are
// refused; from two, the stronger one (command line, then environment,
// then config file) wins.
func TestServerAndEtcdTogether(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	etcd := "http://" + closedPort(t) // reaching it would fail (exit 1)
	dir := t.TempDir()
	both := writeFile(t, dir, "both.yaml", "server: "+e.srv.URL+"\netcd: "+etcd+"\n")
	etcdOnly := writeFile(t, dir, "etcd.yaml", "etcd: "+etcd+"\n")
	cases := []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string // in stderr
	}{
		{"both from env", map[string]string{"LEASEHOLD_SERVER": e.srv.URL, "LEASEHOLD_ETCD": etcd}, nil, exitUsage, "LEASEHOLD_SERVER and LEASEHOLD_ETCD are both set: set one of them"},
		{"both in config file", nil, []string{"--config", both}, exitUsage, "server and etcd are both set in the config file"},
		{"--server over env etcd", map[string]string{"LEASEHOLD_ETCD": etcd}, []string{"--server", e.srv.URL}, 0, ""},
		{"--server over config etcd", nil, []string{"--config", etcdOnly, "--server", e.srv.URL}, 0, ""},
		{"env server over config etcd", map[string]string{"LEASEHOLD_SERVER": e.srv.URL}, []string{"--config", etcdOnly}, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			code, out, errs := runInProcess(append([]string{"jobs", "list", "--json"}, c.args...)...)
			if code != c.code || !strings.Contains(errs, c.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errs, c.code, c.want)
			}
			if c.code == 0 && strings.TrimSpace(out) != "[]" {
				t.Errorf("stdout %q, want the empty list of the daemon at --server", out)
			}
		})
	}
}

// TestDaemonConfigFileBounds: the daemon refuses from its config file
// what it refuses on the command line, before it opens its data.
func TestDaemonConfigFileBounds(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, c := range []struct{ content, want string }{
		{"concurrency: 2000000000\n", ": line 1: concurrency 2000000000: want 1 to 100000"},
		{"listen: 127.0.0.1:99999\n", `bad port "99999"`},
	} {
		p := writeFile(t, t.TempDir(), "config.yaml", c.content)
		r := runCLI(t, nil, "", "daemon", "--config", p, "--data", data)
		checkOneLineError(t, c.content, r, exitUsage, c.want)
	}
	if _, err := os.Stat(data); err == nil {
		t.Errorf("a refused daemon created its data directory %s", data)
	}
}
