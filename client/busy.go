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

// ErrOutcomeUnknown is wrapped by the error of a change sent to a
// daemon (an insert, a cancel, a retry, a delete, a bulk cancel) that may
// or may not have been made: its connection failed after the request was
// sent, or its answer was cut short or did not decode, or it was answered
// with a 5xx that does not say it was not processed (the store's
// deadline, which also wraps context.DeadlineExceeded; a proxy's 502 or
// 504; a request the daemon cancelled). The client never sends such a
// change again itself: insert with a unique key (InsertOpts.UniqueKey) to
// send it again without a duplicate, or read the job first. A read never
// wraps it; a request that reached no daemon (nothing listens, a
// certificate refused) was not made and does not wrap it either. A
// client straight on the store (Dial, New) wraps it in the error of a
// change that failed without the store's or the coordinator's verdict:
// a write an etcd member did not answer (etcdkv.ErrNoAnswer), the
// context's end, any failure but ErrInvalid, ErrNotFound, ErrWrongState,
// ErrConflict, kv.ErrNoSpace, kv.ErrTxnTooLarge and kv.ErrClosed (ADR
// 0047).
var ErrOutcomeUnknown = errors.New("client: outcome unknown")

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
