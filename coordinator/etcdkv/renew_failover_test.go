package etcdkv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/etcdtest"
)

// A renewal cut short by its deadline on a blackholed endpoint (packets
// dropped, no reset) drops the kept stream: the next renewals open new
// streams, which the client's round-robin balancer spreads over the
// endpoints, so one reaches an endpoint that answers while the blackholed
// one still looks connected. The session relies on this (Session.renew:
// attempts beside a hung one, which is cancelled once another answers):
// were the stream kept, every later renewal would hang on the same dead
// connection until gRPC's keepalive closed it (10 s + KeepAliveTimeout at
// the least).
func TestKeepAliveOnceLeavesBlackholedEndpoint(t *testing.T) {
	srv := etcdtest.Start(t)
	ps := []*etcdtest.Proxy{etcdtest.NewProxy(t, srv.Endpoint()), etcdtest.NewProxy(t, srv.Endpoint())}
	s := dialStore(t, ps[0].URL(), ps[1].URL())
	id, err := s.Grant(ctxT(t, 10*time.Second), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeepAliveOnce(ctxT(t, 10*time.Second), id); err != nil {
		t.Fatal(err)
	}
	// Blackhole the endpoint that carries the kept stream: the one whose
	// blackhole makes a renewal time out. (A renewal that answers leaves
	// the stream where it was.)
	const attempt = 300 * time.Millisecond
	renew := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), attempt)
		defer cancel()
		_, err := s.KeepAliveOnce(ctx, id)
		return err
	}
	hung := false
	for i := range 4 {
		ps[i%2].Blackhole()
		err := renew()
		if errors.Is(err, context.DeadlineExceeded) {
			hung = true
			break
		}
		if err != nil {
			t.Fatalf("renewal: %v", err)
		}
		ps[i%2].Heal()
	}
	if !hung {
		t.Fatal("no renewal timed out with either endpoint blackholed")
	}
	// A renewal goes out on a new stream after each timeout: alternating
	// over the two endpoints, one soon reaches the one that answers. The
	// bound is far above that, and below the 10 s + 5 s in which gRPC's
	// keepalive would close the blackholed connection (which would also
	// let a kept stream recover).
	for n := 1; ; n++ {
		err := renew()
		if err == nil {
			t.Logf("renewed on attempt %d after the timeout", n)
			return
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("renewal: %v", err)
		}
		if n == 20 {
			t.Fatalf("%d renewals after a timeout all timed out: they stayed on the blackholed endpoint", n)
		}
	}
}
