package apiserver

import (
	"context"
	"html"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/testutil"
)

// The overview lists a queue with running jobs that no live daemon serves
// and that has no configuration (its daemon was restarted with other
// --queues, say). Its pause button was refused "unknown queue", as the API
// refuses a name nobody knows unless force=true: a guard against a typed
// typo, which a name the page itself read from the store is not. The
// button now pauses it.
func TestDashboardPausesAQueueItListsThatNobodyServes(t *testing.T) {
	coord, h := newAPIOn(t, nil, Config{})
	ctx := context.Background()
	const q = "orphan"
	if _, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "echo", Queue: q}); err != nil {
		t.Fatal(err)
	}
	// A daemon that serves no queue now runs the queue's job.
	s, err := coord.NewSession(ctx, coordinator.SessionConfig{TTL: 30 * time.Second, Worker: coordinator.WorkerInfo{ID: coordinator.NewWorkerID()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if runs, _, err := coord.Claim(ctx, s, q, 1, false); err != nil || len(runs) != 1 {
		t.Fatalf("claim: %d runs, %v", len(runs), err)
	}

	code, body := testutil.APICall(t, h, "GET", "/", "")
	m := regexp.MustCompile(`(?s)<tr id="queue-` + q + `">.*?<button class="danger" data-url="([^"]+)"[^>]*>pause</button>`).FindSubmatch(body)
	if code != http.StatusOK || m == nil {
		t.Fatalf("overview: %d, no pause button for queue %s:\n%s", code, q, body)
	}
	// The click, as the page's script sends it.
	url := html.UnescapeString(string(m[1]))
	if code, res := testutil.APICall(t, h, "POST", "/"+url, ""); code != http.StatusOK {
		t.Errorf("POST %s (the pause button of a listed queue): %d %s", url, code, res)
	}
	confs, err := coord.QueueConfigs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(confs) != 1 || confs[0].Name != q || !confs[0].Paused {
		t.Errorf("queue configurations after the click: %+v; want %s paused", confs, q)
	}
}
