package localstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// pebbleDir is the subdirectory of the data directory that Pebble owns.
const pebbleDir = "pebble"

// Store is the kv.Store of one process on a Pebble directory. It is safe for
// concurrent use. Create it with [Open]; release it with [Store.Close].
type Store struct {
	opts      Options
	log       *slog.Logger
	lock      *dirLock
	db        *pebble.DB
	startRev  int64 // revision after recovery at Open
	recovered int   // leased keys deleted at Open

	// mu serialises everything that assigns revisions or reads the lease
	// table, and pairs a revision with a Pebble view in Range.
	mu       sync.Mutex
	rev      int64 // last revision applied (visible; maybe not yet synced)
	leaseSeq int64 // last lease id granted
	leases   map[kv.LeaseID]*lease
	closed   bool
	// ttls mirrors the lease table's ids and TTLs (written under mu), so
	// that KeepAliveOnce answers without waiting for mu, which a large
	// transaction or a Pebble write stall may hold for long: a renewal
	// that waited past the session's deadline would fence the worker.
	ttls     sync.Map       // kv.LeaseID -> time.Duration
	ops      sync.WaitGroup // calls in flight; Close waits for them
	watchers sync.WaitGroup // watch goroutines; Close waits for them

	done      chan struct{} // closed when Close starts
	closeOnce sync.Once
	closeErr  error

	// The durability watermark: every revision up to synced is on disk.
	// Reads and watches never report a revision above it, so nothing is
	// observed that a crash could take back.
	smu    sync.Mutex
	synced int64
	syncCh chan struct{} // closed and replaced when synced or failed changes
	failed error         // a sync failed; the store refuses further calls
	failCh chan struct{} // closed when failed is set
	// idle holds the watches that have sent every event up to synced and
	// wait for one of their prefix: markSynced wakes only those that a
	// revision it marks has an event for, so that each write does not
	// wake every watch (a worker serving many queues has one per queue).
	idle idleWatches
	// watchWakes counts the wake-ups of idle watches, for tests.
	watchWakes atomic.Int64

	hist *history

	fs    vfs.FS // what Pebble writes to
	space spaceState

	// misuse counts the single deletes that Pebble's compactions found
	// without exactly one Set under them (see txnExec.batch): it stays 0.
	misuse *atomic.Int64
}

var _ kv.Store = (*Store)(nil)

// lease is a live lease of this process. Leases do not expire while the
// process lives: the directory lock proves that it is the only owner, and
// its death is what ends them (see Open).
type lease struct {
	ttl  time.Duration
	keys map[string]struct{}
}

// Open opens the store in dir, creating the directory if it is missing.
//
// It fails with a [*LockedError], which matches [ErrLocked], when another
// process, or another open Store of this process, holds dir; the holder
// is not disturbed. Every key that a previous process attached to a lease is
// deleted at once, in one synced transaction of one new revision, since the
// process that held those leases is gone; [Store.RecoveredLeasedKeys] says
// how many. A backup made by [Store.Backup] is refused (ErrBackup): it is
// opened only after [Restore].
func Open(dir string, opts Options) (*Store, error) {
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := refuseBackup(dir); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	s, err := open(lock, opts)
	if err != nil {
		_ = lock.unlock()
		return nil, err
	}
	return s, nil
}

