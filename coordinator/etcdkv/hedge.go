package etcdkv

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrNoAnswer is wrapped by a write that had no answer within
// Options.WriteTimeout: it may still be applied.
var ErrNoAnswer = errors.New("etcdkv: no answer")

// maxHedged bounds the attempts of one hedged read in flight at once.
const maxHedged = 3

// hedged calls read, and calls it again beside the first each time delay
// passes with no answer, up to maxHedged calls in all, and returns the
// first answer; the calls still in flight are cancelled and waited for.
// A call that fails is not made again (clientv3 has tried it again where
// it could): once every call sent has failed, the last error is returned.
// For reads only: each call may reach another member (the client's
// balancer takes endpoints in turn), and one that hangs holds only its own
// call.
func hedged[T any](ctx context.Context, delay time.Duration, read func(context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	results := make(chan result, maxHedged)
	sent, inFlight := 0, 0
	send := func() {
		sent++
		inFlight++
		wg.Go(func() {
			v, err := read(ctx)
			results <- result{v, err}
		})
	}
	send()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case r := <-results:
			inFlight--
			if r.err == nil || inFlight == 0 {
				return r.v, r.err
			}
		case <-timer.C:
			if sent < maxHedged {
				send()
				timer.Reset(delay)
			}
		}
	}
}
