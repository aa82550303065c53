package coordinator

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// smallPageCoordinator returns a coordinator on a fresh local store whose
// List pages hold about 25 KiB, for the rest of the test.
func smallPageCoordinator(t *testing.T) *Coordinator {
	t.Helper()
	old := listPageBytes
	listPageBytes = 25 << 10
	t.Cleanup(func() { listPageBytes = old })
	c, err := New(tempLocalstore(t), Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A page of List holds about listPageBytes of records at most, whatever
// its limit, and the pages together hold every job.
func TestListPageBoundedByBytes(t *testing.T) {
	c := smallPageCoordinator(t)
	ctx := context.Background()
	payload := json.RawMessage(`"` + strings.Repeat("x", 10<<10) + `"`)
	for range 10 {
		if _, err := c.Enqueue(ctx, EnqueueParams{Kind: "k", Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	// Jobs a filter leaves out do not count against a page's budget: 20
	// of another kind come first, and the page of kind "k" still holds
	// jobs.
	for range 20 {
		if _, err := c.Enqueue(ctx, EnqueueParams{Kind: "other", Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	if page, err := c.List(ctx, ListParams{Kind: "other", Limit: 1000}); err != nil || len(page.Jobs) == 0 {
		t.Fatalf("first page of kind other after 10 jobs of kind k: %d jobs, %v", len(page.Jobs), err)
	}
	for _, st := range []State{"", StateAvailable} {
		seen, pages := 0, 0
		for after := ""; ; pages++ {
			page, err := c.List(ctx, ListParams{State: st, Kind: "k", Limit: 1000, After: after})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Jobs) > 3 {
				t.Fatalf("state %q: a page of %d jobs of 10 KiB, over the 25 KiB page budget", st, len(page.Jobs))
			}
			seen += len(page.Jobs)
			if page.Next == "" {
				break
			}
			after = page.Next
		}
		if seen != 10 {
			t.Fatalf("state %q: %d jobs over %d pages, want 10", st, seen, pages)
		}
	}
}

// A page ends once what it holds reaches the budget, whatever the sizes of
// the records read before: small jobs followed by large ones do not make
// the next read take as many large ones as it would small ones.
func TestListPageBoundedByBytesAfterSmallJobs(t *testing.T) {
	c := smallPageCoordinator(t)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, EnqueueParams{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	payload := json.RawMessage(`"` + strings.Repeat("x", 10<<10) + `"`)
	for range 20 {
		if _, err := c.Enqueue(ctx, EnqueueParams{Kind: "k", Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range []State{"", StateAvailable} {
		seen, pages := 0, 0
		for after := ""; ; pages++ {
			page, err := c.List(ctx, ListParams{State: st, Limit: 1000, After: after})
			if err != nil {
				t.Fatal(err)
			}
			size := 0 // bytes of the page's jobs before its last one
			for i, j := range page.Jobs {
				if i < len(page.Jobs)-1 {
					size += len(encodeJob(j))
				}
			}
			if size >= listPageBytes {
				t.Fatalf("state %q: page %d holds %d jobs, %d bytes before its last one, over the %d-byte page budget", st, pages, len(page.Jobs), size, listPageBytes)
			}
			seen += len(page.Jobs)
			if page.Next == "" {
				break
			}
			after = page.Next
		}
		if seen != 21 {
			t.Fatalf("state %q: %d jobs over %d pages, want 21", st, seen, pages)
		}
	}
}
