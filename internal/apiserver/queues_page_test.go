package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/testutil"
)

// GET /v1/queues pages as GET /v1/jobs does (limit, after, next): every
// queue known from the first page to the last comes exactly once, in name
// order, while queues become known and unknown between pages; one that
// does so comes at most once (if it is known when the page that would
// hold its name is read). Without limit or after the answer is every
// queue and no next, as before paging.
func TestQueuesPagesListEachQueueOnce(t *testing.T) {
	coord, h := newAPIOn(t, nil, Config{})
	ctx := context.Background()
	jobs := map[string]string{} // the one available job of each queue
	add := func(q string) {
		t.Helper()
		res, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "echo", Queue: q})
		if err != nil {
			t.Fatal(err)
		}
		jobs[q] = res.Job.ID
	}
	remove := func(q string) {
		t.Helper()
		if _, err := coord.Cancel(ctx, jobs[q]); err != nil {
			t.Fatal(err)
		}
	}
	var all []string
	for i := range 25 {
		q := fmt.Sprintf("q%02d", i)
		add(q)
		all = append(all, q)
	}
	// A configured queue is known without jobs.
	if _, _, err := coord.PauseQueue(ctx, "q25"); err != nil {
		t.Fatal(err)
	}
	all = append(all, "q25")

	code, body := testutil.APICall(t, h, "GET", "/v1/queues", "")
	var whole map[string]json.RawMessage
	if err := json.Unmarshal(body, &whole); code != http.StatusOK || err != nil || len(whole) != 1 || whole["queues"] == nil {
		t.Fatalf("GET /v1/queues: %d %s, want 200 with queues alone", code, body)
	}
	var unpaged QueuesResponse
	_ = json.Unmarshal(body, &unpaged)
	if len(unpaged.Queues) != len(all) {
		t.Fatalf("GET /v1/queues: %d queues, want every one of %d", len(unpaged.Queues), len(all))
	}

	seen := map[string]int{}
	var order []string
	after, pages := "", 0
	for {
		path := "/v1/queues?limit=4"
		if after != "" {
			path += "&after=" + after
		}
		code, body := testutil.APICall(t, h, "GET", path, "")
		var page QueuesResponse
		if err := json.Unmarshal(body, &page); code != http.StatusOK || err != nil {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		if len(page.Queues) > 4 {
			t.Fatalf("GET %s: %d queues, over the limit", path, len(page.Queues))
		}
		for _, q := range page.Queues {
			seen[q.Name]++
			order = append(order, q.Name)
		}
		pages++
		if page.Next == "" {
			break
		}
		if page.Next != page.Queues[len(page.Queues)-1].Name {
			t.Fatalf("GET %s: next %q is not the last queue of the page", path, page.Next)
		}
		after = page.Next
		if pages == 2 {
			// Behind the cursor (q07) and ahead of it, one each
			// becomes unknown and one becomes known.
			remove("q03")
			remove("q20")
			add("q01a")
			add("q12a")
		}
	}
	if !slices.IsSorted(order) {
		t.Errorf("pages not in name order: %v", order)
	}
	for q, n := range seen {
		if n != 1 {
			t.Errorf("queue %s listed %d times", q, n)
		}
	}
	for _, q := range all {
		if q != "q03" && q != "q20" && seen[q] != 1 {
			t.Errorf("queue %s, known throughout, listed %d times", q, seen[q])
		}
	}
	if seen["q20"] != 0 || seen["q12a"] != 1 || seen["q01a"] != 0 || seen["q03"] != 1 {
		t.Errorf("queues changed between pages: q03 (gone behind) %d, q20 (gone ahead) %d, q01a (new behind) %d, q12a (new ahead) %d; want 1, 0, 0, 1",
			seen["q03"], seen["q20"], seen["q01a"], seen["q12a"])
	}
	// after alone takes the default page, as for jobs.
	code, body = testutil.APICall(t, h, "GET", "/v1/queues?after=q24", "")
	var page QueuesResponse
	if json.Unmarshal(body, &page) != nil || code != http.StatusOK || len(page.Queues) != 1 || page.Queues[0].Name != "q25" || page.Next != "" {
		t.Errorf("GET /v1/queues?after=q24: %d %s, want q25 alone and no next", code, body)
	}
}

