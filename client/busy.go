package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
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

// How the client retries a request that the daemon did not process (a
// 503 marked apicall.NotProcessedHeader): at most busyAttempts sends in
// all, pausing between them what the answer's Retry-After asks (1 s
// beyond the connection bound), cut to [busyMinPause, busyMaxPause], plus
// up to a quarter more so that clients refused together do not come back
// together; busyMaxWait bounds the pauses of one request; the caller's
// context bounds the whole.
const (
	busyAttempts = 5
	busyMinPause = 50 * time.Millisecond
	busyMaxPause = 5 * time.Second
	busyMaxWait  = 10 * time.Second
)

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

// busyRetry returns the pause before sending again a request whose
// answer resp was not processed, after attempts sends that paused waited
// in all; and false when the request should not be sent again: another
// answer, the attempts or the wait used up, or a pause that would outlast
// ctx's deadline.
func busyRetry(ctx context.Context, resp *http.Response, attempts int, waited time.Duration) (time.Duration, bool) {
	if resp.StatusCode != http.StatusServiceUnavailable || !apicall.NotProcessed(resp) || attempts >= busyAttempts {
		return 0, false
	}
	d, ok := apicall.RetryAfter(resp, time.Now())
	if !ok {
		d = time.Second
	}
	d = min(max(d, busyMinPause), busyMaxPause)
	d += rand.N(d/4 + 1)
	if waited+d > busyMaxWait {
		return 0, false
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return 0, false
	}
	return d, true
}
