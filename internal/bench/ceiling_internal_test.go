package bench

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// leaseProbe holds the second transaction of the ceiling loop until the
// loop's lease has either expired (the keys of the first are deleted) or
// been renewed often enough that, unrenewed, it would have expired.
type leaseProbe struct {
	kv.Store
	txns     atomic.Int64
	mu       sync.Mutex
	renewals int
	renewed  chan struct{} // closed at the 4th renewal: more than a TTL after the grant
	expired  chan struct{} // closed when a key on the lease is deleted
}

func (p *leaseProbe) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	ttl, err := p.Store.KeepAliveOnce(ctx, id)
	if err == nil {
		p.mu.Lock()
		if p.renewals++; p.renewals == 4 {
			close(p.renewed)
		}
		p.mu.Unlock()
	}
	return ttl, err
}

func (p *leaseProbe) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if p.txns.Add(1) == 2 {
		select {
		case <-p.renewed:
		case <-p.expired:
		case <-ctx.Done():
			return kv.TxnResult{}, ctx.Err()
		}
	}
	return p.Store.Txn(ctx, t)
}

// TestCeilingOutlivesLeaseTTL: the etcd ceiling loop keeps its lease
// alive, so a loop that runs longer than the lease's TTL (a million
// operations on a slow machine) does not fail as its lease expires.
func TestCeilingOutlivesLeaseTTL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd member")
	}
	defer func(ttl time.Duration) { ceilingLeaseTTL = ttl }(ceilingLeaseTTL)
	ceilingLeaseTTL = 2 * time.Second // etcd's minimum with the default election timeout

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := etcdtest.Start(t)
	cli, err := etcdkv.Dial(ctx, etcdkv.Config{Endpoints: []string{srv.Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	store := etcdkv.New(cli, etcdkv.Options{})
	defer store.Close()

	cfg, err := Config{Mode: ModeShared, Jobs: 2 * ceilingEtcdUnits}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace()
	probe := &leaseProbe{Store: store, renewed: make(chan struct{}), expired: make(chan struct{})}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watch := store.Watch(wctx, "/leasehold-bench/"+ns+"/ceiling/b/", 0)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for resp := range watch {
			for _, ev := range resp.Events {
				if ev.Type == kv.EventDelete {
					close(probe.expired)
					return
				}
			}
		}
	}()
	defer func() { wcancel(); <-watched }()

	r := &runner{cfg: cfg, env: &env{store: probe, label: "etcd"}, ns: ns, log: slog.New(slog.DiscardHandler)}
	res, err := r.ceiling(ctx)
	if err != nil {
		t.Fatalf("ceiling loop longer than its lease's TTL: %v", err)
	}
	if res.Jobs != cfg.Jobs {
		t.Errorf("ceiling jobs %d, want %d", res.Jobs, cfg.Jobs)
	}
}
