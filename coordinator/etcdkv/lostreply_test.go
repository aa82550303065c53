package etcdkv_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// TestWriteWithLostReplyIsNoAnswer: a write reaches its member and is
// applied, and its connection is reset before the answer comes back (the
// member crashed, a proxy or a NAT dropped the connection). The write
// has no verdict: its error must say so (ErrNoAnswer, "may still be
// applied"), as one that ran out of WriteTimeout does, not read as a
// plain failure that a caller could take for "not applied".
func TestWriteWithLostReplyIsNoAnswer(t *testing.T) {
	srv := etcdtest.Start(t)
	p := etcdtest.NewProxy(t, srv.Endpoint())
	s := dialStoreWith(t, etcdkv.Options{WriteTimeout: time.Minute}, p.URL())
	direct := dialStore(t, srv.Endpoint())
	wctx := ctxT(t, 30*time.Second)
	w := direct.Watch(wctx, "lost", 0)

	p.BlackholeDirection(false, true) // the member's answers are held
	errc := make(chan error, 1)
	go func() {
		_, err := s.Txn(ctxT(t, 30*time.Second), kv.Txn{Then: []kv.Op{kv.Put("lost", []byte("v"), 0)}})
		errc <- err
	}()
	if r, ok := next(t, w); !ok || r.Err != nil || len(r.Events) != 1 {
		t.Fatalf("watch: %+v", r)
	}
	// Applied; the answer has not come back. The connection goes.
	p.DropConnections()
	err := <-errc
	if err == nil {
		t.Fatal("the write answered through a connection reset before its answer")
	}
	if !errors.Is(err, etcdkv.ErrNoAnswer) {
		t.Fatalf("a write applied whose answer was lost with its connection: %v, want an error wrapping etcdkv.ErrNoAnswer", err)
	}
	t.Logf("write with its answer lost: %v", err)
}
