package etcdnode

import (
	"fmt"
	"path/filepath"
)

// DirInUseError is Start's error when another member (of this process or
// another) has the data directory open: etcd would wait, without end and
// deaf to its context, for bbolt's lock of the backend. Nothing was
// written and no port was bound.
type DirInUseError struct {
	Dir string // the member's data directory
	PID int    // the process holding it, or 0 if not known
}

func (e *DirInUseError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("etcdnode: data directory %s is in use by another member (pid %d)", e.Dir, e.PID)
	}
	return fmt.Sprintf("etcdnode: data directory %s is in use by another member", e.Dir)
}

// backendPath is where etcd keeps the member's backend (bbolt) in dir, as
// its ServerConfig.BackendPath says.
func backendPath(dir string) string { return filepath.Join(dir, "member", "snap", "db") }

// dirFree is checkDirFree; a test skips the check, to make etcd wait.
var dirFree = checkDirFree

// checkDirFree returns a *DirInUseError if a running member holds the
// backend of dir. It only asks (bbolt's own lock, taken and released at
// once): a member that starts on dir right after may still win, which
// Start's context then bounds.
func checkDirFree(dir string) error {
	if held, pid := backendLocked(backendPath(dir)); held {
		return &DirInUseError{Dir: dir, PID: pid}
	}
	return nil
}
