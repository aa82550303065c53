package etcdkv_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// heldStream holds a lease keep-alive stream's answers once armed: the
// renewal sent on it stays in flight until the stream is cancelled.
type heldStream struct {
	grpc.ClientStream
	armed *atomic.Bool
	sent  chan<- struct{}
}

func (h *heldStream) SendMsg(m any) error {
	err := h.ClientStream.SendMsg(m)
	if h.armed.Load() {
		select {
		case h.sent <- struct{}{}:
		default:
		}
	}
	return err
}

func (h *heldStream) RecvMsg(m any) error {
	if h.armed.Load() {
		// The answer never comes: once the stream is cancelled, return
		// what gRPC returns then, not an answer that arrived meanwhile
		// (the real RecvMsg may still hand over a buffered one).
		<-h.Context().Done()
		return status.FromContextError(h.Context().Err()).Err()
	}
	return h.ClientStream.RecvMsg(m)
}

// A renewal in flight on the kept stream when the store is closed fails
// with kv.ErrClosed, as every call on a closed store does, not with the
// gRPC cancellation that closing caused.
func TestKeepAliveOnceInFlightAtClose(t *testing.T) {
	srv := etcdtest.Start(t)
	var armed atomic.Bool
	sent := make(chan struct{}, 1)
	hold := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || !strings.HasSuffix(method, "/LeaseKeepAlive") {
			return cs, err
		}
		return &heldStream{ClientStream: cs, armed: &armed, sent: sent}, nil
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{srv.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(hold)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	s := etcdkv.New(cli, etcdkv.Options{})
	t.Cleanup(func() { _ = s.Close() })

	id, err := s.Grant(ctxT(t, 10*time.Second), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeepAliveOnce(ctxT(t, 10*time.Second), id); err != nil {
		t.Fatal(err) // opens the kept stream
	}
	armed.Store(true)
	errc := make(chan error, 1)
	go func() {
		_, err := s.KeepAliveOnce(ctxT(t, 30*time.Second), id)
		errc <- err
	}()
	<-sent // the renewal is on the stream, waiting for its answer
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("KeepAliveOnce in flight at Close: %v, want kv.ErrClosed", err)
	}
}
