package localstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// ErrBackup is wrapped by the errors of [Store.Backup] and [Restore] that
// are about their arguments (a directory that exists, is not a backup, or
// is the store's own), and by [Open]'s refusal of a backup directory.
var ErrBackup = errors.New("localstore: backup")

// backupMarker is the file that makes a directory a backup: Open refuses
// it, so that a backup is only used through Restore, which raises its
// revision counter.
const backupMarker = "leasehold-backup.json"

// unfinishedBackup and unfinishedRestore mark a directory that a backup or
// a restore is writing, until it is done: Open refuses both.
const (
	unfinishedBackup  = "leasehold-backup.unfinished"
	unfinishedRestore = "leasehold-restore.unfinished"
)

// discardLogger drops what Pebble logs while Backup and Restore open a
// copy: its informational lines would read as the store's own.
var discardLogger = slog.New(slog.DiscardHandler)

// DefaultRevisionBump is the least that [Restore] raises a restored
// store's revision counter by when not told how much, as etcd's
// documentation suggests for its --bump-revision. It is not much: a store
// at its measured ceiling (about 100,000 synced transactions a second on
// 2 cores) issues that many in under three hours, so a backup's restore
// raises the counter by more, the older the backup (see [RevisionBump]).
const DefaultRevisionBump = 1_000_000_000

// MaxRevisionRate is the rate, in revisions a second, that [RevisionBump]
// assumes no store exceeds: a hundred times the measured ceiling.
const MaxRevisionRate = 10_000_000

// RevisionBump returns how much [Restore] raises the revision counter of
// the backup info restored at now when given bump: bump when it is
// positive (the operator's figure), otherwise the larger of
// DefaultRevisionBump and the revisions a store could have issued since
// the backup was taken at MaxRevisionRate, so that the lost store, which may
// have run on until the restore, cannot have handed out the tokens the
// restored store will.
func RevisionBump(info BackupInfo, bump int64, now time.Time) int64 {
	if bump > 0 {
		return bump
	}
	age := now.Sub(info.CreatedAt)
	if info.CreatedAt.IsZero() || age <= 0 {
		return DefaultRevisionBump
	}
	// Capped far below the counters' range: Restore refuses a bump past
	// half of it.
	secs := min(int64(math.Ceil(age.Seconds())), (math.MaxInt64/4)/MaxRevisionRate)
	return max(DefaultRevisionBump, secs*MaxRevisionRate)
}

// BackupInfo describes a backup (the marker file's content).
type BackupInfo struct {
	// Revision is the store's revision in the backup: every transaction
	// acknowledged before Backup was called is in it.
	Revision int64 `json:"revision"`
	// CreatedAt is when the backup was taken.
	CreatedAt time.Time `json:"created_at"`
	// Source is the data directory it was taken from.
	Source string `json:"source"`
}

