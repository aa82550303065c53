package localstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// ErrLocked is matched by the error of [Open] (a [*LockedError]) when
// another process, or another open Store of this process, holds the data
// directory.
var ErrLocked = errors.New("localstore: data directory in use")

// lockFileName is the file in the data directory that the owner holds an
// exclusive flock on, with its pid written in it for the refusal message.
const lockFileName = "leasehold.lock"

// openDirs holds the absolute, cleaned paths of the directories open in this
// process. An flock already conflicts between two open file descriptions of
// one process, but Pebble's own LOCK uses fcntl locks, which do not; so a
// second Open in this process is refused here before it touches anything.
var openDirs = struct {
	sync.Mutex
	m map[string]bool
}{m: map[string]bool{}}

// dirLock is a held data directory.
type dirLock struct {
	dir string   // absolute and clean, as given
	key string   // dir with symlinks resolved: the registry key
	f   *os.File // holds the flock while open
}

// LockedError is the refusal of a data directory that someone else holds:
// errors.Is(err, ErrLocked) matches it, and errors.As gives the directory
// and the holder, for a program that says in its own terms what to do (the
// daemon names its --data flag).
type LockedError struct {
	Dir       string // absolute and clean, as given
	PID       int    // the holder's pid; 0 if unknown
	InProcess bool   // held by another open Store of this process
}

// Holder says whose the directory is, without what to do: "data directory
// DIR is in use by another leasehold process (pid N)", or "... is already
// open in this process (pid N)".
func (e *LockedError) Holder() string {
	if e.InProcess {
		return fmt.Sprintf("data directory %s is already open in this process (pid %d)", e.Dir, e.PID)
	}
	holder := "another leasehold process"
	if e.PID > 0 {
		holder += fmt.Sprintf(" (pid %d)", e.PID)
	}
	return fmt.Sprintf("data directory %s is in use by %s", e.Dir, holder)
}

func (e *LockedError) Error() string {
	if e.InProcess {
		return "localstore: " + e.Holder() + ": close the Store open on it first, or open another directory"
	}
	return "localstore: " + e.Holder() + ": stop that process first, or open another directory"
}

// Is makes errors.Is(err, ErrLocked) match.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// dataDirPerm is the mode of the data directories (and of their store
// directory) that Open and Restore create: they hold every job's payload,
// so only the daemon's user may read them, as a backup.
const dataDirPerm = 0o700

// lockDir creates dir if needed and takes it for this Store: first in the
// process registry, then with an exclusive non-blocking flock on the lock
// file. A refused attempt changes nothing that the holder relies on.
func lockDir(dir string) (*dirLock, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("localstore: data directory %s: %w", dir, err)
	}
	abs = filepath.Clean(abs)
	// Creating a missing directory cannot disturb a holder.
	if err := mkdirDurable(vfs.Default, abs, dataDirPerm); err != nil {
		return nil, fmt.Errorf("localstore: create data directory: %w: pass a directory whose parent the daemon's user can write", err)
	}
	// The registry is keyed by the resolved path, so that two spellings of
	// one directory (through a symlink, say) are one entry.
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("localstore: data directory %s: %w", abs, err)
	}

	openDirs.Lock()
	defer openDirs.Unlock()
	if openDirs.m[resolved] {
		return nil, &LockedError{Dir: abs, PID: os.Getpid(), InProcess: true}
	}
	path := filepath.Join(abs, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("localstore: open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close() // closing our descriptor does not release the holder's flock
		if errors.Is(err, unix.EWOULDBLOCK) {
			// Not this process (its registry says so), whatever pid the
			// file names: two containers sharing a volume may both be
			// pid 1.
			return nil, &LockedError{Dir: abs, PID: readPID(path)}
		}
		return nil, fmt.Errorf("localstore: lock %s: %w", path, err)
	}
	// Ours now: record who holds it, for the message a refused opener prints.
	if err := writePID(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("localstore: write lock file %s: %w", path, err)
	}
	openDirs.m[resolved] = true
	return &dirLock{dir: abs, key: resolved, f: f}, nil
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// unlock releases the flock and the registry entry. The lock file stays:
// removing it would race with a new opener that already has it open.
func (l *dirLock) unlock() error {
	openDirs.Lock()
	defer openDirs.Unlock()
	err := l.f.Close() // releases the flock
	delete(openDirs.m, l.key)
	if err != nil {
		return fmt.Errorf("localstore: release lock of %s: %w", l.dir, err)
	}
	return nil
}
