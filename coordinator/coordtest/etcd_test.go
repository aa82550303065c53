package coordtest_test

import (
	"testing"

	"github.com/leasehold/leasehold/coordinator/coordtest"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// TestEtcd runs the suite on one embedded etcd member shared by all its
// tests (each test has its own namespace).
func TestEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	store := etcdkv.New(cli, etcdkv.Options{})
	t.Cleanup(func() { _ = store.Close() })
	coordtest.Run(t, func(t *testing.T) kv.Store { return store })
}
