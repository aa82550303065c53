package etcdkv

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
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

// leaveOutHung leaves out the members of the calls in hung, unless it is
// the member of the call that answered.
func (s *Store) leaveOutHung(h *hedgeCalls, winner int, hung []int) {
	for _, i := range hung {
		if a := h[i].Addr; a != nil && (h[winner].Addr == nil || a.String() != h[winner].Addr.String()) {
			s.leaveOutAddr(a.String())
		}
	}
}

// leaveOutAddr leaves out the endpoint that the client reached at addr,
// unless as many are out as may be: half of the others, rounded down, and
// at least one (one of two or three, two of five); never the last.
func (s *Store) leaveOutAddr(addr string) {
	if s.leaveOutFor <= 0 || s.cli == nil {
		return
	}
	// Matched before the lock is taken: it may ask the resolver.
	cur := s.cli.Endpoints()
	i := slices.IndexFunc(cur, func(ep string) bool { return endpointAt(ep, addr) })
	if i < 0 {
		return
	}
	ep := cur[i]
	q := &s.leave
	q.mu.Lock()
	defer q.mu.Unlock()
	cur = s.cli.Endpoints()
	i = slices.Index(cur, ep)
	all := q.all
	if all == nil {
		all = cur
	}
	if q.closed || i < 0 || len(cur) < 2 || len(q.out) >= max(1, (len(all)-1)/2) {
		return
	}
	if q.out == nil {
		q.all, q.out = slices.Clone(cur), map[string]*time.Timer{}
	}
	q.out[ep] = time.AfterFunc(s.leaveOutFor, func() { s.bringBack(ep) })
	s.cli.SetEndpoints(slices.Delete(cur, i, i+1)...)
	s.log.Warn("etcd member left out: a read it did not answer was answered at once by another member; it may hang",
		slog.String("endpoint", ep), slog.Duration("for", s.leaveOutFor))
}

// endpointAt reports whether the client reached endpoint ep at addr (a
// host and port): its host is addr's IP address, or a name that resolves
// to it, and its port addr's (any, when ep names none).
func endpointAt(ep, addr string) bool {
	u, err := url.Parse(ep)
	if err != nil || !strings.Contains(ep, "://") {
		u, err = url.Parse("//" + ep)
	}
	host, port, serr := net.SplitHostPort(addr)
	if err != nil || serr != nil || u.Port() != "" && u.Port() != port {
		return false
	}
	if u.Hostname() == host {
		return true
	}
	if net.ParseIP(u.Hostname()) != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupHost(ctx, u.Hostname())
	return err == nil && slices.Contains(ips, host)
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
