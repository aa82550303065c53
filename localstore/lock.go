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

// ErrLocked is wrapped by the error of [Open] when another process, or
// another open Store of this process, holds the data directory.
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

// lockedError is the refusal of a directory held by someone else.
type lockedError struct {
	dir       string
	pid       int  // 0 if unknown
	inProcess bool // held by another Store of this process
}

func (e *lockedError) Error() string {
	if e.inProcess {
		return fmt.Sprintf("localstore: data directory %s is already open in this process (pid %d); close the other store first or pass another --data directory", e.dir, e.pid)
	}
	holder := "another leasehold process"
	if e.pid > 0 {
		holder += fmt.Sprintf(" (pid %d)", e.pid)
	}
	return fmt.Sprintf("localstore: data directory %s is in use by %s; stop it or pass another --data directory", e.dir, holder)
}

func (e *lockedError) Is(target error) bool { return target == ErrLocked }

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
		return nil, &lockedError{dir: abs, pid: os.Getpid(), inProcess: true}
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
			return nil, &lockedError{dir: abs, pid: readPID(path)}
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
