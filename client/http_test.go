package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/coordinator"
)

// batchDaemon answers POST /v1/jobs/batch as the daemon does with its
// defaults: at most 32 MiB of body (413 over it) and 10,000 jobs. It counts
// the requests.
func batchDaemon(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/jobs/batch" {
			http.Error(w, `{"error":"unexpected request"}`, http.StatusTeapot)
			return
		}
		requests.Add(1)
		var req struct {
			Jobs []struct {
				Kind    string          `json:"kind"`
				Payload json.RawMessage `json:"payload"`
			} `json:"jobs"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 32<<20)).Decode(&req); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				fmt.Fprintf(w, `{"error":"request body is over the %d-byte limit: send a smaller payload or fewer jobs per batch"}`, 32<<20)
				return
			}
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":%q}`, err.Error())
			return
		}
		if len(req.Jobs) > 10000 {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"too many jobs in one batch"}`)
			return
		}
		res := struct {
			Jobs    []*coordinator.Job `json:"jobs"`
			Existed []bool             `json:"existed"`
		}{Existed: make([]bool, len(req.Jobs))}
		for range req.Jobs {
			res.Jobs = append(res.Jobs, &coordinator.Job{ID: fmt.Sprintf("J%d", requests.Load()), Kind: "echo", State: coordinator.StateAvailable})
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(res)
	}))
	t.Cleanup(srv.Close)
	return srv, &requests
}

// A batch of valid jobs is split into requests the daemon accepts, by size
// as well as by count: 1,000 jobs of 40 KB each are 40 MB, over the
// daemon's 32 MiB body limit for one batch, though every job is fine.
func TestHTTPInsertManySplitsBySize(t *testing.T) {
	srv, requests := batchDaemon(t)
	c, err := client.NewHTTP(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	payload := json.RawMessage(`{"msg":"` + strings.Repeat("x", 40<<10) + `"}`)
	ps := make([]client.InsertParams, 1000)
	for i := range ps {
		ps[i] = client.InsertParams{Args: client.RawArgs{KindName: "echo", Payload: payload}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs, err := c.InsertMany(ctx, ps)
	if err != nil {
		t.Fatalf("InsertMany of 1,000 valid 40 KB jobs: %v (after %d requests)", err, requests.Load())
	}
	if len(rs) != len(ps) {
		t.Fatalf("%d results for %d jobs", len(rs), len(ps))
	}
	if n := requests.Load(); n < 2 {
		t.Fatalf("%d requests, want the batch split", n)
	}
}
