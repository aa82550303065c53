package apiserver

// GET /v1/stats counts every kept job, finished ones included: a read of
// the whole finished index, which anyone who may read can ask for (reads
// need no token). The requests that arrive while a count is under way
// share the next one, so that many of them (a loop of curl, thousands of
// `jobs wait --all`) cost the store one count at a time, not one each,
// while every answer still counts from after its request arrived (ADR
// 0050).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/coordinator"
)

// sharedCounts runs the counts of GET /v1/stats one at a time.
type sharedCounts struct {
	count   func(context.Context) (map[coordinator.State]int, error)
	timeout time.Duration

	mu sync.Mutex
	// cur is the count under way, nil if none; next is the one the
	// requests that came after cur began wait for, nil if none waits.
	cur, next *countFlight
	// stopped: no count starts any more (stop); wg awaits the one under
	// way, whose goroutine may outlive its requests.
	stopped bool
	wg      sync.WaitGroup
}

// countFlight is one count and the requests waiting for it.
type countFlight struct {
	done    chan struct{} // closed once counts and err are set
	counts  map[coordinator.State]int
	err     error
	waiters int
	cancel  context.CancelFunc // of the count, once begun
}

// get returns counts read from after the call, or ctx's cause if it ends
// first. A count that passes the store deadline of its own is an error
// wrapping errStoreTimeout.
func (s *sharedCounts) get(ctx context.Context) (map[coordinator.State]int, error) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil, fmt.Errorf("count jobs: %w", errProbeStopped)
	}
	f := s.next
	if f == nil {
		f = &countFlight{done: make(chan struct{})}
		s.next = f
	}
	f.waiters++
	if s.cur == nil {
		s.start()
	}
	s.mu.Unlock()
	select {
	case <-f.done:
		return f.counts, f.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	f.waiters--
	if f.waiters == 0 {
		// Nobody waits for it any more: a count not begun is dropped,
		// one under way is cut.
		if s.next == f {
			s.next = nil
		} else if f.cancel != nil {
			f.cancel()
		}
	}
	s.mu.Unlock()
	return nil, context.Cause(ctx)
}

// start begins the next count. s.mu is held.
func (s *sharedCounts) start() {
	f := s.next
	s.cur, s.next = f, nil
	ctx, cancel := context.WithTimeoutCause(context.Background(), s.timeout, errStoreTimeout)
	f.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		counts, err := s.count(ctx)
		if err != nil && errors.Is(context.Cause(ctx), errStoreTimeout) {
			err = errStoreTimeout
		}
		cancel()
		s.mu.Lock()
		if err != nil && s.stopped {
			err = fmt.Errorf("count jobs: %w", errProbeStopped) // stop ended it
		}
		f.counts, f.err = counts, err
		close(f.done)
		s.cur = nil
		if s.next != nil && !s.stopped {
			s.start()
		}
		s.mu.Unlock()
	}()
}

// stop cancels the count under way, starts no other (the requests that
// wait for the next, and those to come, answer that the daemon stops),
// and waits until ctx is done for the count's goroutine to return.
func (s *sharedCounts) stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopped = true
	if s.cur != nil {
		s.cur.cancel()
	}
	if f := s.next; f != nil {
		s.next = nil
		f.err = fmt.Errorf("count jobs: %w", errProbeStopped)
		close(f.done)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the store's count of /v1/stats has not returned: %w", context.Cause(ctx))
	}
}
