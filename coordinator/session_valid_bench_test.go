package coordinator_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
)

// wallClock is RealClock under another type: a session on it has no boot
// clock, which sets the cost of Valid without one.
type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// BenchmarkSessionValid measures Valid, which runs before every fenced
// write: with the default boot clock (CLOCK_BOOTTIME on Linux) and without.
func BenchmarkSessionValid(b *testing.B) {
	for _, bc := range []struct {
		name  string
		clock coordinator.Clock
	}{{"boottime", nil}, {"monotonic-only", wallClock{}}} {
		b.Run(bc.name, func(b *testing.B) {
			s := sessionOn(b, openLocalstore(b), coordinator.SessionConfig{Clock: bc.clock})
			for b.Loop() {
				if !s.Valid() {
					b.Fatal("session not valid")
				}
			}
		})
	}
}
