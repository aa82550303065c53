package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A daemon that does not answer in time: a read is simply retried, but a
// change may have been made, and retrying an enqueue without a unique key
// could enqueue the job twice: the error must say so, not just "retry".
func TestClientTimeoutSaysWhetherAChangeMayHaveBeenMade(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before srv.Close
	c, err := newClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	for _, tc := range []struct {
		method, path string
		body         any
		want, not    string
	}{
		{"GET", "/v1/jobs", nil, "and retry", "outcome is unknown"},
		{"POST", "/v1/jobs", map[string]string{"kind": "echo"}, "the job may or may not have been enqueued", "and retry"},
		{"POST", "/v1/jobs/batch", map[string]any{"jobs": []any{}}, "unique_key", "and retry"},
		{"POST", "/v1/jobs/x/cancel", nil, "the change may or may not have been made", "and retry"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := c.call(ctx, tc.method, tc.path, nil, tc.body, nil)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), tc.not) {
			t.Errorf("%s %s with no answer: %v; want it to say %q", tc.method, tc.path, err, tc.want)
		}
	}
}
