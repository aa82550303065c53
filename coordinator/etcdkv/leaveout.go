package etcdkv

import (
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// leaveOut takes members that look hung out of the client's endpoints for
// Options.LeaveOutFor (ADR 0031). A read sent again to another member after
// ReadHedge, and answered there at once, names the member of the first
// call: the balancer would go on sending it every third request, writes
// included, until gRPC's keepalive closes its connection.
type leaveOut struct {
	mu     sync.Mutex
	all    []string               // the client's endpoints before any was left out
	out    map[string]*time.Timer // endpoints left out, until their timer fires
	closed bool
}

// hedgeCalls records the member of each call of one hedged read.
type hedgeCalls [maxHedged]peer.Peer

// opts returns the call options of call i, which record its member.
func (h *hedgeCalls) opts(base []grpc.CallOption, i int) []grpc.CallOption {
	return append(slices.Clip(base), grpc.Peer(&h[i]))
}

// leaveOutHung leaves out the members of the calls in hung.
func (s *Store) leaveOutHung(h *hedgeCalls, hung []int) {
	for _, i := range hung {
		if h[i].Addr != nil {
			s.leaveOutAddr(h[i].Addr.String())
		}
	}
}

// leaveOutAddr leaves out the endpoint whose host and port are addr, if
// the client has it and another one besides.
func (s *Store) leaveOutAddr(addr string) {
	if s.leaveOutFor <= 0 || s.cli == nil {
		return
	}
	q := &s.leave
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	cur := s.cli.Endpoints()
	i := slices.IndexFunc(cur, func(ep string) bool {
		u, err := url.Parse(ep)
		return err == nil && u.Host == addr
	})
	if i < 0 || len(cur) < 2 {
		return
	}
	ep := cur[i]
	if q.out == nil {
		q.all, q.out = slices.Clone(cur), map[string]*time.Timer{}
	}
	q.out[ep] = time.AfterFunc(s.leaveOutFor, func() { s.bringBack(ep) })
	s.cli.SetEndpoints(slices.Delete(cur, i, i+1)...)
	s.log.Warn("etcd member left out: a read it did not answer was answered at once by another member; it may hang",
		slog.String("endpoint", ep), slog.Duration("for", s.leaveOutFor))
}

// bringBack gives the client back an endpoint left out.
func (s *Store) bringBack(ep string) {
	q := &s.leave
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.out[ep] == nil {
		return
	}
	delete(q.out, ep)
	eps := slices.DeleteFunc(slices.Clone(q.all), func(e string) bool { return q.out[e] != nil })
	if len(q.out) == 0 {
		q.all, q.out = nil, nil
	}
	s.cli.SetEndpoints(eps...)
	s.log.Info("etcd member back in the client's endpoints", slog.String("endpoint", ep))
}

// closeLeaveOut stops the timers and gives the client back every endpoint
// left out: it is the caller's after Close.
func (s *Store) closeLeaveOut() {
	q := &s.leave
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for _, t := range q.out {
		t.Stop()
	}
	if q.out != nil {
		s.cli.SetEndpoints(q.all...)
		q.all, q.out = nil, nil
	}
}
