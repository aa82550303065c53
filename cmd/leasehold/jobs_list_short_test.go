package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// A filtered page may come back short, even empty, with a cursor (it looks
// through a bounded number of jobs): jobs list says that more may match
// and how to go on, rather than looking like the end of the listing.
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
			!strings.Contains(errs, "more may match: run again with --after "+next+"\n") {
			t.Errorf("%v: stderr %q, want one line saying more may match and how to continue", args, errs)
		}
	}
}
