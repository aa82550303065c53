package client

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/internal/apicall"
)

// ErrBusy is wrapped by the error of a request that a daemon refused
// without processing it, after the client's own retries: the daemon had
// as many HTTP connections open as it serves at once
// (--http-max-connections). Nothing was written, so the request is safe
// to send again as it is (an insert without a unique key included), later
// or to another daemon; or raise the daemon's bound. Unlike
// context.DeadlineExceeded, it never leaves a write's outcome unknown.
var ErrBusy = errors.New("client: daemon busy, request not processed")

// busy is how the client sends again a request that the daemon did not
// process (1 s apart beyond the connection bound): at most 5 sends and
// 10 s of pauses, within the caller's context.
var busy = apicall.BusyPolicy{Attempts: 5, MinPause: 50 * time.Millisecond, MaxPause: 5 * time.Second, MaxWait: 10 * time.Second}

// busyPause pauses d, or until ctx is done (its error then). A variable
// for tests, which see the pauses asked without waiting them.
var busyPause = func(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
