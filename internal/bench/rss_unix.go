//go:build unix

package bench

import (
	"runtime"
	"syscall"
	"time"
)

// maxRSSMB returns the peak resident set of this process in MiB.
func maxRSSMB() float64 {
	ru, ok := rusage()
	if !ok {
		return 0
	}
	maxrss := float64(ru.Maxrss)
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return maxrss / (1 << 20) // bytes
	}
	return maxrss / (1 << 10) // KiB (Linux, the BSDs)
}

// cpuTime returns the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	ru, ok := rusage()
	if !ok {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rusage returns this process's resource usage.
func rusage() (syscall.Rusage, bool) {
	var ru syscall.Rusage
	return ru, syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil
}
