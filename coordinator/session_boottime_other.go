//go:build !linux

package coordinator

import "time"

// bootClock is nil: only Linux's CLOCK_BOOTTIME is read. Elsewhere a
// session's deadline counts only time the monotonic clock counts, which
// may leave out time the system spent suspended.
var bootClock func() time.Duration
