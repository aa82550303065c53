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
// call. read is given the number of its call, from 0.
//
// With the answer, hedged returns the calls sent before the one that
// answered that had no answer when it came, if that one answered within
// delay (else none): their members look hung, not just slow.
func hedged[T any](ctx context.Context, delay time.Duration, read func(ctx context.Context, call int) (T, error)) (v T, hung []int, err error) {
	type result struct {
		v    T
		err  error
		call int
		took time.Duration
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	results := make(chan result, maxHedged)
	var answered [maxHedged]bool
	sent, inFlight := 0, 0
	send := func() {
		call := sent
		sent++
		inFlight++
		wg.Go(func() {
			start := time.Now()
			v, err := read(ctx, call)
			results <- result{v, err, call, time.Since(start)}
		})
	}
	send()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case r := <-results:
			inFlight--
			answered[r.call] = true
			if r.err == nil && r.took < delay {
				for c := range r.call {
					if !answered[c] {
						hung = append(hung, c)
					}
				}
			}
			if r.err == nil || inFlight == 0 {
				return r.v, hung, r.err
			}
		case <-timer.C:
			if sent < maxHedged {
				send()
				timer.Reset(delay)
			}
		}
	}
}
