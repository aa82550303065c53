package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A write whose answer never arrives whole (the connection dropped after
// the request was read, an answer cut short) or that a proxy answered
// 5xx without Leasehold-Not-Processed may have been made: the CLI must
// say that the outcome is unknown, not "retry", which would enqueue a
// job twice. A read is simply retried.
func TestCLIWriteFailureAfterTheRequestIsOutcomeUnknown(t *testing.T) {
	handlers := map[string]http.HandlerFunc{
		"connection dropped after the request": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_ = conn.Close()
		},
		"answer cut short": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "500")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"job":{"id":"`)
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Error(err)
			}
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			_ = conn.Close()
		},
		"a proxy's 502": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html><body>502 Bad Gateway</body></html>\n")
		},
		"a proxy's 504": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusGatewayTimeout)
			_, _ = io.WriteString(w, "upstream request timeout\n")
		},
		"a 503 without the mark and without Retry-After": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":"request cancelled: the client disconnected or the daemon is stopping"}`+"\n")
		},
	}
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
