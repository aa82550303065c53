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

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/testutil"
)

// A write whose answer never arrives whole (the connection dropped after
// the request was read, an answer cut short) or that a proxy answered
// 5xx without Leasehold-Not-Processed may have been made: the CLI must
// say that the outcome is unknown, not "retry", which would enqueue a
// job twice. A read is simply retried.
func TestCLIWriteFailureAfterTheRequestIsOutcomeUnknown(t *testing.T) {
	handlers := testutil.WriteFailures()
	for name, h := range handlers {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			c, err := newClient(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			for _, tc := range []struct {
				method, path string
				body         any
				want         []string
				not          string
			}{
				{"POST", "/v1/jobs", map[string]string{"kind": "echo"}, []string{"outcome is unknown", "unique_key"}, "and retry"},
				{"POST", "/v1/jobs/batch", map[string]any{"jobs": []any{map[string]string{"kind": "echo"}}}, []string{"outcome is unknown"}, "and retry"},
				{"POST", "/v1/jobs/x/cancel", nil, []string{"outcome is unknown", "may or may not have been made"}, "and retry"},
				{"POST", "/v1/queues/q/pause", nil, []string{"outcome is unknown"}, "and retry"},
				{"GET", "/v1/jobs", nil, nil, "outcome is unknown"},
			} {
				err := c.call(context.Background(), tc.method, tc.path, nil, tc.body, nil)
				if err == nil {
					t.Errorf("%s %s: no error", tc.method, tc.path)
					continue
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s %s: %q does not say %q", tc.method, tc.path, err, w)
					}
				}
				if strings.Contains(err.Error(), tc.not) {
					t.Errorf("%s %s: %q says %q", tc.method, tc.path, err, tc.not)
				}
			}
		})
	}
}

// batchFailsAfter is a daemon that answers the first batch request of
// an enqueue --count with its jobs, and the second with fail.
func batchFailsAfter(t *testing.T, fail http.HandlerFunc) string {
	var batches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/jobs/batch" {
			apiserver.WriteJSON(w, http.StatusOK, apiserver.WorkersResponse{})
			return
		}
		if batches.Add(1) > 1 {
			fail(w, r)
			return
		}
		var req apiserver.BatchRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Error(err)
		}
		res := apiserver.BatchResponse{}
		for i := range req.Jobs {
			res.Jobs = append(res.Jobs, &coordinator.Job{ID: fmt.Sprintf("job-%04d", i), Kind: "echo", Queue: "default"})
			res.Existed = append(res.Existed, false)
		}
		apiserver.WriteJSON(w, http.StatusCreated, res)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// An enqueue --count whose later batch request fails says exactly which
// jobs are in (their ids printed, in --json too), which may or may not
// be, and which were not sent.
func TestEnqueueCountLaterBatchFailure(t *testing.T) {
	for name, tc := range map[string]struct {
		fail http.HandlerFunc
		want []string
	}{
		"connection dropped": {
			func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					_ = conn.Close()
				}
			},
			[]string{"enqueued 1000 of 2500 jobs", "the next 1000 may or may not have been enqueued", "the last 500 were not sent", "outcome is unknown"},
		},
		"answered with too few jobs": {
			func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				apiserver.WriteJSON(w, http.StatusCreated, apiserver.BatchResponse{Jobs: []*coordinator.Job{{ID: "x"}}, Existed: []bool{false}})
			},
			[]string{"enqueued 1000 of 2500 jobs", "the next 1000 may or may not have been enqueued", "the last 500 were not sent", "answered 1 jobs for a batch of 1000"},
		},
		"refused (400)": {
			func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				apiserver.WriteError(w, http.StatusBadRequest, "unknown kind echo: this daemon runs sleep")
			},
			[]string{"enqueued 1000 of 2500 jobs", "the other 1500 were not", "unknown kind echo"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			for _, asJSON := range []bool{false, true} {
				args := []string{"enqueue", "echo", "--count", "2500", "--server", batchFailsAfter(t, tc.fail)}
				if asJSON {
					args = append(args, "--json")
				}
				r := runCLI(t, nil, "", args...)
				if r.code == 0 || strings.Count(r.stderr, "\n") != 1 {
					t.Fatalf("json %v: exit %d, stderr %q; want a failure in one line", asJSON, r.code, r.stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("json %v: stderr %q does not say %q", asJSON, r.stderr, w)
					}
				}
				n := strings.Count(r.stdout, "\n")
				if asJSON {
					var jobs []coordinator.Job
					if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil {
						t.Fatalf("--json output %q: %v", r.stdout, err)
					}
					n = len(jobs)
				}
				if n != 1000 {
					t.Errorf("json %v: %d jobs printed, want the 1000 enqueued", asJSON, n)
				}
			}
		})
	}
}

// A change answered 2xx with JSON that is not the API's answer ({} or
// {"status":"ok"} from a front that answers for the daemon) says nothing
// of what the daemon did, if it got the request: the outcome is unknown,
// as for an answer that is not JSON. It printed "answered without a
// job", a plain failure, or took {} for 0 jobs cancelled, "queue  was not
// paused", with exit 0.
func TestCLIChangeAnsweredWithForeignJSONIsOutcomeUnknown(t *testing.T) {
	const id = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	for _, body := range []string{`{}`, `{"status":"ok"}`} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, body+"\n")
		}))
		t.Cleanup(srv.Close)
		for _, args := range [][]string{
			{"enqueue", "echo"},
			{"jobs", "cancel", id},
			{"jobs", "retry", id},
			{"jobs", "delete", id},
			{"jobs", "cancel", "--all"},
			{"queues", "pause", "q"},
		} {
			r := runCLI(t, nil, "", append(args, "--server", srv.URL)...)
			if r.code != exitFailure || !strings.Contains(r.stderr, "outcome is unknown") || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("%s answered %s: exit %d, stdout %q, stderr %q; want exit 1 and one line saying the outcome is unknown", strings.Join(args, " "), body, r.code, r.stdout, r.stderr)
			}
		}
	}
}
