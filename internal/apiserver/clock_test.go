package apiserver

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/coordtest"
	"github.com/leasehold/leasehold/internal/testutil"
)

// A delay counts from the coordinator's clock, the one its jobs are
// stamped and promoted by, not from the process's: with a clock of its
// own (a library's tests, or one that differs from the host's), a job
// delayed by a minute is due a minute after that clock's now, single or
// in a batch.
func TestDelayCountsFromTheCoordinatorsClock(t *testing.T) {
	log := testutil.QuietLogger(t)
	t0 := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC) // years from the host's clock
	coord, err := coordinator.New(testutil.TempLocal(t, log), coordinator.Config{Logger: log, Clock: coordtest.NewClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Coord: coord, Logger: log, Kinds: map[string]PayloadCheck{"k": nil}})
	post := func(path, body string) []byte {
		t.Helper()
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code/100 != 2 {
			t.Fatalf("POST %s %s: %d %s", path, body, rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
	var one CreateResponse
	if err := json.Unmarshal(post("/v1/jobs", `{"kind":"k","delay":"1m"}`), &one); err != nil {
		t.Fatal(err)
	}
	var batch BatchResponse
	if err := json.Unmarshal(post("/v1/jobs/batch", `{"jobs":[{"kind":"k","delay":"1m"}]}`), &batch); err != nil {
		t.Fatal(err)
	}
	if len(batch.Jobs) != 1 {
		t.Fatalf("batch answered %d jobs, want 1", len(batch.Jobs))
	}
	want := t0.Add(time.Minute)
	for _, j := range []*coordinator.Job{one.Job, batch.Jobs[0]} {
		got, err := coord.Get(t.Context(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != coordinator.StateScheduled || !got.ScheduledAt.Equal(want) {
			t.Errorf("job delayed by 1m at %s (the coordinator's clock): %s, scheduled at %s; want scheduled at %s", t0.Format(time.RFC3339), got.State, got.ScheduledAt.Format(time.RFC3339Nano), want.Format(time.RFC3339))
		}
	}
}
