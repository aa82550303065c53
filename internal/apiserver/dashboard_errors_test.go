package apiserver

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/testutil"
)

// A job page shows an attempt's error with its lines (errors.Join, a
// command's stderr), where they ran together into one: the element that
// holds it keeps white space and breaks, as a stack trace's <pre> does.
func TestDashboardJobPageKeepsAnErrorsLines(t *testing.T) {
	coord, h := newAPIOn(t, nil, Config{})
	ctx := context.Background()
	r, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := coord.NewSession(ctx, coordinator.SessionConfig{TTL: 30 * time.Second, Worker: coordinator.WorkerInfo{ID: coordinator.NewWorkerID()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	runs, _, err := coord.Claim(ctx, s, coordinator.DefaultQueue, 1, false)
	if err != nil || len(runs) != 1 {
		t.Fatalf("claim: %d runs, %v", len(runs), err)
	}
	if err := runs[0].Fail(ctx, errors.Join(errors.New("first line"), errors.New("second line")), coordinator.FailOpts{}); err != nil {
		t.Fatal(err)
	}
	code, body := testutil.APICall(t, h, "GET", "/jobs/"+r.Job.ID, "")
	page := string(body)
	if code != http.StatusOK || !strings.Contains(page, `<span class="err lines">first line
second line</span>`) {
		t.Fatalf("job page (%d): the error is not in an element that keeps its lines:\n%s", code, page)
	}
	if !strings.Contains(page, ".lines{white-space:pre-wrap") {
		t.Errorf("the page's style has no rule that keeps an error's lines")
	}
}
