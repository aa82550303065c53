// Package testutil holds the small helpers that the tests of several
// packages share: a quiet logger, a local store in a temporary directory,
// a log buffer safe to read while written, one request to an
// http.Handler, and a store that counts (and can cut) its range reads.
// Only tests import it.
package testutil

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/localstore"
)

// QuietLogger logs nowhere, unless the tests run with -v.
func QuietLogger(testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// TempLocal opens a local store in a temporary directory, closed when the
// test ends.
func TempLocal(t testing.TB, log *slog.Logger) *localstore.Store {
	t.Helper()
	ls, err := localstore.Open(t.TempDir(), localstore.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ls.Close() })
	return ls
}

// APICall sends one request to h, with the header pairs hdr, and returns
// the status and the body.
func APICall(t testing.TB, h http.Handler, method, path, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, "http://127.0.0.1:7420"+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, err := io.ReadAll(rec.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Code, b
}

// SyncBuffer is a log destination safe to read while written.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ErrRangesCut is the error of a RangeCountingStore's reads while cut.
var ErrRangesCut = errors.New("testutil: range reads cut")

// RangeCountingStore counts range reads, and fails them with ErrRangesCut
// while FailRanges is set.
type RangeCountingStore struct {
	kv.Store
	Ranges     atomic.Int64
	FailRanges atomic.Bool
}

func (s *RangeCountingStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	s.Ranges.Add(1)
	if s.FailRanges.Load() {
		return kv.RangeResult{}, ErrRangesCut
	}
	return s.Store.Range(ctx, r)
}
