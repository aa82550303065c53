//go:build !unix

package localstore

import "time"

// cpuTime is 0 where the process's CPU time is not read: the benchmarks'
// cpu-ns/op then say nothing.
func cpuTime() time.Duration { return 0 }