func open(lock *dirLock, opts Options) (*Store, error) {
	popts := &pebble.Options{
		CacheSize:    opts.CacheSize + 2*int64(opts.MemTableSize), // see Options.CacheSize
		Logger:       pebbleLogger{opts.Logger},
		MemTableSize: opts.MemTableSize,
		// Up to four memtables queued for flush before writes stall,
		// rather than Pebble's two: absorbs bursts of enqueues.
		MemTableStopWritesThreshold: 4,
		// L0 is compacted once eight sublevels deep, not Pebble's four
		// (and writes stop at 16, not 12): most keys of a job (its index
		// entries, ownership and running keys) are written and deleted
		// within moments, and a compaction of more flushed files at once
		// finds more of them cancelled: 10 % less CPU in a 150,000-job
		// drain (docs/performance.md, section 18).
		L0CompactionThreshold: 8,
		L0StopWritesThreshold: 16,
		FormatMajorVersion:    pebble.FormatNewest,
	}
	// Bloom filters on every level: most keys a transaction reads before
	// writing do not exist yet (a claim's ownership and running keys), and
	// without a filter each such Get reads a block of every sstable whose
	// range covers the key.
	//
	// 32 KiB blocks, not Pebble's 4 KiB: a claim reads its candidates and
	// their records in key order, mostly from tables flushed since they
	// were enqueued and so in no cache yet, and each block it loads is a
	// read, a checksum and a decompression. Larger blocks serve a claim
	// with a few loads instead of dozens (see docs/performance.md,
	// section 23).
	for i := range popts.Levels {
		popts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		popts.Levels[i].BlockSize = 32 << 10
	}
	// Keys written once and then deleted are deleted with SingleDelete
	// (see txnExec.batch); a compaction that finds one misused reports it.
	misuse := new(atomic.Int64)
	bgErrs := &backgroundErrors{log: opts.Logger, now: time.Now}
	popts.EventListener = &pebble.EventListener{
		PossibleAPIMisuse: func(info pebble.PossibleAPIMisuseInfo) {
			misuse.Add(1)
			opts.Logger.Error("localstore: Pebble reports a possible misuse", slog.String("info", info.String()))
		},
		BackgroundError: bgErrs.report,
	}
	if opts.fs != nil {
		popts.FS = opts.fs
	}
	fs := vfs.Default
	if opts.fs != nil {
		fs = opts.fs
	}
	if err := mkdirDurable(fs, filepath.Join(lock.dir, pebbleDir), dataDirPerm); err != nil {
		return nil, fmt.Errorf("localstore: create %s: %w", filepath.Join(lock.dir, pebbleDir), err)
	}
	db, err := pebble.Open(filepath.Join(lock.dir, pebbleDir), popts)
	if err != nil {
		return nil, fmt.Errorf("localstore: open %s: %w", lock.dir, err)
	}
	s := &Store{
		opts:   opts,
		log:    opts.Logger,
		lock:   lock,
		db:     db,
		leases: map[kv.LeaseID]*lease{},
		done:   make(chan struct{}),
		syncCh: make(chan struct{}),
		failCh: make(chan struct{}),
		idle:   newIdleWatches(),
		misuse: misuse,
		fs:     fs,
	}
	if err := s.load(); err != nil {
		_ = db.Close()
		return nil, err
	}
	s.synced = s.rev
	s.startRev = s.rev
	s.hist = newHistory(opts.WatchHistory, opts.WatchHistoryBytes, s.rev)
	return s, nil
}

// mkdirDurable creates dir (with mode perm) and its missing parents (0755)
// on fs, and syncs the parent of each directory it creates: until then a
// power loss may take a new directory, and everything written in it, back
// out of existence (Pebble syncs its own directory's entries, not the
// directory's).
func mkdirDurable(fs vfs.FS, dir string, perm os.FileMode) error {
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := fs.Stat(d); err == nil {
			break
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(created) > 0 {
		if err := fs.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return err
		}
		if err := fs.MkdirAll(dir, perm); err != nil {
			return err
		}
	}
	for _, d := range slices.Backward(created) {
		parent, err := fs.OpenDir(filepath.Dir(d))
		if err != nil {
			return err
		}
		err = parent.Sync()
		if cerr := parent.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("sync directory %s: %w", filepath.Dir(d), err)
		}
	}
	return nil
}

// load checks the format, reads the counters and deletes the keys of the
// previous process's leases.
func (s *Store) load() error {
	format, found, err := readCounter(s.db, keyFormat, "format")
	if err != nil {
		return err
	}
	if !found {
		b := s.db.NewBatch()
		defer b.Close()
		if err := b.Set(keyFormat, encodeUint64(storeFormat), nil); err != nil {
			return err
		}
		if err := s.db.Apply(b, pebble.Sync); err != nil {
			return fmt.Errorf("localstore: initialise %s: %w", s.lock.dir, err)
		}
	} else if format != storeFormat {
		return fmt.Errorf("localstore: %s has store format %d; this leasehold reads format %d", s.lock.dir, format, storeFormat)
	}
	rev, found, err := readCounter(s.db, keyRevision, "revision counter")
	if err != nil {
		return err
	}
	if !found {
		rev = 1 // as in etcd, an empty store is at revision 1
	}
	s.rev = rev
	if s.leaseSeq, _, err = readCounter(s.db, keyLeaseSeq, "lease counter"); err != nil {
		return err
	}
	return s.deletePreviousLeases()
}

// readCounter reads a counter of db's metadata; found is false, and the
// counter 0, when it is missing.
func readCounter(db *pebble.DB, key []byte, name string) (v int64, found bool, err error) {
	b, closer, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("localstore: read %s: %w", name, err)
	}
	defer closer.Close()
	v, err = decodeCounter(name, b)
	return v, true, err
}

