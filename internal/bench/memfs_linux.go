package bench

import "syscall"

// memoryBacked reports whether dir is on a filesystem held in memory
// (tmpfs, ramfs), where fsync reaches no disk.
func memoryBacked(dir string) bool {
	const (
		tmpfsMagic = 0x01021994
		ramfsMagic = 0x858458f6
	)
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type == tmpfsMagic || st.Type == ramfsMagic
}
