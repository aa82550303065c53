package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apicall"
	"github.com/leasehold/leasehold/internal/testutil"
)

// cliCall sends one request to the in-process API of a shared-mode CLI
// command and returns the status and the error message, if any.
func cliCall(t *testing.T, h http.Handler, ctx context.Context, method, path, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequestWithContext(ctx, method, "http://etcd"+path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	msg, _ := apicall.ErrorMessage(rec.Body.Bytes())
	return rec.Code, msg
}

// The in-process API of a shared-mode CLI command has no daemon behind
// it: it logs nothing (the CLI prints its error on one line), its store
// errors say to check etcd rather than a daemon's log, and a payload over
// the limit says what to do.
func TestSharedCLIAPIErrorsSpeakToTheCLI(t *testing.T) {
	var logged bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	log := testutil.QuietLogger(t)
	ls := testutil.TempLocal(t, log)
	store := &testutil.RangeCountingStore{Store: ls}
	const maxPayload = 8 << 10 // as an etcd limit makes it smaller than the default
	coord, err := coordinator.New(store, coordinator.Config{Logger: log, MaxPayloadBytes: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	h := newCLIAPI(coord)
	ctx := context.Background()

	payload := `{"kind":"echo","payload":"` + strings.Repeat("x", maxPayload) + `"}`
	code, msg := cliCall(t, h, ctx, "POST", "/v1/jobs", payload)
	if code != http.StatusBadRequest || !strings.Contains(msg, "payload") || !strings.Contains(msg, "send a smaller payload") {
		t.Errorf("payload over the limit: %d %q, want 400 saying to send a smaller payload", code, msg)
	}
	if strings.Contains(msg, "daemon") {
		t.Errorf("payload over the limit: %q names a daemon; the CLI's own limit applies", msg)
	}
	if !strings.Contains(msg, "--max-payload") {
		t.Errorf("payload over the limit: %q does not say that the CLI takes the cluster's --max-payload", msg)
	}

	store.FailRanges.Store(true)
	code, msg = cliCall(t, h, ctx, "GET", "/v1/stats", "")
	if code != http.StatusInternalServerError || strings.Contains(msg, "daemon") || !strings.Contains(msg, "--etcd") {
		t.Errorf("store error: %d %q, want 500 saying to check the etcd endpoints, naming no daemon", code, msg)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	code, msg = cliCall(t, h, cancelled, "GET", "/v1/stats", "")
	if strings.Contains(msg, "daemon") {
		t.Errorf("request cancelled: %d %q names a daemon", code, msg)
	}
	if logged.Len() > 0 {
		t.Errorf("the CLI's in-process API logged (a CLI error is one line):\n%s", logged.String())
	}
}
