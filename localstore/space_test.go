package localstore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// syncBuffer is a bytes.Buffer that a logger and a test share
// (testutil.SyncBuffer, which this package cannot import: testutil
// imports it).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// CheckSpace refuses, with kv.ErrNoSpace and the figures, while the file
// system has less free than the reserve, and passes again once it has
// more; each change is logged once, not at every call.
func TestCheckSpace(t *testing.T) {
	fs := vfs.NewMem()
	var logs syncBuffer
	s := openOnWith(t, fs, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), MinFreeBytes: 100 << 20})
	defer func() { _ = s.Close() }()

	if err := s.CheckSpace(); err != nil {
		t.Fatalf("a file system that cannot say how much is free: %v, want nil", err)
	}
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 101 << 20, TotalBytes: 1 << 30})
	if err := s.CheckSpace(); err != nil {
		t.Fatalf("101 MiB free, 100 MiB reserve: %v, want nil", err)
	}
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 99 << 20, TotalBytes: 1 << 30})
	for range 3 {
		err := s.CheckSpace()
		var se *SpaceError
		if !errors.Is(err, kv.ErrNoSpace) || !errors.As(err, &se) {
			t.Fatalf("99 MiB free, 100 MiB reserve: %v, want a *SpaceError wrapping kv.ErrNoSpace", err)
		}
		if se.Free != 99<<20 || se.Reserve != 100<<20 || se.Dir != "/data" {
			t.Fatalf("refusal %+v: want 99 MiB free, a 100 MiB reserve, on /data", se)
		}
		if want := "99.0 MiB free on the file system of /data, under the 100.0 MiB kept in reserve"; !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal %q does not say %q", err, want)
		}
	}
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 200 << 20, TotalBytes: 1 << 30})
	if err := s.CheckSpace(); err != nil {
		t.Fatalf("200 MiB free again: %v, want nil", err)
	}
	if n := strings.Count(logs.String(), "disk space is short"); n != 1 {
		t.Errorf("three refusals in a row logged %d times, want once:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "above the reserve again"); n != 1 {
		t.Errorf("the recovery logged %d times, want once:\n%s", n, logs.String())
	}

	// Writes are not checked: the jobs held go on.
	if _, err := s.Txn(ctxT(t), kv.Txn{Then: []kv.Op{kv.Put("k", []byte("v"), 0)}}); err != nil {
		t.Fatal(err)
	}
}

// A negative MinFreeBytes turns the check off.
func TestCheckSpaceOff(t *testing.T) {
	fs := vfs.NewMem()
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 0, TotalBytes: 1 << 30})
	s := openOnWith(t, fs, Options{Logger: slog.New(slog.DiscardHandler), MinFreeBytes: -1})
	defer func() { _ = s.Close() }()
	if err := s.CheckSpace(); err != nil {
		t.Fatalf("no reserve, a full disk: %v, want nil", err)
	}
	s.opts.MinFreeBytes = 1
	if err := s.CheckSpace(); !errors.Is(err, kv.ErrNoSpace) {
		t.Fatalf("a 1-byte reserve, a full disk: %v, want kv.ErrNoSpace", err)
	}
}

// A background error that Pebble retries hundreds of times a second (a
// flush on a full disk) is logged at once and then once per
// backgroundErrorEvery, saying how many were not; a full disk is named.
func TestBackgroundErrorsThrottled(t *testing.T) {
	var logs syncBuffer
	now := time.Unix(1_000_000, 0)
	b := &backgroundErrors{log: slog.New(slog.NewTextHandler(&logs, nil)), now: func() time.Time { return now }}
	full := fmt.Errorf("write /data/pebble/000018.sst: %w", syscall.ENOSPC)
	for range 500 {
		b.report(full)
		now = now.Add(time.Millisecond)
	}
	if n := strings.Count(logs.String(), "background error"); n != 1 {
		t.Fatalf("500 errors in 0.5 s logged %d lines, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "the disk is full") {
		t.Errorf("an ENOSPC is not named a full disk:\n%s", logs.String())
	}
	now = now.Add(backgroundErrorEvery)
	b.report(errors.New("some other error"))
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "not_logged_since_last=499") || strings.Contains(lines[1], "disk is full") {
		t.Fatalf("after %s: want a second line counting the 499 not logged, without the full-disk hint:\n%s", backgroundErrorEvery, logs.String())
	}
}

// A write whose sync fails fails the store: Failed is closed, Err says why,
// and every later call fails, until the store is opened again.
func TestFailedAfterAWriteError(t *testing.T) {
	fs := &heldSyncFS{FS: vfs.NewMem()}
	s := openOn(t, fs)
	defer func() { _ = s.Close() }()
	mustPut(t, s, "k", "v", 0)
	select {
	case <-s.Failed():
		t.Fatal("Failed is closed before any write failed")
	default:
	}
	if s.Err() != nil {
		t.Fatalf("Err before any failure: %v", s.Err())
	}
	fs.failing.Store(true)
	if _, err := s.Txn(ctxT(t), kv.Txn{Then: []kv.Op{kv.Put("k", []byte("w"), 0)}}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write whose sync fails: %v, want ENOSPC", err)
	}
	select {
	case <-s.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("Failed is not closed after a write failed")
	}
	if err := s.Err(); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "reopen it") {
		t.Fatalf("Err after the failure: %v", err)
	}
	if _, err := s.Range(ctxT(t), kv.RangeRequest{Start: "k"}); !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, kv.ErrFailed) {
		t.Fatalf("a read after the failure: %v, want the failure, kv.ErrFailed", err)
	}
}
