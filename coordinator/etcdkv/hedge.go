package etcdkv

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrNoAnswer is wrapped by a write that had no answer within
// Options.WriteTimeout (such an error wraps context.DeadlineExceeded too),
// or whose answer was lost (its connection failed after it was sent, or
// etcd timed it out itself; ADR 0049): it may still be applied. It is also wrapped by the end of a watch
// whose stream's member did not answer its check (ADR 0030).
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
// With the answer, hedged returns the call that gave it, and, if it
// answered within delay, the calls sent before it that had no answer when
// it came, nor within a fifth of delay after: their members look hung,
// not just slow. (Only such an answer waits those extra moments.)
func hedged[T any](ctx context.Context, delay time.Duration, read func(ctx context.Context, call int) (T, error)) (v T, winner int, hung []int, err error) {
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
	var answered [maxHedged]bool // returned, with an answer or an error
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
			if r.err != nil && inFlight > 0 {
				continue
			}
			if r.err == nil && r.took < delay && slices.Contains(answered[:r.call], false) {
				// Before the calls still in flight are cancelled, they
				// have a fifth of delay to answer: calls held up
				// together (by an election, a partition that heals)
				// are let go together, and none of them is hung.
				grace := time.NewTimer(delay / 5)
				for inFlight > 0 {
					select {
					case o := <-results:
						inFlight--
						answered[o.call] = true
						continue
					case <-grace.C:
					case <-ctx.Done():
					}
					break
				}
				grace.Stop()
				cancel()
				wg.Wait()
				for range inFlight {
					if o := <-results; !cancelled(o.err) {
						answered[o.call] = true
					}
				}
				for c := range r.call {
					if !answered[c] {
						hung = append(hung, c)
					}
				}
			}
			return r.v, r.call, hung, r.err
		case <-timer.C:
			if sent < maxHedged {
				send()
				timer.Reset(delay)
			}
		}
	}
}

// cancelled reports whether err is a call's end by its context.
func cancelled(err error) bool {
	return errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled
}
