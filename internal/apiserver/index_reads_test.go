package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/testutil"
)

// indexReads counts the scans of whole indexes of namespace "reads": a
// scan's first page is a range that starts at the index's prefix (key
// layout: /leasehold/NS/q/ available, r/ running, w/ live daemons, o/
// ownership keys), and its later pages start past it.
type indexReads struct {
	kv.Store
	mu sync.Mutex
	n  map[string]int // by index letter
}

const readsRoot = "/leasehold/reads/"

func (s *indexReads) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if ix, ok := strings.CutPrefix(r.Start, readsRoot); ok && len(ix) == 2 && ix[1] == '/' && r.End == kv.PrefixEnd(r.Start) {
		s.mu.Lock()
		s.n[ix[:1]]++
		s.mu.Unlock()
	}
	return s.Store.Range(ctx, r)
}

// take returns the scans counted since the last call.
func (s *indexReads) take() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.n
	s.n = map[string]int{}
	return n
}

// newReadsAPI serves the API over a local store whose index scans are
// counted, with a live daemon serving queues a and b, n available jobs
// spread over queues queues, and running jobs of the daemon.
func newReadsAPI(t testing.TB, n, queues, running int) (*indexReads, http.Handler) {
	t.Helper()
	log := testutil.QuietLogger(t)
	reads := &indexReads{Store: testutil.TempLocal(t, log), n: map[string]int{}}
	coord, err := coordinator.New(reads, coordinator.Config{Logger: log, Namespace: "reads"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sess, err := coord.NewSession(ctx, coordinator.SessionConfig{TTL: time.Minute, Worker: coordinator.WorkerInfo{ID: coordinator.NewWorkerID(), Queues: []string{"a", "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close(context.Background()) })
	for i := 0; i < n; {
		var ps []coordinator.EnqueueParams
		for ; i < n && len(ps) < 1000; i++ {
			ps = append(ps, coordinator.EnqueueParams{Kind: "echo", Queue: fmt.Sprintf("q%04d", i%queues)})
		}
		if _, err := coord.EnqueueBatch(ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	for range running {
		if _, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "sleep", Queue: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	if runs, _, err := coord.Claim(ctx, sess, "a", running, false); err != nil || len(runs) != running {
		t.Fatalf("claim %d: %d runs, %v", running, len(runs), err)
	}
	if _, _, err := coord.PauseQueue(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	reads.take()
	return reads, New(Config{Coord: coord, Logger: log})
}

func get(t testing.TB, h http.Handler, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d\n%.2000s", path, rec.Code, rec.Body.String())
	}
	return rec.Body.String()
}

// The dashboard's overview reads the live daemons (their registrations
// and ownership keys) and the available and running indexes once per
// render, and a metrics scrape the available and running indexes and the
// registrations once, and no ownership keys (before 2026-12-06, twice or
// three times each, and the ownership keys once), showing the same.
func TestOverviewAndScrapeReadEachIndexOnce(t *testing.T) {
	reads, h := newReadsAPI(t, 30, 3, 2)
	body := get(t, h, "/")
	if got, want := reads.take(), map[string]int{"q": 1, "r": 1, "w": 1, "o": 1}; !sameCounts(got, want) {
		t.Errorf("overview: index scans %v, want %v", got, want)
	}
	for _, want := range []string{`<tr id="queue-q0001">`, `<tr id="queue-b">`, `<tr data-job=`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %s", want)
		}
	}
	metrics := get(t, h, "/metrics")
	if got, want := reads.take(), map[string]int{"q": 1, "r": 1, "w": 1, "o": 0}; !sameCounts(got, want) {
		t.Errorf("scrape: index scans %v, want %v", got, want)
	}
	for _, want := range []string{
		`leasehold_jobs{state="available"} 30`, `leasehold_jobs{state="running"} 2`,
		`leasehold_queue_jobs{queue="q0001",state="available"} 10`, `leasehold_queue_jobs{queue="a",state="running"} 2`,
		`leasehold_queue_paused{queue="b"} 1`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("scrape lacks %s", want)
		}
	}
	// The queues' list needs the daemons' queues, not their running jobs.
	get(t, h, "/v1/queues")
	if got, want := reads.take(), map[string]int{"q": 1, "r": 0, "w": 1, "o": 0}; !sameCounts(got, want) {
		t.Errorf("queues list: index scans %v, want %v", got, want)
	}
}

// cpuTime is the CPU time the process used so far (user and system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Skip("no rusage:", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func sameCounts(got, want map[string]int) bool {
	for k, n := range want {
		if got[k] != n {
			return false
		}
	}
	return true
}

// BenchmarkOverviewAndScrape measures a render of the overview and a
// metrics scrape over 100,000 available jobs in 1,000 queues and 1,000
// running jobs, with the index scans of each.
func BenchmarkOverviewAndScrape(b *testing.B) {
	reads, h := newReadsAPI(b, 100_000, 1000, 1000)
	for _, c := range []struct{ name, path string }{{"overview", "/"}, {"scrape", "/metrics"}} {
		b.Run(c.name, func(b *testing.B) {
			reads.take()
			cpu := cpuTime(b)
			for b.Loop() {
				get(b, h, c.path)
			}
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
			for ix, n := range reads.take() {
				b.ReportMetric(float64(n)/float64(b.N), "scans_"+ix+"/op")
			}
		})
	}
}
