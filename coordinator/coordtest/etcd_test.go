package coordtest_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/coordtest"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// TestEtcd runs the suite on one embedded etcd member shared by all its
// tests (each test has its own namespace).
//
// The store's write deadline, which tells a hung member (3 s by default),
// is set well above it: the suite does not test it (etcdkv's hung-member
// tests do), and its member runs in this process, under the race detector
// when make test runs it, beside the test's own goroutines. A batch of
// 1,500 jobs, eight 100 KB transactions at once, had one of them wait out
// the 3 s on a loaded 2-core machine (ConcurrentClaimsMissNoJob).
func TestEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	store := etcdkv.New(cli, etcdkv.Options{WriteTimeout: 20 * time.Second})
	t.Cleanup(func() { _ = store.Close() })
	coordtest.Run(t, func(t *testing.T) kv.Store { return store })
}