// Backup writes a consistent copy of the store to dir, a directory that
// must not exist yet, while the store keeps serving: it holds every
// transaction acknowledged before the call (and maybe some that commit
// during it), and is on disk when Backup returns. Its sstables are hard
// links where dir is on the same filesystem as the store, so it takes
// little time and space at first. dir is created by the call, readable by
// its user only (a backup holds every payload).
//
// A backup is not a data directory: Open refuses it, and one cut short by
// a crash. [Restore] turns a copy of it into one, raising the revision
// counter so that fencing tokens stay above those the lost store handed
// out after the backup.
func (s *Store) Backup(ctx context.Context, dir string) (BackupInfo, error) {
	if err := ctx.Err(); err != nil {
		return BackupInfo{}, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("localstore: backup to %s: %w", dir, err)
	}
	abs = filepath.Clean(abs)
	if real := resolvePath(abs); within(real, s.lock.key) || within(s.lock.key, real) {
		return BackupInfo{}, fmt.Errorf("%w: %s overlaps the data directory %s: pass a directory outside it", ErrBackup, abs, s.lock.dir)
	}
	s.mu.Lock()
	if err := s.beginLocked(); err != nil {
		s.mu.Unlock()
		return BackupInfo{}, err
	}
	s.mu.Unlock()
	defer s.ops.Done()

	// The directory is created here, exclusively, so that a failure
	// removes only what this call made (not a backup another call is
	// writing there), and readable by the daemon's user only: it holds
	// every job's payload.
	if err := mkdirDurable(vfs.Default, filepath.Dir(abs), 0o755); err != nil {
		return BackupInfo{}, backupDirError(abs, err)
	}
	if err := os.Mkdir(abs, 0o700); errors.Is(err, os.ErrExist) {
		return BackupInfo{}, fmt.Errorf("%w: %s exists: pass a directory that does not exist yet", ErrBackup, abs)
	} else if err != nil {
		return BackupInfo{}, backupDirError(abs, err)
	}
	if err := syncDir(filepath.Dir(abs)); err != nil {
		_ = os.Remove(abs)
		return BackupInfo{}, fmt.Errorf("localstore: backup to %s: %w", abs, err)
	}
	info, err := s.backupInto(abs)
	if err != nil {
		// The store first: the mark that Open refuses goes last.
		if os.RemoveAll(filepath.Join(abs, pebbleDir)) == nil {
			_ = os.RemoveAll(abs)
		}
		return BackupInfo{}, fmt.Errorf("localstore: backup to %s: %w", abs, err)
	}
	s.log.Info("localstore: backup written", "dir", abs, "revision", info.Revision)
	return info, nil
}

// backupDirError is the error of a failure to create the backup directory
// abs: ErrBackup, saying what to do, where the path is the caller's to fix
// (a parent that is a file, that cannot be created, or that the daemon's
// user may not write).
func backupDirError(abs string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) ||
		errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EROFS)) {
		return fmt.Errorf("%w: cannot create %s (%s: %v): pass a directory whose parent the daemon's user can write", ErrBackup, abs, pe.Path, pe.Err)
	}
	return fmt.Errorf("localstore: backup to %s: %w", abs, err)
}

// backupInto writes the backup into the new, empty directory dir. Until
// the marker is written, dir holds the file unfinishedBackup, which Open
// refuses: a crash mid-way leaves a complete but unbumped store there, or
// a partial one. The marker is written once the checkpoint is on disk, so
// a marked directory is a complete backup.
func (s *Store) backupInto(dir string) (BackupInfo, error) {
	if err := writeFileDurable(dir, unfinishedBackup, "a backup being written, or cut short: not a data directory\n"); err != nil {
		return BackupInfo{}, err
	}
	crashPoint(dir, "backup: begun")
	// Pebble's checkpoint first syncs the WAL (so it covers every
	// acknowledged transaction), then links or copies a consistent view,
	// and syncs it.
	if err := s.db.Checkpoint(filepath.Join(dir, pebbleDir), pebble.WithFlushedWAL()); err != nil {
		return BackupInfo{}, err
	}
	crashPoint(dir, "backup: checkpoint written")
	info := BackupInfo{CreatedAt: time.Now().UTC(), Source: s.lock.dir}
	var err error
	if info.Revision, err = readRevision(filepath.Join(dir, pebbleDir)); err != nil {
		return BackupInfo{}, fmt.Errorf("read it back: %w", err)
	}
	if err := writeMarker(dir, info); err != nil {
		return BackupInfo{}, err
	}
	crashPoint(dir, "backup: marker written")
	if err := os.Remove(filepath.Join(dir, unfinishedBackup)); err != nil {
		return BackupInfo{}, err
	}
	return info, syncDir(dir)
}

