package localstore

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A backup taken while writes go on holds every write acknowledged before
// it; restored with a bump larger than the writes the store made after it,
// the restored store hands out revisions (fencing tokens) above every one
// the original handed out, after the backup too. The backup itself is left
// as it was and can be restored again.
func TestBackupRestore(t *testing.T) {
	dataDir, backupDir := t.TempDir(), filepath.Join(t.TempDir(), "backup")
	s := openDir(t, dataDir, Options{})
	for i := range 100 {
		mustPut(t, s, fmt.Sprintf("before/%03d", i), "v", 0)
	}
	lease, err := s.Grant(ctxT(t), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "leased", "v", lease)
	acked := mustPut(t, s, "last-before", "v", 0)

	// Writers keep committing during the backup.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				mustPut(t, s, fmt.Sprintf("during/%d/%d", w, i), "v", 0)
			}
		})
	}
	info, err := s.Backup(ctxT(t), backupDir)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if info.Revision < acked || info.Source != dataDir {
		t.Fatalf("backup %+v: want revision at least %d, source %s", info, acked, dataDir)
	}
	if got, err := ReadBackup(backupDir); err != nil || got.Revision != info.Revision {
		t.Fatalf("ReadBackup: %+v, %v; want revision %d", got, err, info.Revision)
	}
	var after int64
	for i := range 50 {
		after = mustPut(t, s, fmt.Sprintf("after/%03d", i), "v", 0)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for round := range 2 { // the backup restores twice: it is not changed
		restored := filepath.Join(t.TempDir(), "restored")
		const bump = 10_000 // more than the writes after the backup
		rev, err := Restore(restored, backupDir, bump)
		if err != nil {
			t.Fatalf("round %d: Restore: %v", round, err)
		}
		if rev != info.Revision+bump {
			t.Fatalf("round %d: Restore says revision %d, want %d", round, rev, info.Revision+bump)
		}
		r := openDir(t, restored, Options{})
		for i := range 100 {
			if kv := mustGet(t, r, fmt.Sprintf("before/%03d", i)); kv == nil {
				t.Fatalf("round %d: before/%03d, acknowledged before the backup, is missing", round, i)
			}
		}
		if mustGet(t, r, "last-before") == nil {
			t.Fatalf("round %d: the last write before the backup is missing", round)
		}
		if mustGet(t, r, "after/000") != nil {
			t.Fatalf("round %d: a write made after the backup is in it", round)
		}
		// The previous process's leases are gone, as at any open.
		if mustGet(t, r, "leased") != nil || r.RecoveredLeasedKeys() != 1 {
			t.Fatalf("round %d: leased key kept (recovered %d)", round, r.RecoveredLeasedKeys())
		}
		if next := mustPut(t, r, "new", "v", 0); next <= after {
			t.Fatalf("round %d: first revision after the restore %d, not above %d, handed out by the original after the backup", round, next, after)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A backup is not a data directory: opening it is refused, and leaves it
// untouched, since it would hand out revisions the lost store handed out.
func TestOpenRefusesBackup(t *testing.T) {
	s := openTemp(t, Options{})
	mustPut(t, s, "k", "v", 0)
	backupDir := filepath.Join(t.TempDir(), "b")
	if _, err := s.Backup(ctxT(t), backupDir); err != nil {
		t.Fatal(err)
	}
	if r, err := Open(backupDir, Options{}); !errors.Is(err, ErrBackup) {
		if err == nil {
			_ = r.Close()
		}
		t.Fatalf("Open of a backup: %v, want ErrBackup", err)
	}
	if _, err := os.Stat(filepath.Join(backupDir, lockFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused Open wrote a lock file in the backup (%v)", err)
	}
	// Nor is it bumped in place: it is restored into a new directory.
	if _, err := Restore(backupDir, "", 0); !errors.Is(err, ErrBackup) {
		t.Fatalf("Restore of a backup in place: %v, want ErrBackup", err)
	}
}

func TestBackupRefusals(t *testing.T) {
	dataDir := t.TempDir()
	s := openDir(t, dataDir, Options{})
	mustPut(t, s, "k", "v", 0)
	exists := t.TempDir()
	for _, dir := range []string{exists, filepath.Join(dataDir, "backup"), dataDir, filepath.Dir(dataDir)} {
		if _, err := s.Backup(ctxT(t), dir); !errors.Is(err, ErrBackup) {
			t.Errorf("Backup to %s: %v, want ErrBackup", dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dataDir, "backup")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused backup inside the data directory created it (%v)", err)
	}
	// A path the caller must fix: a parent that is a file.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Backup(ctxT(t), filepath.Join(file, "sub", "b")); !errors.Is(err, ErrBackup) || !strings.Contains(err.Error(), "not a directory): pass a directory") {
		t.Errorf("Backup under a file: %v, want ErrBackup saying what to do", err)
	}
	// Restore needs a backup as its source, and an empty target.
	if _, err := Restore(filepath.Join(t.TempDir(), "r"), exists, 0); !errors.Is(err, ErrBackup) {
		t.Errorf("Restore from a directory that is not a backup: %v, want ErrBackup", err)
	}
	backupDir := filepath.Join(t.TempDir(), "b")
	if _, err := s.Backup(ctxT(t), backupDir); err != nil {
		t.Fatal(err)
	}
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(full, backupDir, 0); !errors.Is(err, ErrBackup) {
		t.Errorf("Restore into a non-empty directory: %v, want ErrBackup", err)
	}
	if _, err := Restore(filepath.Join(t.TempDir(), "r"), backupDir, -1); !errors.Is(err, ErrBackup) {
		t.Errorf("Restore with a negative bump: %v, want ErrBackup", err)
	}
	huge := filepath.Join(t.TempDir(), "r")
	if _, err := Restore(huge, backupDir, math.MaxInt64-1); !errors.Is(err, ErrBackup) {
		t.Errorf("Restore with a bump that overflows the counter: %v, want ErrBackup", err)
	}
	if _, err := os.Stat(huge); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a copy left without its bump (%v): it would hand out the lost store's tokens again", err)
	}
	// A failed copy leaves the target empty: unreadable backup files.
	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.MkdirAll(filepath.Join(broken, pebbleDir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, backupMarker), []byte(`{"revision":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "t")
	if _, err := Restore(target, broken, 0); err == nil {
		t.Error("Restore of a backup holding a directory succeeded")
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Errorf("a failed copy left %d entries in the target", len(ents))
	}
}

// A data directory put back from a snapshot is bumped in place; an open
// one is refused.
func TestRestoreInPlace(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, Options{})
	last := mustPut(t, s, "k", "v", 0)
	if _, err := Restore(dir, "", 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("Restore of an open store: %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rev, err := Restore(dir, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if rev != last+DefaultRevisionBump {
		t.Fatalf("Restore: revision %d, want %d", rev, last+DefaultRevisionBump)
	}
	r := openDir(t, dir, Options{})
	if next := mustPut(t, r, "k2", "v", 0); next <= rev {
		t.Fatalf("first revision after the bump %d, want above %d", next, rev)
	}
	if mustGet(t, r, "k") == nil {
		t.Fatal("key lost by the bump")
	}
	if _, err := Restore(t.TempDir(), "", 0); !errors.Is(err, ErrBackup) {
		t.Fatalf("Restore in place of a directory without a store: %v, want ErrBackup", err)
	}
}

// Backups asked at once to one directory: one writes it, the others are
// refused without touching it (each failure removes only what its own
// call created).
func TestConcurrentBackupsToOneDirectory(t *testing.T) {
	s := openTemp(t, Options{})
	mustPut(t, s, "k", "v", 0)
	for round := range 20 {
		dir := filepath.Join(t.TempDir(), "b")
		start := make(chan struct{})
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				<-start
				_, errs[i] = s.Backup(ctxT(t), dir)
			})
		}
		close(start)
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, ErrBackup):
				t.Errorf("round %d: a Backup racing another to its directory: %v, want ErrBackup (it exists)", round, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d of %d backups succeeded, want 1 (%v)", round, ok, len(errs), errs)
		}
		if _, err := ReadBackup(dir); err != nil {
			t.Fatalf("round %d: the backup that succeeded is gone: %v", round, err)
		}
		if _, err := Restore(filepath.Join(t.TempDir(), "r"), dir, 10); err != nil {
			t.Fatalf("round %d: Restore of the backup that succeeded: %v", round, err)
		}
	}
}

// The backup holds every job's payload: only the daemon's user reads it.
func TestBackupIsPrivate(t *testing.T) {
	s := openTemp(t, Options{})
	mustPut(t, s, "k", "secret", 0)
	dir := filepath.Join(t.TempDir(), "b")
	if _, err := s.Backup(ctxT(t), dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Fatalf("backup directory mode %v: others may read the payloads", perm)
	}
}

// The data directory is recognised through a symlink: a backup into it is
// refused.
func TestBackupIntoDataDirThroughSymlinkRefused(t *testing.T) {
	dataDir := t.TempDir()
	s := openDir(t, dataDir, Options{})
	mustPut(t, s, "k", "v", 0)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dataDir, link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(link, "backup"), filepath.Join(link, pebbleDir, "backup")} {
		if _, err := s.Backup(ctxT(t), dir); !errors.Is(err, ErrBackup) {
			t.Errorf("Backup to %s (inside the data directory): %v, want ErrBackup", dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dataDir, "backup")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a backup was written inside the data directory (%v)", err)
	}
}

// A restore into the backup itself is refused, and leaves the backup as
// it was: restorable.
func TestRestoreInsideBackupRefused(t *testing.T) {
	s := openTemp(t, Options{})
	mustPut(t, s, "k", "v", 0)
	backupDir := filepath.Join(t.TempDir(), "b")
	if _, err := s.Backup(ctxT(t), backupDir); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(backupDir, pebbleDir, "r"), filepath.Join(backupDir, "r"), backupDir + "/"} {
		if _, err := Restore(dir, backupDir, 10); !errors.Is(err, ErrBackup) {
			t.Errorf("Restore into %s: %v, want ErrBackup", dir, err)
		}
	}
	if _, err := Restore(filepath.Join(t.TempDir(), "r"), backupDir, 10); err != nil {
		t.Fatalf("the backup no longer restores: %v", err)
	}
}

// TestDataDirectoriesReadableByTheirUserOnly: a data directory that Open
// creates, and one that Restore creates, hold every job's payload, so
// others may not read them (under the usual umask, 022, they could: the
// directories were 0755), as they may
// not read the backup itself (0700). The files in them need not be
// private then (Pebble creates its own 0644).
func TestDataDirectoriesReadableByTheirUserOnly(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	dataDir := filepath.Join(t.TempDir(), "parent", "data")
	s := openDir(t, dataDir, Options{})
	mustPut(t, s, "secret", "payload", 0)
	backupDir := filepath.Join(t.TempDir(), "backup")
	if _, err := s.Backup(ctxT(t), backupDir); err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	if _, err := Restore(restored, backupDir, 0); err != nil {
		t.Fatal(err)
	}
	// The parents Open creates stay traversable: only the directory that
	// holds the store is private.
	if st, err := os.Stat(filepath.Dir(dataDir)); err != nil {
		t.Fatal(err)
	} else if st.Mode().Perm() != 0o755 {
		t.Errorf("parent of the data directory: mode %v, want 0755", st.Mode().Perm())
	}
	for _, dir := range []string{dataDir, restored} {
		for _, d := range []string{dir, filepath.Join(dir, pebbleDir)} {
			if st, err := os.Stat(d); err != nil {
				t.Fatal(err)
			} else if st.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s: mode %v, want no access for group and others", d, st.Mode().Perm())
			}
		}
	}
}

// A backup restored long after it was taken: the lost store may have run
// on all that time, handing out tokens above the backup's. At the store's
// measured ceiling (about 100,000 synced transactions a second on a 2-core
// VM, the README's Benchmarks), a day is 8.6 billion revisions, and the
// fixed default bump (1e9) is under three hours of it: the restore must
// raise the counter by more, the older the backup, unless told how much.
func TestRestoreBumpCoversTheBackupsAge(t *testing.T) {
	dataDir, backupDir := t.TempDir(), filepath.Join(t.TempDir(), "backup")
	s := openDir(t, dataDir, Options{})
	mustPut(t, s, "k", "v", 0)
	info, err := s.Backup(ctxT(t), backupDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Taken a day ago, as its marker says.
	info.CreatedAt = info.CreatedAt.Add(-24 * time.Hour)
	if err := os.Remove(filepath.Join(backupDir, backupMarker)); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(backupDir, info); err != nil {
		t.Fatal(err)
	}
	const lostStoreMax = 100_000 * 24 * 60 * 60 // a day at the measured ceiling
	rev, err := Restore(filepath.Join(t.TempDir(), "restored"), backupDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rev <= info.Revision+lostStoreMax {
		t.Errorf("Restore of a day-old backup: revision %d, not above the %d the lost store may have reached in a day", rev, info.Revision+lostStoreMax)
	}
	// A bump given is the operator's figure, taken as it is.
	if rev, err := Restore(filepath.Join(t.TempDir(), "restored"), backupDir, 5000); err != nil || rev != info.Revision+5000 {
		t.Errorf("Restore with bump 5000: %d, %v; want %d", rev, err, info.Revision+5000)
	}
}

// A restore from a backup into the directory an open store holds (a
// running daemon's) is refused as in use, naming the directory and its
// holder, as the in-place restore is, not as a directory that is merely
// not empty: the README promises exit 1, "a daemon holds it", for both.
// Nothing in it changes.
func TestRestoreIntoHeldDirectoryRefused(t *testing.T) {
	src, backupDir := t.TempDir(), filepath.Join(t.TempDir(), "b")
	s := openDir(t, src, Options{})
	if _, err := s.Backup(ctxT(t), backupDir); err != nil {
		t.Fatal(err)
	}
	live := t.TempDir()
	l := openDir(t, live, Options{})
	last := mustPut(t, l, "k", "v", 0)
	before, err := os.ReadDir(live)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Restore(live, backupDir, 0)
	var le *LockedError
	if !errors.As(err, &le) || le.Dir != live {
		t.Fatalf("Restore into a held directory: %v; want a LockedError naming %s", err, live)
	}
	if after, _ := os.ReadDir(live); len(after) != len(before) {
		t.Errorf("the refused restore changed the directory: %d entries, %d before", len(after), len(before))
	}
	if next := mustPut(t, l, "k2", "v", 0); next != last+1 {
		t.Errorf("the holder's store after the refusal: revision %d, want %d", next, last+1)
	}
}
