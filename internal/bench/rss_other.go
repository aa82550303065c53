//go:build !unix

package bench

import "time"

// maxRSSMB is not measured on this platform.
func maxRSSMB() float64 { return 0 }

// cpuTime is not measured on this platform.
func cpuTime() time.Duration { return 0 }
