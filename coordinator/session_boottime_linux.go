//go:build linux

package coordinator

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootClock reads CLOCK_BOOTTIME, which, unlike CLOCK_MONOTONIC (Go's
// monotonic clock), counts time the system spent suspended; nil if the
// kernel lacks it (before Linux 2.6.39).
var bootClock = func() func() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return nil
	}
	return readBootTime
}()

func readBootTime() time.Duration {
	var ts unix.Timespec
	// It cannot fail once it has succeeded (checked above).
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return time.Duration(ts.Nano())
}
