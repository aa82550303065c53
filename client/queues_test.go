package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// QueuePage always sends a limit (the default, 100, when it is 0):
// GET /v1/queues without limit or after answers every queue, which a page
// is there to avoid.
func TestHTTPQueuePageSendsALimit(t *testing.T) {
	var mu sync.Mutex
	var queries []string
	c := clientOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		apiserver.WriteJSON(w, http.StatusOK, apiserver.QueuesResponse{Queues: []coordinator.QueueInfo{{QueueConfig: coordinator.QueueConfig{Name: "b"}}}, Next: "b"})
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	page, err := c.QueuePage(ctx, client.QueueListParams{})
	if err != nil || len(page.Queues) != 1 || page.Next != "b" || page.Queues[0].Workers == nil {
		t.Fatalf("QueuePage: %+v, %v; want the daemon's page, workers not nil", page, err)
	}
	if _, err := c.QueuePage(ctx, client.QueueListParams{Limit: 7, After: ".."}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"limit=100", "after=..&limit=7"}; strings.Join(queries, " ") != strings.Join(want, " ") {
		t.Errorf("QueuePage sent %q, want %q", queries, want)
	}
}

// A daemon from before queue paging refuses limit and after, naming the
// first unknown one in name order: QueuePage then says to upgrade it (or
// call Queues), wrapping errors.ErrUnsupported and not ErrInvalid, since
// nothing the caller passed is wrong.
func TestHTTPQueuePageOlderDaemon(t *testing.T) {
	c := clientOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); len(q) > 0 {
			apiserver.WriteError(w, http.StatusBadRequest, fmt.Sprintf("unknown query parameter %q: this endpoint takes none", apiserver.SortedKeys(q)[0]))
			return
		}
		apiserver.WriteJSON(w, http.StatusOK, apiserver.QueuesResponse{Queues: []coordinator.QueueInfo{{QueueConfig: coordinator.QueueConfig{Name: "a"}, Workers: []string{}}}})
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, p := range []client.QueueListParams{{}, {Limit: 5}, {After: "a"}} {
		_, err := c.QueuePage(ctx, p)
		if !errors.Is(err, errors.ErrUnsupported) || errors.Is(err, coordinator.ErrInvalid) ||
			!strings.Contains(err.Error(), "upgrade it, or call Queues") || strings.Contains(err.Error(), "\n") {
			t.Errorf("QueuePage(%+v) from an older daemon: %v, want ErrUnsupported saying to upgrade it", p, err)
		}
	}
	if qs, err := c.Queues(ctx); err != nil || len(qs) != 1 {
		t.Errorf("Queues from an older daemon: %v, %v", qs, err)
	}
	// Another refusal is the daemon's own, as it said it.
	bad := fakeDaemon(t, http.StatusBadRequest, `{"error":"limit 10001: want a number from 1 to 10000"}`)
	if _, err := bad.QueuePage(ctx, client.QueueListParams{Limit: 10001}); !errors.Is(err, coordinator.ErrInvalid) || errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("QueuePage refused for its limit: %v, want ErrInvalid", err)
	}
}
