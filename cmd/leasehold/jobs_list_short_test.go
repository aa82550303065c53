package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

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
