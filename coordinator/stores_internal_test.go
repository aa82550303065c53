package coordinator

import (
	"log/slog"
	"testing"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/localstore"
)

// tempLocalstore opens a localstore in a temporary directory, closed when
// tb ends.
func tempLocalstore(tb testing.TB) *localstore.Store {
	tb.Helper()
	s, err := localstore.Open(tb.TempDir(), localstore.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// tempEtcdStore starts an etcd member and returns a store on it, closed
// when tb ends.
func tempEtcdStore(tb testing.TB, opts ...etcdtest.Option) *etcdkv.Store {
	tb.Helper()
	srv := etcdtest.Start(tb, opts...)
	s := etcdkv.New(srv.Client(tb), etcdkv.Options{})
	tb.Cleanup(func() { _ = s.Close() })
	return s
}
