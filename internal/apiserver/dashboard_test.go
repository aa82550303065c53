package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/localstore"
)

func TestLatestJobs(t *testing.T) {
	log := testutil.QuietLogger(t)
	store, err := localstore.Open(t.TempDir(), localstore.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	clock := &stepClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	coord, err := coordinator.New(store, coordinator.Config{Logger: log, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []string
	enqueue := func(n int, gap time.Duration) {
		for range n {
			clock.now = clock.now.Add(gap)
			r, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "echo"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.Job.ID)
		}
	}
	check := func(what string, n int) {
		t.Helper()
		got, err := latestJobs(ctx, coord, n, clock.now)
		if err != nil {
			t.Fatal(err)
		}
		want := min(n, len(ids))
		if len(got) != want {
			t.Fatalf("%s: %d jobs, want %d", what, len(got), want)
		}
		for i, j := range got {
			if j.ID != ids[len(ids)-1-i] {
				t.Fatalf("%s: job %d is %s, want %s", what, i, j.ID, ids[len(ids)-1-i])
			}
		}
	}
	check("empty", 50)
	enqueue(10, 72*time.Hour) // sparse and old
	check("fewer than asked", 50)
	enqueue(30, time.Minute)
	check("widening window", 20)
	enqueue(300, 0) // one millisecond holds more than a page
	check("dense tail", 50)
	enqueue(400, time.Millisecond)
	check("bisected window", 50)
	check("bisected window, small page", 3)
}

// stepClock is a coordinator.Clock moved by hand.
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time                         { return c.now }
func (c *stepClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// The overview refreshes every few seconds, so its lists are bounded:
// many daemons, queues and running jobs are listed in part, with how many
// are left out and where to see them.
func TestDashboardOverviewIsBounded(t *testing.T) {
	coord, h := newAPIOn(t, nil, Config{})
	ctx := context.Background()
	sessions := make([]*coordinator.Session, dashboardDaemons+1)
	for i := range sessions {
		s, err := coord.NewSession(ctx, coordinator.SessionConfig{TTL: time.Minute, Worker: coordinator.WorkerInfo{ID: fmt.Sprintf("w%03d-%s", i, coordinator.NewWorkerID()), Queues: []string{"default"}}})
		if err != nil {
			t.Fatal(err)
		}
		sessions[i] = s
		t.Cleanup(func() { _ = s.Close(context.Background()) })
	}
	// 30 running jobs on the first daemon, 2 on the second, and one on
	// each of dashboardQueues+50 other queues, the last of them paused.
	var ps []coordinator.EnqueueParams
	for range 32 {
		ps = append(ps, coordinator.EnqueueParams{Kind: "sleep"})
	}
	for i := range dashboardQueues + 50 {
		ps = append(ps, coordinator.EnqueueParams{Kind: "echo", Queue: fmt.Sprintf("q%03d", i)})
	}
	if _, err := coord.EnqueueBatch(ctx, ps); err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{30, 2} {
		if runs, _, err := coord.Claim(ctx, sessions[i], "default", n, false); err != nil || len(runs) != n {
			t.Fatalf("claim %d: %d runs, %v", n, len(runs), err)
		}
	}
	paused := fmt.Sprintf("q%03d", dashboardQueues+49)
	if _, _, err := coord.PauseQueue(ctx, paused); err != nil {
		t.Fatal(err)
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("overview: %d\n%.2000s", rec.Code, body)
	}
	daemons := strings.Count(body, `<tr id="daemon-`)
	queues := strings.Count(body, `<tr id="queue-`)
	running := strings.Count(body[strings.Index(body, "<h2>Daemons"):strings.Index(body, "<h2>Latest jobs")], `<tr data-job=`)
	if daemons != dashboardDaemons || !strings.Contains(body, `id="daemons-cut">1 more live daemons not listed`) {
		t.Errorf("%d daemons listed, want %d and a note that 1 more is not", daemons, dashboardDaemons)
	}
	if queues != dashboardQueues || !strings.Contains(body, `id="queues-cut">51 more queues not listed, with 51 available and 0 running jobs`) {
		t.Errorf("%d queues listed, want %d and a note that 51 more are not", queues, dashboardQueues)
	}
	if !strings.Contains(body, `<tr id="queue-`+paused+`">`) || !strings.Contains(body, `<tr id="queue-default">`) {
		t.Errorf("the paused queue %s or the busiest (default) is not listed", paused)
	}
	if running != dashboardRunningPerDaemon+2 || !strings.Contains(body, `20 more running jobs of this daemon not listed`) {
		t.Errorf("%d running jobs listed, want %d and a note that 20 more of the first daemon are not", running, dashboardRunningPerDaemon+2)
	}
}

// finishedReads counts the ranges read from the finished index of
// namespace "dash" (key layout: /leasehold/NS/f/ID).
// A read takes took on clock.
type finishedReads struct {
	kv.Store
	n     atomic.Int64
	clock *stepClock
	took  time.Duration
}

func (s *finishedReads) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if strings.HasPrefix(r.Start, "/leasehold/dash/f/") {
		s.n.Add(1)
		s.clock.now = s.clock.now.Add(s.took)
	}
	return s.Store.Range(ctx, r)
}

// The overview's reloads share the last count of the finished jobs while
// it is recent (coordinator.Coordinator.RecentCounts), and say how old it
// is; its other counts are read at each load.
func TestDashboardOverviewReusesFinishedCounts(t *testing.T) {
	log := testutil.QuietLogger(t)
	clock := &stepClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	store := &finishedReads{Store: testutil.TempLocal(t, log), clock: clock}
	coord, err := coordinator.New(store, coordinator.Config{Namespace: "dash", Logger: log, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Coord: coord, Logger: log})
	ctx := context.Background()
	enqueue := func() string {
		t.Helper()
		r, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "echo"})
		if err != nil {
			t.Fatal(err)
		}
		return r.Job.ID
	}
	load := func(when string, cancelled, available string, age string) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		body := rec.Body.String()
		for _, want := range []string{`id="count-cancelled" href="jobs?state=cancelled">` + cancelled + `<`, `id="count-available" href="jobs?state=available">` + available + `<`} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: the overview lacks %s", when, want)
			}
		}
		if got := strings.Contains(body, `id="finished-age">Completed, discarded and cancelled jobs as counted `+age+` ago`); got != (age != "") {
			t.Errorf("%s: note of the finished counts' age %s: %v", when, age, got)
		}
	}
	if _, err := coord.Cancel(ctx, enqueue()); err != nil {
		t.Fatal(err)
	}
	load("first load", "1", "0", "")
	if _, err := coord.Cancel(ctx, enqueue()); err != nil {
		t.Fatal(err)
	}
	enqueue()
	clock.now = clock.now.Add(500 * time.Millisecond)
	load("a reload 0.5 s later", "1", "1", "")
	if n := store.n.Load(); n != 1 {
		t.Errorf("two loads within 1 s read the finished index %d times, want 1", n)
	}
	clock.now = clock.now.Add(time.Second)
	load("1.5 s later", "2", "1", "")
	if n := store.n.Load(); n != 2 {
		t.Errorf("%d reads of the finished index, want 2", n)
	}
	// A count that takes 2 s is kept for a minute, and the page says
	// how old it is.
	store.took = 2 * time.Second
	clock.now = clock.now.Add(time.Second)
	load("a count that took 2 s", "2", "1", "2s")
	clock.now = clock.now.Add(10 * time.Second)
	load("10 s later", "2", "1", "12s")
	if n := store.n.Load(); n != 3 {
		t.Errorf("%d reads of the finished index, want 3", n)
	}
}
