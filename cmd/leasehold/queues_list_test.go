package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// queues list prints every queue, read a page of queuesPage at a time: as
// a table with one header, or as one JSON array written as a whole one
// was before paging; --limit N prints N and, on stderr, the flags that
// list the next ones; a bad --limit or --after is a usage error.
func TestQueuesListPages(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	ctx := context.Background()
	n := 2*queuesPage + 5 // three pages
	var names []string
	var ps []coordinator.EnqueueParams
	for i := range n {
		names = append(names, fmt.Sprintf("q%05d", i))
		ps = append(ps, coordinator.EnqueueParams{Kind: "echo", Queue: names[i]})
	}
	if _, err := e.coord.EnqueueBatch(ctx, ps); err != nil {
		t.Fatal(err)
	}
	srv := e.srv.URL

	out := okCLI(t, "queues", "list", "--json", "--server", srv)
	var got []coordinator.QueueInfo
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("queues list --json is not JSON: %v\n%.500s", err, out)
	}
	var gotNames []string
	for _, q := range got {
		gotNames = append(gotNames, q.Name)
	}
	if !slices.Equal(gotNames, names) {
		t.Fatalf("queues list --json: %d queues, want each of %d once in name order", len(gotNames), len(names))
	}
	// Byte for byte what printJSON makes of the whole list.
	all, err := e.coord.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.MarshalIndent(all, "", "  ")
	if out != string(want)+"\n" {
		t.Errorf("queues list --json differs from the whole array printed at once")
	}

	out = okCLI(t, "queues", "list", "--server", srv)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != n+1 || !strings.HasPrefix(lines[0], "QUEUE ") || strings.Count(out, "QUEUE") != 1 || !strings.HasPrefix(lines[n], names[n-1]+" ") {
		t.Errorf("queues list: %d lines, want a header and %d queues", len(lines), n)
	}

	r := runCLI(t, nil, "", "queues", "list", "--limit", "3", "--server", srv)
	if r.code != 0 || r.stdout != okCLI(t, "queues", "list", "--limit", "3", "--server", srv) || strings.Count(r.stdout, "\n") != 4 ||
		r.stderr != "leasehold: queues list: more queues: run again with --limit 3 --after q00002\n" {
		t.Errorf("queues list --limit 3: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, "", "queues", "list", "--limit", "3", "--after", "q00002", "--json", "--server", srv)
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 3 || got[0].Name != "q00003" || !strings.Contains(r.stderr, "--after q00005") {
		t.Errorf("queues list --limit 3 --after q00002 --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, "", "queues", "list", "--after", names[n-1], "--json", "--server", srv)
	if r.code != 0 || r.stdout != "[]\n" || r.stderr != "" {
		t.Errorf("queues list after the last queue: exit %d %q %q, want []", r.code, r.stdout, r.stderr)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--limit", "0"}, "--limit 0: want 1 to 10000"},
		{[]string{"--limit", "10001"}, "--limit 10001: want 1 to 10000"},
		{[]string{"--after", "bad/name"}, "not a cursor that a listing printed"},
		{[]string{"--after", ""}, "leave it out"},
	} {
		r := runCLI(t, nil, "", append([]string{"queues", "list", "--server", srv}, c.args...)...)
		checkOneLineError(t, "queues list "+strings.Join(c.args, " "), r, exitUsage, c.want)
	}
}

// A daemon from before paging refuses limit: queues list then asks for
// every queue at once, as it did; with --limit or --after it says to
// upgrade. The daemon names the first unknown parameter in name order, as
// its checkQuery did: "after" when both are given.
func TestQueuesListOlderDaemon(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); len(q) > 0 {
			apiserver.WriteError(w, http.StatusBadRequest, fmt.Sprintf("unknown query parameter %q: this endpoint takes none", apiserver.SortedKeys(q)[0]))
			return
		}
		apiserver.WriteJSON(w, http.StatusOK, apiserver.QueuesResponse{Queues: []coordinator.QueueInfo{{QueueConfig: coordinator.QueueConfig{Name: "a"}, Workers: []string{}}}})
	}))
	defer srv.Close()
	if out := okCLI(t, "queues", "list", "--json", "--server", srv.URL); !strings.Contains(out, `"name": "a"`) {
		t.Errorf("queues list from an older daemon: %q", out)
	}
	for _, args := range [][]string{{"--limit", "5"}, {"--after", "a"}, {"--limit", "5", "--after", "a"}} {
		r := runCLI(t, nil, "", append([]string{"queues", "list", "--server", srv.URL}, args...)...)
		checkOneLineError(t, "queues list "+strings.Join(args, " ")+" from an older daemon", r, exitUsage, "upgrade it")
	}
}

