//go:build unix

package etcdnode

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// backendLocked reports whether another open file holds bbolt's lock of
// the backend at path (flock, exclusive for a writer), and the pid of its
// holder if /proc/locks tells it. A backend that cannot be opened (none
// yet) is not locked: etcd then reports what is wrong itself.
func backendLocked(path string) (held bool, pid int) {
	// Read-only and never created: the check writes nothing.
	f, err := os.Open(path)
	if err != nil {
		return false, 0
	}
	defer f.Close()
	fd := int(f.Fd())
	// The lock bbolt takes, without waiting; a shared lock (a read-only
	// opener) conflicts with it too.
	err = syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, lockHolder(f)
	}
	if err == nil {
		_ = syscall.Flock(fd, syscall.LOCK_UN)
	}
	return false, 0
}

// lockHolder returns the pid that /proc/locks (Linux) gives for the flock
// on f, or 0 if it names none or more than one.
func lockHolder(f *os.File) int {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	// /proc/locks names a file MAJOR:MINOR:INODE, the device numbers in
	// hex, as Linux encodes them in st_dev.
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^uint64(0xfff)
	minor := dev&0xff | (dev>>12)&^uint64(0xff)
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, uint64(st.Ino))
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer locks.Close()
	found := 0
	sc := bufio.NewScanner(locks)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 21722 fe:00:9987810 0 EOF"; a
		// waiter's line has "->" after the number.
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" || fs[5] != want {
			continue
		}
		p, err := strconv.Atoi(fs[4])
		if err != nil || p <= 0 || (found != 0 && found != p) {
			return 0
		}
		found = p
	}
	return found
}
