package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// A filtered page may come back short, even empty, with a cursor (it looks
// through a bounded number of jobs): jobs list pages on, and when its own
// bound of pages ends it says that more may match and how to go on,
// rather than looking like the end of the listing.
func TestJobsListShortPageSaysHowToContinue(t *testing.T) {
	const next = "0000000000000000001/01ARZ3NDEKTSV4RRFFQ69G5FAV"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		apiserver.WriteJSON(w, http.StatusOK, coordinator.ListPage{Jobs: []*coordinator.Job{}, Next: next})
	}))
	defer srv.Close()
	for _, json := range []bool{false, true} {
		args := []string{"jobs", "list", "--state", "discarded", "--limit", "1", "--server", srv.URL}
		if json {
			args = append(args, "--json")
		}
		code, out, errs := runInProcess(args...)
		if code != 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
		if want := "ID"; !json && (strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, want)) {
			t.Errorf("%v: stdout %q, want the header only", args, out)
		}
		if json && strings.TrimSpace(out) != "[]" {
			t.Errorf("%v: stdout %q, want []", args, out)
		}
		if strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "leasehold: jobs list: ") ||
			!strings.Contains(errs, "more may match: run again with --state discarded --limit 1 --after "+next+"\n") {
			t.Errorf("%v: stderr %q, want one line saying more may match and how to continue", args, errs)
		}
	}
}

// jobs list pages on through short pages until it has --limit jobs or
// the listing ends, asking each page for what is still missing.
func TestJobsListPagesOnToTheLimit(t *testing.T) {
	job := func(id string) *coordinator.Job {
		return &coordinator.Job{ID: id, Kind: "echo", Queue: "default", State: coordinator.StateDiscarded}
	}
	pages := map[string]coordinator.ListPage{ // by the after it answers
		"":   {Jobs: []*coordinator.Job{}, Next: "c1"},
		"c1": {Jobs: []*coordinator.Job{job("01ARZ3NDEKTSV4RRFFQ69G5FA1")}, Next: "c2"},
		"c2": {Jobs: []*coordinator.Job{job("01ARZ3NDEKTSV4RRFFQ69G5FA2")}, Next: "c3"},
		"c3": {Jobs: []*coordinator.Job{job("01ARZ3NDEKTSV4RRFFQ69G5FA3")}},
	}
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Query().Get("after")+"/"+r.URL.Query().Get("limit"))
		mu.Unlock()
		apiserver.WriteJSON(w, http.StatusOK, pages[r.URL.Query().Get("after")])
	}))
	defer srv.Close()
	for _, tc := range []struct {
		limit         string
		jobs          int
		asked, stderr string
	}{
		{"2", 2, "/2 c1/2 c2/1", "more jobs: run again with --state discarded --limit 2 --after c3"},
		{"5", 3, "/5 c1/5 c2/4 c3/3", ""},
	} {
		asked = nil
		code, out, errs := runInProcess("jobs", "list", "--state", "discarded", "--limit", tc.limit, "--server", srv.URL)
		if code != 0 || strings.Count(out, "01ARZ3NDEKTSV4RRFFQ69G5FA") != tc.jobs {
			t.Errorf("--limit %s: exit %d, stdout %q; want %d jobs", tc.limit, code, out, tc.jobs)
		}
		if got := strings.Join(asked, " "); got != tc.asked {
			t.Errorf("--limit %s: asked for after/limit %s, want %s", tc.limit, got, tc.asked)
		}
		if (tc.stderr == "" && errs != "") || !strings.Contains(errs, tc.stderr) {
			t.Errorf("--limit %s: stderr %q, want %q", tc.limit, errs, tc.stderr)
		}
	}
}

// jobs list --state running shows which daemon runs each job and since
// when, in place of when it was created; other listings keep CREATED.
func TestJobsListRunningShowsOwnerAndStart(t *testing.T) {
	started := time.Date(2026, 12, 6, 1, 2, 3, 0, time.UTC)
	created := started.Add(-time.Hour)
	jobs := []*coordinator.Job{
		{ID: "01ARZ3NDEKTSV4RRFFQ69G5FA1", Kind: "echo", Queue: "default", State: coordinator.StateRunning,
			Attempt: 1, MaxAttempts: 25, CreatedAt: created, AttemptedAt: &started, Owner: "host-1-abc"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		apiserver.WriteJSON(w, http.StatusOK, coordinator.ListPage{Jobs: jobs})
	}))
	defer srv.Close()
	code, out, errs := runInProcess("jobs", "list", "--state", "running", "--server", srv.URL)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "ID KIND QUEUE STATE ATTEMPT OWNER STARTED" {
		t.Fatalf("stdout %q, want a header with OWNER and STARTED and one job", out)
	}
	if !strings.Contains(lines[1], "host-1-abc") || !strings.Contains(lines[1], fmtTime(started)) || strings.Contains(lines[1], fmtTime(created)) {
		t.Errorf("row %q, want the owner and the start time %s (not the creation time)", lines[1], fmtTime(started))
	}
	code, out, errs = runInProcess("jobs", "list", "--server", srv.URL)
	if code != 0 || !strings.HasPrefix(strings.Join(strings.Fields(out), " "), "ID KIND QUEUE STATE ATTEMPT CREATED 01ARZ3NDEKTSV4RRFFQ69G5FA1") ||
		!strings.Contains(out, fmtTime(created)) {
		t.Errorf("jobs list without --state: exit %d, stdout %q, stderr %q; want the CREATED column", code, out, errs)
	}
}