// A bad limit or cursor is refused, 400, with one line saying what to send.
func TestQueuesPageBadLimitOrCursor(t *testing.T) {
	_, h := newAPIOn(t, nil, Config{})
	for _, c := range []struct{ query, want string }{
		{"limit=0", "want a number from 1 to 10000"},
		{"limit=-3", "want a number from 1 to 10000"},
		{"limit=10001", "want a number from 1 to 10000"},
		{"limit=ten", "want a number from 1 to 10000"},
		{"limit=", "leave it out"},
		{"after=bad/name", "bad cursor"},
		{"after=a%20b", "pass the next value of the previous page"},
		{"limit=5&cursor=q1", "use limit, after"},
	} {
		code, body := testutil.APICall(t, h, "GET", "/v1/queues?"+c.query, "")
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, c.want) || strings.Contains(e.Error, "\n") {
			t.Errorf("GET /v1/queues?%s: %d %s, want 400 with one line containing %q", c.query, code, body, c.want)
		}
	}
}

// A page can end on a queue named "." or "..", which builds before
// 2026-12-03 took as names: its next is a cursor like any other, and the
// following page starts past it (before, the cursor was checked as a new
// queue's name and refused, 400, so the pages stopped there).
func TestQueuesPageAfterDotQueues(t *testing.T) {
	var store kv.Store
	coord, h := newAPIOn(t, func(s kv.Store) kv.Store { store = s; return s }, Config{})
	ctx := context.Background()
	// As an older build left them: "." paused, ".." with an available job
	// (the index entry alone is what the listing counts).
	root := "/leasehold/" + coordinator.DefaultNamespace + "/"
	if _, err := store.Txn(ctx, kv.Txn{Then: []kv.Op{
		kv.Put(root+"qm/c/.", []byte(`{"name":".","paused":true}`), 0),
		kv.Put(root+"q/../2/01KAAAAAAAAAAAAAAAAAAAAAAA", []byte("x"), 0),
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "echo", Queue: "a"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	after := ""
	for range 5 {
		path := "/v1/queues?limit=1"
		if after != "" {
			path += "&after=" + url.QueryEscape(after)
		}
		code, body := testutil.APICall(t, h, "GET", path, "")
		var page QueuesResponse
		if err := json.Unmarshal(body, &page); code != http.StatusOK || err != nil {
			t.Fatalf("GET %s after pages %v: %d %s", path, names, code, body)
		}
		for _, q := range page.Queues {
			names = append(names, q.Name)
		}
		if after = page.Next; after == "" {
			break
		}
	}
	if want := []string{".", "..", "a"}; !slices.Equal(names, want) {
		t.Errorf("pages of one queue: %q, want %q", names, want)
	}
}

// The refusal of an unknown queue names at most knownQueuesNamed of the
// known ones, and counts the others.
func TestUnknownQueueErrorIsBounded(t *testing.T) {
	coord, h := newAPIOn(t, nil, Config{})
	var ps []coordinator.EnqueueParams
	for i := range knownQueuesNamed + 30 {
		ps = append(ps, coordinator.EnqueueParams{Kind: "echo", Queue: fmt.Sprintf("q%03d", i)})
	}
	if _, err := coord.EnqueueBatch(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	code, body := testutil.APICall(t, h, "POST", "/v1/queues/nosuch/pause", "")
	if code != http.StatusBadRequest || !strings.Contains(string(body), "known queues: q000, q001,") || strings.Contains(string(body), "q020") || !strings.Contains(string(body), "and 30 more: see GET /v1/queues") {
		t.Errorf("pause an unknown queue beside %d others: %d %s", knownQueuesNamed+30, code, body)
	}
}

// BenchmarkQueuesList measures GET /v1/queues over 10,000 queues of 10
// available jobs each: every queue at once, and one page of 1,000 (which
// reads what the whole list reads, but answers a tenth of it).
func BenchmarkQueuesList(b *testing.B) {
	coord, h := newAPIOn(b, nil, Config{})
	for i := 0; i < 100_000; {
		var ps []coordinator.EnqueueParams
		for ; i < 100_000 && len(ps) < 1000; i++ {
			ps = append(ps, coordinator.EnqueueParams{Kind: "echo", Queue: fmt.Sprintf("q%05d", i%10_000)})
		}
		if _, err := coord.EnqueueBatch(context.Background(), ps); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct{ name, path string }{{"all", "/v1/queues"}, {"page", "/v1/queues?limit=1000&after=q04999"}} {
		b.Run(c.name, func(b *testing.B) {
			size := 0
			for b.Loop() {
				code, body := testutil.APICall(b, h, "GET", c.path, "")
				if code != http.StatusOK {
					b.Fatalf("GET %s: %d %s", c.path, code, body)
				}
				size = len(body)
			}
			b.ReportMetric(float64(size), "resp-bytes")
		})
	}
}
