package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/testutil"
)

// writeFailures answer a request in the ways that leave a write's outcome
// unknown: the request was read, and no answer says it was not processed.
var writeFailures = func() map[string]http.HandlerFunc {
	m := testutil.WriteFailures()
	m["the store's deadline"] = func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":"the store did not answer within 10s (etcd unreachable or without quorum?): the outcome is unknown"}`+"\n")
	}
	m["a proxy's 200 page"] = func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "<html>ok</html>\n")
	}
	// JSON, but not the API's answer: a front that answers for the
	// daemon (a health shim, a gateway's default route).
	for name, body := range map[string]string{"a proxy's 200 {}": "{}", "a proxy's 200 status ok": `{"status":"ok"}`} {
		m[name] = func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, body+"\n")
		}
	}
	return m
}()

// A write whose outcome is unknown is sent once, and its error wraps
// ErrOutcomeUnknown (and, at the store's deadline, still
// context.DeadlineExceeded) so that a program does not send it again
// blindly, nor take it for a plain failure and insert a duplicate. A read
// does not wrap it.
func TestHTTPWriteOutcomeUnknown(t *testing.T) {
	for name, h := range writeFailures {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var sent atomic.Int64
			c := clientOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sent.Add(1)
				h(w, r)
			}))
			writes := map[string]func() error{
				"Insert": func() error { _, err := c.Insert(ctx, client.RawArgs{KindName: "echo"}, nil); return err },
				"InsertMany": func() error {
					_, err := c.InsertMany(ctx, []client.InsertParams{{Args: client.RawArgs{KindName: "echo"}}, {Args: client.RawArgs{KindName: "echo"}}})
					return err
				},
				"Cancel":     func() error { _, err := c.Cancel(ctx, someID); return err },
				"Retry":      func() error { _, err := c.Retry(ctx, someID); return err },
				"Delete":     func() error { _, err := c.Delete(ctx, someID); return err },
				"CancelMany": func() error { _, err := c.CancelMany(ctx, client.CancelFilter{Kind: "echo"}); return err },
			}
			for what, call := range writes {
				before := sent.Load()
				err := call()
				if !errors.Is(err, client.ErrOutcomeUnknown) {
					t.Errorf("%s: %v, want an error wrapping client.ErrOutcomeUnknown", what, err)
				}
				if n := sent.Load() - before; n != 1 {
					t.Errorf("%s: sent %d times, want once", what, n)
				}
				if name == "the store's deadline" && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s: %v no longer wraps context.DeadlineExceeded", what, err)
				}
			}
			if _, err := c.Get(ctx, someID); err == nil || errors.Is(err, client.ErrOutcomeUnknown) {
				t.Errorf("Get: %v, want an error that does not wrap client.ErrOutcomeUnknown", err)
			}
		})
	}
}

// A write that never reached a daemon (nothing listens) was not made: its
// error does not wrap ErrOutcomeUnknown.
func TestHTTPWriteNotSentIsNotOutcomeUnknown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c, err := client.NewHTTP("http://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Insert(ctx, client.RawArgs{KindName: "echo"}, nil); err == nil || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Errorf("Insert to a closed port: %v, want an error that does not wrap client.ErrOutcomeUnknown", err)
	}
}

// A batch split into requests whose second request's outcome is unknown
// returns the first request's jobs, exactly, and says which jobs may or
// may not have been inserted.
func TestHTTPInsertManyLaterBatchOutcomeUnknown(t *testing.T) {
	srv, requests := batchDaemon(t)
	drop := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Load() >= 1 {
			writeFailures["connection dropped after the request"](w, r)
			return
		}
		srv.Config.Handler.ServeHTTP(w, r)
	})
	c := clientOn(t, drop)
	ps := make([]client.InsertParams, 1500)
	for i := range ps {
		ps[i] = client.InsertParams{Args: client.RawArgs{KindName: "echo"}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs, err := c.InsertMany(ctx, ps)
	if !errors.Is(err, client.ErrOutcomeUnknown) || len(rs) != 1000 {
		t.Fatalf("InsertMany = %d results, %v; want 1000 and ErrOutcomeUnknown", len(rs), err)
	}
	t.Log(err)
	if !strings.Contains(err.Error(), "jobs 1000 to 1499") {
		t.Errorf("error %q does not name jobs 1000 to 1499 as unknown", err)
	}
}
