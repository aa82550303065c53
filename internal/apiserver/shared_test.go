package apiserver

import (
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/testutil"
)

// newSharedAPI serves the API as a shared-mode CLI command does (any kind
// of a live daemon, no kinds of its own) over a counting store.
func newSharedAPI(t *testing.T) (*testutil.RangeCountingStore, http.Handler) {
	t.Helper()
	log := testutil.QuietLogger(t)
	ls := testutil.TempLocal(t, log)
	store := &testutil.RangeCountingStore{Store: ls}
	coord, err := coordinator.New(store, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return store, New(Config{Coord: coord, Shared: true, Logger: log})
}

// A shared-mode batch reads the live daemons' kinds once, not once per
// job (each read scans every worker and ownership key).
func TestAPISharedBatchReadsLiveKindsOnce(t *testing.T) {
	store, h := newSharedAPI(t)
	const n = 50
	jobs := make([]string, n)
	for i := range jobs {
		jobs[i] = `{"kind":"resize","payload":{}}`
	}
	before := store.Ranges.Load()
	code, body := testutil.APICall(t, h, "POST", "/v1/jobs/batch", `{"jobs":[`+strings.Join(jobs, ",")+`]}`)
	if code != http.StatusCreated {
		t.Fatalf("batch: %d %s", code, body)
	}
	if reads := store.Ranges.Load() - before; reads >= n {
		t.Errorf("a batch of %d jobs made %d range reads: the live kinds are read per job", n, reads)
	}
}

// A store that cannot be read is not the client's fault: a batch answers
// 5xx, as a single create does, never 400 (which the CLI reports as bad
// input, exit 2).
func TestAPISharedBatchStoreErrorIsNotBadInput(t *testing.T) {
	store, h := newSharedAPI(t)
	store.FailRanges.Store(true)
	for _, c := range []struct{ path, body string }{
		{"/v1/jobs", `{"kind":"resize"}`},
		{"/v1/jobs/batch", `{"jobs":[{"kind":"resize"}]}`},
	} {
		code, body := testutil.APICall(t, h, "POST", c.path, c.body)
		if code < 500 {
			t.Errorf("POST %s with the store unreadable: %d %s, want 5xx", c.path, code, body)
		}
	}
}