// deletePreviousLeases deletes every key attached to a lease, and the whole
// lease index, in one synced batch of one new revision. Leases belong to
// the process that granted them; this process holds the directory lock, so
// that process is gone and so are its leases.
//
// Its deletes are plain Deletes, never SingleDeletes: a leased key may have
// been put more than once on its lease, and a single delete of it would let
// an older Set come back in a compaction (ADR 0010;
// TestSweepAtOpenNeverResurrects).
func (s *Store) deletePreviousLeases() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixLease}, UpperBound: []byte{prefixLease + 1}})
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	deleted := 0
	for it.First(); it.Valid(); it.Next() {
		if err := b.Delete(it.Key(), nil); err != nil {
			_ = it.Close()
			return err
		}
		id, key, err := parseLeaseIndexKey(it.Key())
		if err != nil {
			// Ours, but unreadable: it cannot name a key, so drop it.
			s.log.Warn("localstore: dropping a corrupt lease index entry at open", "err", err)
			continue
		}
		cur, err := s.readKey(key)
		switch {
		case errors.Is(err, ErrCorrupt):
			// The index says the key is leased, so it is deleted either way.
			s.log.Warn("localstore: deleting a corrupt leased key at open", "err", err)
		case err != nil:
			_ = it.Close()
			return err
		case cur == nil || cur.Lease != id:
			continue // stale index entry; nothing to delete
		}
		if err := b.Delete(dataKey(key), nil); err != nil {
			_ = it.Close()
			return err
		}
		deleted++
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("localstore: scan lease index: %w", err)
	}
	if b.Empty() {
		return nil
	}
	if deleted > 0 {
		s.rev++
		if err := b.Set(keyRevision, encodeUint64(s.rev), nil); err != nil {
			return err
		}
	}
	if err := s.db.Apply(b, pebble.Sync); err != nil {
		return fmt.Errorf("localstore: delete keys of previous leases: %w", err)
	}
	s.recovered = deleted
	if deleted > 0 {
		s.log.Info("localstore: deleted the keys of the previous process's leases",
			"dir", s.lock.dir, "keys", deleted, "revision", s.rev)
	}
	return nil
}

// RecoveredLeasedKeys returns how many keys attached to leases of a
// previous process Open deleted.
func (s *Store) RecoveredLeasedKeys() int { return s.recovered }

// StartRevision returns the store revision when Open returned. A watch can
// start from any revision above it that the in-memory history still holds.
func (s *Store) StartRevision() int64 { return s.startRev }

// Dir returns the absolute path of the data directory.
func (s *Store) Dir() string { return s.lock.dir }

// Limits implements kv.Store: no bound on the number of ops, and
// Options.MaxTxnBytes on their size.
func (s *Store) Limits() kv.Limits { return kv.Limits{MaxOps: 0, MaxBytes: s.opts.MaxTxnBytes} }

// readKey reads the committed value of key, nil when missing. Callers hold
// mu or otherwise know that no batch is half applied.
func (s *Store) readKey(key string) (*kv.KeyValue, error) {
	raw, closer, err := s.db.Get(dataKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("localstore: read %q: %w", key, err)
	}
	defer closer.Close()
	kv, err := decodeValue(key, raw, false)
	if err != nil {
		return nil, err
	}
	return &kv, nil
}

// readKeys reads the committed value of every key of keys into it (nil
// when missing), through one Pebble iterator seeking the keys in order: a
// Get per key would set up the iterators of every level each time. It reads
// one point in time, at or after its call.
func (s *Store) readKeys(keys map[string]*kv.KeyValue) error {
	if len(keys) == 0 {
		return nil
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixData}, UpperBound: []byte{prefixData + 1}})
	if err != nil {
		return fmt.Errorf("localstore: read keys: %w", err)
	}
	var dk []byte
	for _, k := range sorted {
		dk = append(append(dk[:0], prefixData), k...)
		if !it.SeekPrefixGE(dk) || !bytes.Equal(it.Key(), dk) {
			continue
		}
		raw, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("localstore: read %q: %w", k, err)
		}
		x, err := decodeValue(k, raw, false)
		if err != nil {
			_ = it.Close()
			return err
		}
		keys[k] = &x
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("localstore: read keys: %w", err)
	}
	return nil
}

// beginLocked admits a call: it fails on a closed or failed store, and otherwise
// registers the call so that Close waits for it. The caller holds mu and
// calls s.ops.Done when it is finished.
func (s *Store) beginLocked() error {
	if s.closed {
		return kv.ErrClosed
	}
	if err := s.failure(); err != nil {
		return err
	}
	s.ops.Add(1)
	return nil
}