// ReadBackup returns what dir's marker says, or an error wrapping ErrBackup
// when dir is not a backup.
func ReadBackup(dir string) (BackupInfo, error) {
	b, err := os.ReadFile(filepath.Join(dir, backupMarker))
	if errors.Is(err, os.ErrNotExist) {
		if exists(filepath.Join(dir, unfinishedBackup)) {
			return BackupInfo{}, fmt.Errorf("%w: %s is a backup that was cut short: remove it and take another", ErrBackup, dir)
		}
		return BackupInfo{}, fmt.Errorf("%w: %s is not a backup (no %s in it): name the directory a backup was written to", ErrBackup, dir, backupMarker)
	}
	if err != nil {
		return BackupInfo{}, fmt.Errorf("localstore: read backup %s: %w", dir, err)
	}
	var info BackupInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return BackupInfo{}, fmt.Errorf("%w: %s: unreadable %s: %v", ErrBackup, dir, backupMarker, err)
	}
	return info, nil
}

// Restore makes dir a data directory that can be opened in place of a lost
// or rolled-back store, and returns its revision counter after the bump.
//
// With from set, from is a backup made by [Store.Backup] and dir must not
// exist (or be empty) and be outside from: the backup is copied into dir
// and left as it is, so that it can be restored again. Until the copy is
// bumped, Open refuses dir, even after a crash. With from empty, dir is an
// existing data directory that went back in time (a filesystem or VM
// snapshot put back, a copy of a stopped store) and is bumped in place; it
// must not be open (a [*LockedError] if it is).
//
// Either way the revision counter is raised by bump: fencing tokens are
// revisions, and the lost store may have handed out tokens above the copy's
// revision after the copy was taken; they must stay below every token the
// restored store hands out (etcd asks the same of a snapshot restore, with
// --bump-revision). A bump of 0 is [RevisionBump]'s for a backup (at least
// DefaultRevisionBump, more for an older backup), and DefaultRevisionBump in
// place, where the copy's age is unknown. The jobs are as they were in
// the copy: those running are re-queued when the store is next opened, and
// those that finished after the copy will run again.
func Restore(dir, from string, bump int64) (int64, error) {
	if bump < 0 {
		return 0, fmt.Errorf("%w: negative revision bump %d", ErrBackup, bump)
	}
	if from == "" {
		if bump == 0 {
			bump = DefaultRevisionBump
		}
		return bumpRevision(dir, bump)
	}
	info, err := ReadBackup(from)
	if err != nil {
		return 0, err
	}
	bump = RevisionBump(info, bump, time.Now())
	if d, f := resolvePath(dir), resolvePath(from); within(d, f) || within(f, d) {
		return 0, fmt.Errorf("%w: %s overlaps the backup %s: restore into a directory outside it", ErrBackup, dir, from)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		// A running daemon's directory is in use (exit 1 in the CLI), not
		// merely the wrong one.
		if err := probeLock(dir); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: %s is not empty: restore into a new directory", ErrBackup, dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("localstore: restore into %s: %w", dir, err)
	}
	_, statErr := os.Stat(dir)
	// Held from here to the end, so that a daemon started on dir meanwhile
	// is refused rather than have its new store removed by a failed copy's
	// cleanup.
	lock, err := lockDir(dir)
	if err != nil {
		return 0, err
	}
	rev, err := restoreInto(lock, from, bump)
	if err != nil {
		// Removed, so that neither a copy without its bump (it would hand
		// out the lost store's tokens again) nor a partial one is opened:
		// the store first, the mark that Open refuses last.
		if os.RemoveAll(filepath.Join(dir, pebbleDir)) == nil {
			_ = os.Remove(filepath.Join(dir, lockFileName))
			_ = lock.unlock()
			if errors.Is(statErr, os.ErrNotExist) {
				_ = os.RemoveAll(dir)
			} else {
				_ = os.Remove(filepath.Join(dir, unfinishedRestore))
			}
			return 0, err
		}
		_ = lock.unlock()
		return 0, err
	}
	if err := lock.unlock(); err != nil {
		return 0, err
	}
	return rev, nil
}

