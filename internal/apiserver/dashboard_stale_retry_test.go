package apiserver

import (
	"context"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/testutil"
)

// A page's "run now" or "retry" button acts on the job as the page showed
// it: clicked after the job changed state (here another operator cancelled
// the scheduled job), it is refused, 409 naming the state now, and the job
// is left as it is, where it revived the job that had just been cancelled
// on purpose ("Run job ... now instead of at its due time?" became a retry
// of a cancelled job).
func TestDashboardRetryButtonRefusedAfterTheJobChanged(t *testing.T) {
	coord, h := newAPIOn(t, nil, Config{})
	ctx := context.Background()
	button := regexp.MustCompile(`<button data-url="([^"]+)"[^>]*data-retry=`)
	retryButton := func(id string) string {
		t.Helper()
		code, body := testutil.APICall(t, h, "GET", "/jobs/"+id, "")
		m := button.FindSubmatch(body)
		if code != http.StatusOK || m == nil {
			t.Fatalf("job page: %d, no retry button:\n%s", code, body)
		}
		return html.UnescapeString(string(m[1]))
	}
	r, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "echo", ScheduledAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Job.ID
	stale := retryButton(id) // "run now", on the page of the scheduled job
	if _, err := coord.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}

	// The click, as the page's script sends it.
	code, res := testutil.APICall(t, h, "POST", "/"+stale, "")
	if code != http.StatusConflict || !strings.Contains(string(res), "cancelled") || !strings.Contains(string(res), "scheduled") {
		t.Errorf("POST %s for a job shown scheduled, now cancelled: %d %s; want 409 naming both states", stale, code, res)
	}
	if j, err := coord.Get(ctx, id); err != nil || j.State != coordinator.StateCancelled {
		t.Fatalf("after the stale run-now the job is %v (%v), want cancelled", j.State, err)
	}

	// The page rendered now offers the cancelled job's retry, which works.
	if code, res := testutil.APICall(t, h, "POST", "/"+retryButton(id), ""); code != http.StatusOK {
		t.Errorf("retry from a fresh page: %d %s", code, res)
	}
	if j, err := coord.Get(ctx, id); err != nil || j.State != coordinator.StateAvailable {
		t.Errorf("after the fresh page's retry the job is %v (%v), want available", j.State, err)
	}
}
