package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/testutil"
)

// stallingStore is a store that, while stalled, does not answer reads and
// transactions until their context ends: etcd without quorum, or its only
// member stopped.
type stallingStore struct {
	kv.Store
	stalled atomic.Bool
	calls   atomic.Int64 // reads and transactions held while stalled
}

func (s *stallingStore) stall(ctx context.Context) error {
	if !s.stalled.Load() {
		return nil
	}
	s.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (s *stallingStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if err := s.stall(ctx); err != nil {
		return kv.RangeResult{}, err
	}
	return s.Store.Range(ctx, r)
}

func (s *stallingStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if err := s.stall(ctx); err != nil {
		return kv.TxnResult{}, err
	}
	return s.Store.Txn(ctx, t)
}

// While the store does not answer, every API and dashboard request ends
// with a 503, a Retry-After and a message saying what happened, once its
// store deadline passes (here shortened: the deadline is the daemon's
// setting, not what is tested); an enqueue says that its outcome is
// unknown. Nothing waits for the store to come back.
func TestAPIStoreDeadline(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			log := testutil.QuietLogger(t)
			store := &stallingStore{Store: testutil.TempLocal(t, log)}
			coord, err := coordinator.New(store, coordinator.Config{Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			const deadline = 20 * time.Millisecond
			srv := httptest.NewServer(apiserver.New(apiserver.Config{Coord: coord, Kinds: payloadChecks(builtinKinds()), KnownChecks: payloadChecks(builtinKinds()), Shared: shared, Logger: log, StoreTimeout: deadline}))
			t.Cleanup(srv.Close)
			hc := srv.Client()
			hc.Timeout = 2 * time.Minute // a hang fails the test rather than its run
			call := func(method, path, body string) (*http.Response, string) {
				t.Helper()
				req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				return resp, string(b)
			}

			resp, body := call("POST", "/v1/jobs", `{"kind":"echo"}`)
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("enqueue before the stall: %d %s", resp.StatusCode, body)
			}
			var created apiserver.CreateResponse
			if err := json.Unmarshal([]byte(body), &created); err != nil {
				t.Fatal(err)
			}
			id := created.Job.ID
			store.stalled.Store(true)

			why := "disk stalled"
			if shared {
				why = "etcd unreachable or without quorum"
			}
			for _, c := range []struct {
				method, path, body string
				html               bool
				want               []string
			}{
				{"GET", "/", "", true, nil},
				{"GET", "/jobs", "", true, nil},
				{"GET", "/jobs?state=running", "", true, nil},
				{"GET", "/jobs/" + id, "", true, nil},
				{"GET", "/v1/workers", "", false, []string{"retry later"}},
				{"GET", "/v1/stats", "", false, []string{"retry later"}},
				{"GET", "/v1/jobs?limit=5", "", false, []string{"retry later"}},
				{"GET", "/v1/jobs/" + id, "", false, []string{"retry later"}},
				{"GET", "/v1/jobs/" + id + "?wait=1ms", "", false, []string{"retry later"}},
				{"GET", "/v1/queues", "", false, []string{"retry later"}},
				{"GET", "/v1/periodic", "", false, []string{"retry later"}},
				{"POST", "/v1/jobs", `{"kind":"echo"}`, false, []string{"outcome is unknown", "may or may not have been enqueued", "unique_key"}},
				{"POST", "/v1/jobs", `{"kind":"someone-elses"}`, false, []string{"outcome is unknown"}},
				{"POST", "/v1/jobs/batch", `{"jobs":[{"kind":"echo"}]}`, false, []string{"may or may not have been enqueued", "unique_key"}},
				{"POST", "/v1/jobs/" + id + "/cancel", "", false, []string{"outcome is unknown", "may or may not have been made"}},
				{"POST", "/v1/jobs/" + id + "/retry", "", false, []string{"outcome is unknown"}},
				{"DELETE", "/v1/jobs/" + id, "", false, []string{"outcome is unknown"}},
				// Not POST /v1/jobs/cancel: a bulk cancel goes through the
				// whole backlog, however long that takes (unboundedRoutes).
				{"POST", "/v1/queues/default/pause", "", false, []string{"outcome is unknown"}},
			} {
				if c.path == "/v1/jobs" && strings.Contains(c.body, "someone-elses") && !shared {
					continue // embedded: an unknown kind is refused without a read
				}
				name := c.method + " " + c.path + " " + c.body
				resp, body := call(c.method, c.path, c.body)
				if resp.StatusCode != http.StatusServiceUnavailable {
					t.Errorf("%s: %d %s, want 503", name, resp.StatusCode, apiserver.TruncateString(body, 300))
					continue
				}
				if resp.Header.Get("Retry-After") == "" {
					t.Errorf("%s: 503 without a Retry-After", name)
				}
				msg := body
				if !c.html {
					if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
						t.Errorf("%s: Content-Type %q, want application/json", name, ct)
					}
					var e apiserver.ErrorResponse
					if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" || strings.Count(body, "\n") != 1 {
						t.Errorf("%s: body %q, want one line of JSON with an error", name, body)
						continue
					}
					msg = e.Error
				}
				for _, w := range append([]string{"did not answer within " + deadline.String(), why}, c.want...) {
					if !strings.Contains(msg, w) {
						t.Errorf("%s: %q does not say %q", name, apiserver.TruncateString(msg, 400), w)
					}
				}
			}
			if store.calls.Load() == 0 {
				t.Error("no request reached the stalled store")
			}
		})
	}
}