// pagingDaemon serves GET /v1/queues over names (sorted) in pages, as the
// daemon does, answering 503 to page number failPage (1 is the first; 0:
// none). The function it returns gives the cursors it was asked for.
func pagingDaemon(t *testing.T, names []string, failPage int) (*httptest.Server, func() []string) {
	t.Helper()
	var afters []string
	var mu sync.Mutex
	pages := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		q := r.URL.Query()
		pages++
		afters = append(afters, q.Get("after"))
		if pages == failPage {
			w.Header().Set("Retry-After", "1")
			apiserver.WriteError(w, http.StatusServiceUnavailable, "the store did not answer within 10s")
			return
		}
		limit, err := strconv.Atoi(q.Get("limit"))
		if err != nil {
			apiserver.WriteError(w, http.StatusBadRequest, "bad limit")
			return
		}
		i, _ := slices.BinarySearch(names, q.Get("after"))
		if i < len(names) && q.Get("after") != "" && names[i] == q.Get("after") {
			i++
		}
		var res apiserver.QueuesResponse
		for _, n := range names[i:min(len(names), i+limit)] {
			res.Queues = append(res.Queues, coordinator.QueueInfo{QueueConfig: coordinator.QueueConfig{Name: n}, Available: 1, Workers: []string{}})
		}
		if i+limit < len(names) {
			res.Next = res.Queues[len(res.Queues)-1].Name
		}
		apiserver.WriteJSON(w, http.StatusOK, res)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(afters)
	}
}

// queues list --json whose second page fails prints nothing on stdout
// (before, the first page's part of the array, which is not JSON), and
// the error on stderr, exit 1; the table prints the pages that came. When
// every page comes, the array is byte for byte the whole one.
func TestQueuesListJSONPageFails(t *testing.T) {
	var names []string
	for i := range queuesPage + 5 {
		names = append(names, fmt.Sprintf("q%05d", i))
	}
	srv, _ := pagingDaemon(t, names, 2)
	r := runCLI(t, nil, "", "queues", "list", "--json", "--server", srv.URL)
	if r.code != exitFailure || r.stdout != "" || !strings.Contains(r.stderr, "did not answer") {
		t.Errorf("queues list --json, second page failing: exit %d, stdout %.200q, stderr %q; want exit %d, nothing on stdout and the error", r.code, r.stdout, r.stderr, exitFailure)
	}
	srv, _ = pagingDaemon(t, names, 2)
	r = runCLI(t, nil, "", "queues", "list", "--server", srv.URL)
	if r.code != exitFailure || strings.Count(r.stdout, "\n") != queuesPage+1 {
		t.Errorf("queues list, second page failing: exit %d, %d lines; want exit %d and the first page's %d lines", r.code, strings.Count(r.stdout, "\n"), exitFailure, queuesPage+1)
	}

	srv, _ = pagingDaemon(t, names, 0)
	out := okCLI(t, "queues", "list", "--json", "--server", srv.URL)
	var all []coordinator.QueueInfo
	for _, n := range names {
		all = append(all, coordinator.QueueInfo{QueueConfig: coordinator.QueueConfig{Name: n}, Available: 1, Workers: []string{}})
	}
	if want, _ := json.MarshalIndent(all, "", "  "); out != string(want)+"\n" {
		t.Errorf("queues list --json over two pages differs from the whole array printed at once")
	}
}

// A page that ends on a queue named "." or ".." (names that builds before
// 2026-12-03 took) gives a cursor that --after takes, as it takes any
// other: it is a position, not a new queue's name.
func TestQueuesListAfterDotQueue(t *testing.T) {
	srv, afters := pagingDaemon(t, []string{".", "..", "a"}, 0)
	r := runCLI(t, nil, "", "queues", "list", "--limit", "1", "--json", "--server", srv.URL)
	if r.code != 0 || !strings.Contains(r.stderr, "--after .\n") {
		t.Fatalf("queues list --limit 1: exit %d %q %q, want the cursor . on stderr", r.code, r.stdout, r.stderr)
	}
	for _, after := range []string{".", ".."} {
		r = runCLI(t, nil, "", "queues", "list", "--limit", "1", "--after", after, "--json", "--server", srv.URL)
		var got []coordinator.QueueInfo
		if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil || len(got) != 1 || got[0].Name == after || slices.Index(afters(), after) < 0 {
			t.Errorf("queues list --after %s: exit %d %q %q, want the next queue", after, r.code, r.stdout, r.stderr)
		}
	}
}