func (s *Store) failure() error {
	s.smu.Lock()
	defer s.smu.Unlock()
	return s.failed
}

// commit applies b under mu so that it is visible in revision order, and
// returns a function, to be called after mu is released, that waits for the
// batch to be on disk: concurrent commits share one fsync (group commit).
func (s *Store) commitLocked(b *pebble.Batch) (wait func() error, err error) {
	if err := s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		s.fail(err)
		return nil, fmt.Errorf("localstore: apply batch: %w", err)
	}
	return func() error {
		err := b.SyncWait()
		if err != nil {
			s.fail(err)
			return fmt.Errorf("localstore: sync batch: %w", err)
		}
		_ = b.Close()
		return nil
	}, nil
}

// fail records a write failure: Pebble's commit pipeline cannot be trusted
// after one, so every later call fails until the store is reopened.
func (s *Store) fail(err error) {
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.failed == nil {
		s.failed = &failedError{err}
		s.log.Error("localstore: write failed", slog.String("dir", s.lock.dir), slog.String("err", err.Error())) // not %+v: see backgroundErrors
		close(s.syncCh)
		s.syncCh = make(chan struct{})
		close(s.failCh)
	}
}

// failedError is every call's error once the store failed after err: it
// wraps err, and is kv.ErrFailed.
type failedError struct{ err error }

func (e *failedError) Error() string {
	return "localstore: store failed after a write error, reopen it: " + e.err.Error()
}

func (e *failedError) Unwrap() error { return e.err }

func (e *failedError) Is(target error) bool { return target == kv.ErrFailed }

// Failed returns a channel closed when the store fails after a write error
// (a WAL write or sync that did not succeed: a full disk, an I/O error):
// from then on every call fails until the store is closed and opened
// again, and [Store.Err] says why. A program that owns the store should
// stop and start again; the reopened store recovers what was synced.
func (s *Store) Failed() <-chan struct{} { return s.failCh }

// Err returns why the store failed, or nil (see [Store.Failed]).
func (s *Store) Err() error { return s.failure() }

// markSynced raises the durability watermark to rev. A batch's sync covers
// every batch before it in the WAL, so the watermark is a maximum.
func (s *Store) markSynced(rev int64) {
	s.smu.Lock()
	defer s.smu.Unlock()
	if rev > s.synced {
		old := s.synced
		s.synced = rev
		close(s.syncCh)
		s.syncCh = make(chan struct{})
		s.idle.wake(s.hist, old, rev)
	}
}

// syncState returns the watermark and a channel closed when it next moves.
func (s *Store) syncState() (int64, <-chan struct{}, error) {
	s.smu.Lock()
	defer s.smu.Unlock()
	return s.synced, s.syncCh, s.failed
}

// waitSyncedUnless is waitSynced, skipped for a serializable read (see
// kv.RangeRequest.Serializable).
func (s *Store) waitSyncedUnless(ctx context.Context, rev int64, serializable bool) error {
	if serializable {
		return nil
	}
	return s.waitSynced(ctx, rev)
}

// waitSynced waits until revision rev is on disk.
func (s *Store) waitSynced(ctx context.Context, rev int64) error {
	for {
		synced, ch, failed := s.syncState()
		if synced >= rev {
			return nil
		}
		if failed != nil {
			return failed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close ends every watch, waits for calls in flight, closes Pebble and
// releases the directory. It is idempotent; later calls return the first
// call's result. Every other method fails with kv.ErrClosed afterwards.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.done)
		s.watchers.Wait()
		s.ops.Wait()
		var errs []error
		if err := s.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("localstore: close pebble: %w", err))
		}
		if err := s.lock.unlock(); err != nil {
			errs = append(errs, err)
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// pebbleLogger sends Pebble's log lines to slog: informational ones at debug
// level, since Pebble is chatty about flushes and compactions.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf is called by Pebble on errors it cannot continue from (a failed
// WAL write, corruption found by a read, for two). It must not return, and
// it ends the process, as Pebble's default logger does: a panic would not
// do, since some of these calls are made in the goroutine of a store call,
// whose caller may recover it (net/http recovers every request's panic, the
// worker a handler's), and the process would live on with the store's
// mutex and Pebble's locks held, renewing its lease. A restart recovers
// from what is on disk.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble", "fatal", true, "stack", string(debug.Stack()))
	os.Exit(1)
}

var _ io.Closer = (*Store)(nil)
