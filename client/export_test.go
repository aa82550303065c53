package client

import (
	"context"
	"testing"
	"time"
)

// SetBusyPause makes f the pause between sends of a request that the
// daemon did not process, until t ends. t must not run in parallel.
func SetBusyPause(t testing.TB, f func(ctx context.Context, d time.Duration) error) {
	old := busyPause
	busyPause = f
	t.Cleanup(func() { busyPause = old })
}

// BusyAttempts is how many times a request the daemon did not process is
// sent at most.
var BusyAttempts = busy.Attempts