// probeLock returns a [*LockedError] when an open Store, of this process
// or another, holds dir, and nil otherwise (or when it cannot tell). It
// creates and writes nothing.
func probeLock(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil
	}
	abs = filepath.Clean(abs)
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil
	}
	openDirs.Lock()
	defer openDirs.Unlock()
	if openDirs.m[resolved] {
		return &LockedError{Dir: abs, PID: os.Getpid(), InProcess: true}
	}
	path := filepath.Join(abs, lockFileName)
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close() // releases the flock if it was taken
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return &LockedError{Dir: abs, PID: readPID(path)}
	}
	return nil
}

// restoreInto copies the backup from into the empty directory dir and
// bumps it. Until the bump is on disk, dir holds the file
// unfinishedRestore, which Open refuses: a crash mid-way leaves an
// unbumped or partial copy there.
func restoreInto(lock *dirLock, from string, bump int64) (int64, error) {
	dir := lock.dir
	if err := writeFileDurable(dir, unfinishedRestore, "a restore in progress, or cut short: not a data directory yet\n"); err != nil {
		return 0, fmt.Errorf("localstore: restore into %s: %w", dir, err)
	}
	crashPoint(dir, "restore: begun")
	// Copied, not linked: Pebble may recycle a WAL file, overwriting it in
	// place, which would change the backup through a link.
	if err := copyDir(filepath.Join(dir, pebbleDir), filepath.Join(from, pebbleDir)); err != nil {
		return 0, fmt.Errorf("localstore: restore into %s: copy the backup: %w", dir, err)
	}
	crashPoint(dir, "restore: copied")
	rev, err := bumpLocked(lock, bump)
	if err != nil {
		return 0, err
	}
	crashPoint(dir, "restore: bumped")
	if err := os.Remove(filepath.Join(dir, unfinishedRestore)); err != nil {
		return 0, fmt.Errorf("localstore: restore into %s: %w", dir, err)
	}
	if err := syncDir(dir); err != nil {
		return 0, fmt.Errorf("localstore: restore into %s: %w", dir, err)
	}
	return rev, nil
}

// bumpRevision raises the revision and lease counters of the stopped store
// in dir by bump, durably, and returns the revision counter after it.
func bumpRevision(dir string, bump int64) (int64, error) {
	if _, err := os.Stat(filepath.Join(dir, pebbleDir)); err != nil {
		return 0, fmt.Errorf("%w: %s holds no store (%v): bump in place a data directory put back from a snapshot, or restore a backup by naming it as the source", ErrBackup, dir, err)
	}
	if err := refuseBackup(dir); err != nil {
		return 0, err
	}
	return bumpStore(dir, bump)
}

// bumpStore raises the counters of the stopped store in dir by bump, in
// one synced batch.
func bumpStore(dir string, bump int64) (int64, error) {
	lock, err := lockDir(dir)
	if err != nil {
		return 0, err
	}
	defer func() { _ = lock.unlock() }()
	return bumpLocked(lock, bump)
}

