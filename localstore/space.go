package localstore

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leasehold/leasehold/coordinator/kv"
)

var _ kv.SpaceChecker = (*Store)(nil)

// CheckSpace implements [kv.SpaceChecker]: it fails with an error wrapping
// kv.ErrNoSpace while the store's file system has less free space than
// Options.MinFreeBytes. It reads the file system's free space at each call
// (one statfs). The first refusal after room, and the first success after a
// refusal, are logged. A file system that cannot say how much is free
// passes, as does every call with a negative MinFreeBytes.
func (s *Store) CheckSpace() error {
	reserve := s.opts.MinFreeBytes
	if reserve < 0 {
		return nil
	}
	u, err := s.fs.GetDiskUsage(s.lock.dir)
	if err != nil {
		if !errors.Is(err, vfs.ErrUnsupported) {
			s.space.note(s.log, "", fmt.Errorf("read the free space of %s: %w", s.lock.dir, err))
		}
		return nil
	}
	free := int64(min(u.AvailBytes, 1<<62))
	if free >= reserve {
		s.space.note(s.log, "", nil)
		return nil
	}
	e := &SpaceError{Dir: s.lock.dir, Free: free, Reserve: reserve}
	s.space.note(s.log, e.Short(), nil)
	return e
}

// SpaceError is the refusal of [Store.CheckSpace]: the file system of Dir
// has Free bytes free, under the Reserve the store keeps
// (Options.MinFreeBytes). It wraps kv.ErrNoSpace.
type SpaceError struct {
	Dir           string
	Free, Reserve int64
}

// Short says how much is free, and under what reserve.
func (e *SpaceError) Short() string {
	return fmt.Sprintf("%s free on the file system of %s, under the %s kept in reserve", mib(e.Free), e.Dir, mib(e.Reserve))
}

func (e *SpaceError) Error() string { return "localstore: " + e.Short() + ": " + kv.ErrNoSpace.Error() }

// Unwrap returns kv.ErrNoSpace.
func (e *SpaceError) Unwrap() error { return kv.ErrNoSpace }

// spaceState remembers whether the last CheckSpace refused, so that a
// change is logged once and not at every enqueue.
type spaceState struct {
	mu      sync.Mutex
	short   bool
	readErr bool
}

// note logs a change: short is the refusal's text ("" if there is room),
// readErr a failure to read the free space (logged once, then ignored).
func (st *spaceState) note(log *slog.Logger, short string, readErr error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case readErr != nil:
		if !st.readErr {
			st.readErr = true
			log.Warn("localstore: cannot read the free space of the data directory's file system; new jobs are taken without the reserve check", slog.Any("err", readErr))
		}
	case short != "" && !st.short:
		st.short = true
		log.Warn("localstore: disk space is short: new jobs are refused until space is freed; queued and running jobs go on", slog.String("space", short))
	case short == "" && st.short:
		st.short = false
		log.Info("localstore: disk space is above the reserve again: new jobs are taken")
	}
}

// mib formats a byte count for a message.
func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// backgroundErrorEvery is how often a repeated Pebble background error is
// logged: a failing flush or compaction is retried at once, hundreds of
// times a second on a full disk, each a log line.
const backgroundErrorEvery = 10 * time.Second

// backgroundErrors logs Pebble's background errors (a flush or compaction
// that failed and will be retried), the first at once and then at most
// one per backgroundErrorEvery, with the count of those not logged.
type backgroundErrors struct {
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	last    time.Time // when the last one was logged; zero if never
	dropped int
}

func (b *backgroundErrors) report(err error) {
	b.mu.Lock()
	now := b.now()
	if !b.last.IsZero() && now.Sub(b.last) < backgroundErrorEvery {
		b.dropped++
		b.mu.Unlock()
		return
	}
	b.last = now
	dropped := b.dropped
	b.dropped = 0
	b.mu.Unlock()
	// err.Error(), not the error: slog prints an error value with %+v,
	// which for Pebble's errors is a stack trace.
	attrs := []any{slog.String("err", err.Error()), slog.Int("not_logged_since_last", dropped), slog.String("component", "pebble")}
	if errors.Is(err, syscall.ENOSPC) {
		attrs = append(attrs, slog.String("hint", "the disk is full: writes wait until space is freed, and nothing acknowledged is lost; free space on it"))
	}
	b.log.Error("localstore: Pebble background error, retried", attrs...)
}
