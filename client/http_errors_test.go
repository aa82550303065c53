package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// The API's errors read as the coordinator's do in shared mode, the
// sentinel's text once (not "job not found: job not found: ID"), and
// still wrap the sentinel. The bodies are what the daemon answers
// (internal/apiserver/api.go strips the "coordinator: " prefixes).
func TestHTTPErrorsSayTheSentinelOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		status int
		msg    string
		want   error // as the coordinator makes it
	}{
		{http.StatusNotFound, "job not found: " + someID, fmt.Errorf("%w: %s", coordinator.ErrNotFound, someID)},
		{http.StatusConflict, "job is in the wrong state: job " + someID + " is already completed: only unfinished jobs can be cancelled",
			fmt.Errorf("%w: job %s is already completed: only unfinished jobs can be cancelled", coordinator.ErrWrongState, someID)},
		{http.StatusConflict, "cancel job " + someID + ": too many concurrent changes, try again",
			fmt.Errorf("cancel job %s: %w", someID, coordinator.ErrConflict)},
		{http.StatusBadRequest, "unknown kind nope: this daemon runs echo", fmt.Errorf("%w: unknown kind nope: this daemon runs echo", coordinator.ErrInvalid)},
	} {
		c := fakeDaemon(t, tc.status, fmt.Sprintf(`{"error":%q}`+"\n", tc.msg))
		_, err := c.Cancel(ctx, someID)
		if err == nil || err.Error() != tc.want.Error() {
			t.Errorf("%d %q: error %v, want %q", tc.status, tc.msg, err, tc.want)
		}
		if sentinel := errors.Unwrap(tc.want); !errors.Is(err, sentinel) {
			t.Errorf("%d %q: error %v does not wrap %v", tc.status, tc.msg, err, sentinel)
		}
	}
}

// An http:// URL for a daemon that serves HTTPS is told to use https://.
func TestHTTPToTLSDaemonSaysUseHTTPS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	plain := strings.Replace(srv.URL, "https://", "http://", 1)
	c, err := client.NewHTTP(plain, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.Get(ctx, someID)
	if want := "leasehold daemon at " + plain + " serves HTTPS: use " + srv.URL; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Get over http:// from a TLS daemon: %v, want %q", err, want)
	}
}

// A daemon whose store did not answer within its deadline answers 503 with
// Retry-After; the client's error wraps context.DeadlineExceeded, as a
// store that does not answer does in shared mode, so that callers handle
// both alike (a write's outcome unknown). Another 503 does not.
func TestHTTPStoreDeadlineIsDeadlineExceeded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, retryAfter := range []bool{true, false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if retryAfter {
				w.Header().Set("Retry-After", "5")
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":"the store did not answer within 10s (etcd unreachable or without quorum?): the outcome is unknown"}`+"\n")
		}))
		c, err := client.NewHTTP(srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Cancel(ctx, someID)
		if got := errors.Is(err, context.DeadlineExceeded); got != retryAfter {
			t.Errorf("503 with Retry-After %v: error %v wraps context.DeadlineExceeded: %v, want %v", retryAfter, err, got, retryAfter)
		}
		if err == nil || !strings.Contains(err.Error(), "the store did not answer within 10s") {
			t.Errorf("503: error %v, want the daemon's message", err)
		}
		_ = c.Close()
		srv.Close()
	}
}

// Counts and Queues go through the same request path as the other
// methods: the token is sent, a stalled store is context.DeadlineExceeded,
// and an answer without counts is an error rather than empty counts.
func TestHTTPCountsAndQueuesErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stalled atomic.Bool
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		if stalled.Load() {
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":"the store did not answer within 10s (etcd unreachable or without quorum?): the outcome is unknown"}`+"\n")
			return
		}
		_, _ = io.WriteString(w, `{}`+"\n")
	}))
	t.Cleanup(srv.Close)
	c, err := client.NewHTTP(srv.URL, &client.Options{Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if counts, err := c.Counts(ctx); err == nil {
		t.Errorf("Counts from an answer without counts = %v, want an error", counts)
	}
	if got := auth.Load(); got != "Bearer s3cret" {
		t.Errorf("Authorization %q, want %q", got, "Bearer s3cret")
	}
	if qs, err := c.Queues(ctx); err != nil || qs == nil || len(qs) != 0 {
		t.Errorf("Queues from an answer without queues = %#v, %v, want none, as the coordinator says with no queue", qs, err)
	}
	stalled.Store(true)
	if _, err := c.Counts(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Counts from a stalled store: %v, want context.DeadlineExceeded", err)
	}
	if _, err := c.Queues(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Queues from a stalled store: %v, want context.DeadlineExceeded", err)
	}
}

// A daemon without room for new jobs answers 507; the client's error wraps
// kv.ErrNoSpace, as a store short of room does when used directly.
func TestHTTPNoSpaceIsErrNoSpace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInsufficientStorage)
		_, _ = io.WriteString(w, `{"error":"the daemon's disk is short of space, and it takes no new jobs"}`+"\n")
	}))
	defer srv.Close()
	c, err := client.NewHTTP(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_, err = c.InsertMany(ctx, []client.InsertParams{{Args: client.RawArgs{KindName: "k"}}})
	if !errors.Is(err, kv.ErrNoSpace) || errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "short of space") {
		t.Fatalf("507: error %v, want one wrapping kv.ErrNoSpace with the daemon's message", err)
	}
}