// bumpLocked raises the counters of the stopped store in the directory
// held by lock by bump, in one synced batch.
func bumpLocked(lock *dirLock, bump int64) (int64, error) {
	db, err := pebble.Open(filepath.Join(lock.dir, pebbleDir), &pebble.Options{Logger: pebbleLogger{discardLogger}})
	if err != nil {
		return 0, fmt.Errorf("localstore: restore %s: open: %w", lock.dir, err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = db.Close()
		}
	}()
	rev, _, err := readCounter(db, keyRevision, "revision counter")
	if err != nil {
		return 0, fmt.Errorf("localstore: restore %s: %w", lock.dir, err)
	}
	seq, _, err := readCounter(db, keyLeaseSeq, "lease counter")
	if err != nil {
		return 0, fmt.Errorf("localstore: restore %s: %w", lock.dir, err)
	}
	if rev < 1 {
		rev = 1 // an empty store is at revision 1
	}
	if rev > math.MaxInt64/2-bump || seq > math.MaxInt64/2-bump {
		return 0, fmt.Errorf("%w: revision bump %d would take the counters (revision %d) past half their range: pass a smaller one", ErrBackup, bump, rev)
	}
	b := db.NewBatch()
	defer b.Close()
	// Lease ids too are never to be reused: the lease index is keyed by
	// them.
	if err := b.Set(keyRevision, encodeUint64(rev+bump), nil); err != nil {
		return 0, err
	}
	if err := b.Set(keyLeaseSeq, encodeUint64(seq+bump), nil); err != nil {
		return 0, err
	}
	if err := db.Apply(b, pebble.Sync); err != nil {
		return 0, fmt.Errorf("localstore: restore %s: raise the revision counter: %w", lock.dir, err)
	}
	closed = true
	if err := db.Close(); err != nil {
		return 0, fmt.Errorf("localstore: restore %s: close: %w", lock.dir, err)
	}
	return rev + bump, nil
}

// copyDir copies the regular files of directory from into a new directory
// to, each synced, then to itself and its parent. to and its files are
// readable by their user only, as the backup's.
func copyDir(to, from string) error {
	ents, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	if err := os.Mkdir(to, dataDirPerm); err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", filepath.Join(from, e.Name()))
		}
		if err := copyFile(filepath.Join(to, e.Name()), filepath.Join(from, e.Name())); err != nil {
			return err
		}
	}
	for _, d := range []string{to, filepath.Dir(to)} {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(to, from string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		return err
	}
	if err := dst.Sync(); err != nil {
		_ = dst.Close()
		return err
	}
	return dst.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// readRevision reads the revision counter of the Pebble directory dir.
func readRevision(dir string) (int64, error) {
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: pebbleLogger{discardLogger}})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	rev, _, err := readCounter(db, keyRevision, "revision counter")
	return rev, err
}

// writeMarker writes info as dir's backup marker, durably.
func writeMarker(dir string, info BackupInfo) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	return writeFileDurable(dir, backupMarker, string(b)+"\n")
}

// refuseBackup fails when dir is a backup, or a backup or restore that has
// not finished: opening it would hand out fencing tokens the lost store
// may have handed out already.
func refuseBackup(dir string) error {
	switch {
	case exists(filepath.Join(dir, backupMarker)):
		return fmt.Errorf("%w: %s is a backup, not a data directory: restore it into a new one (leasehold restore --from %s --data NEWDIR)", ErrBackup, dir, dir)
	case exists(filepath.Join(dir, unfinishedBackup)):
		return fmt.Errorf("%w: %s is a backup that was cut short, not a data directory: remove it, and take another backup", ErrBackup, dir)
	case exists(filepath.Join(dir, unfinishedRestore)):
		return fmt.Errorf("%w: %s is a restore that was cut short: remove it, and run leasehold restore into it again", ErrBackup, dir)
	}
	return nil
}

// exists reports whether path names a file (Lstat: a dangling symlink
// counts).
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// writeFileDurable creates the file name in dir with content, and syncs it
// and dir.
func writeFileDurable(dir, name, content string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(dir)
}

// resolvePath returns path, absolute and clean, with the symlinks of its
// longest existing prefix resolved: two spellings of one place compare
// equal even when the place does not exist yet.
func resolvePath(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	abs = filepath.Clean(abs)
	var rest []string
	for d := abs; ; d = filepath.Dir(d) {
		if real, err := filepath.EvalSymlinks(d); err == nil {
			return filepath.Join(append([]string{real}, rest...)...)
		}
		if filepath.Dir(d) == d {
			return abs
		}
		rest = append([]string{filepath.Base(d)}, rest...)
	}
}

// crashPoint is called after each durable step of a backup or restore of
// dir; tests copy dir there to see what a crash would leave.
var crashPoint = func(dir, step string) {}

// within reports whether path is dir or inside it (both absolute, clean).
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}
