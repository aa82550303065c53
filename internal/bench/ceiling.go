package bench

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
	"golang.org/x/sync/errgroup"
)

// Shapes of the ceiling loops.
const (
	// ceilingLocalWriters concurrent single-put synced transactions on
	// localstore: enough to fill its group commit.
	ceilingLocalWriters = 128
	// ceilingEtcdWriters concurrent transactions on etcd, each of
	// ceilingEtcdUnits nested claim-shaped transactions.
	ceilingEtcdWriters = 8
	ceilingEtcdUnits   = 25
	// ceilingValueBytes is about the size of a job record.
	ceilingValueBytes = 320
)

// ceilingLeaseTTL is the TTL of the lease the etcd ceiling loop attaches
// its keys to.
var ceilingLeaseTTL = 30 * time.Second

// ceiling runs the raw-store loop: what the store alone sustains with
// transactions shaped like the queue's, through the same kv seam, in the
// same process. Its operations are single-put transactions (embedded) or
// nested claim-shaped transactions (shared); its latencies are those of
// one store transaction. The keys it writes live under a prefix of their
// own and are deleted afterwards, untimed.
func (r *runner) ceiling(ctx context.Context) (Result, error) {
	n := r.cfg.Jobs
	prefix := "/leasehold-bench/" + r.ns + "/ceiling/"
	var done atomic.Int64
	stop := r.progress(PhaseCeiling, n, done.Load)
	defer stop()

	var (
		writers, perTxn int
		detail          string
		lease           kv.LeaseID
		keysPerOp       int
	)
	if r.cfg.Mode == ModeEmbedded {
		writers, perTxn, keysPerOp = ceilingLocalWriters, 1, 1
		detail = fmt.Sprintf("one op = one synced transaction of one %d-byte put; %d concurrent writers", ceilingValueBytes, writers)
	} else {
		writers, perTxn, keysPerOp = ceilingEtcdWriters, ceilingEtcdUnits, 4
		detail = fmt.Sprintf("one op = one nested transaction (1 compare, 4 puts, one on a lease), %d per etcd transaction; %d concurrent writers", perTxn, writers)
		var err error
		if lease, err = r.env.store.Grant(ctx, ceilingLeaseTTL); err != nil {
			return Result{}, fmt.Errorf("bench: ceiling: grant a lease: %w", err)
		}
		defer func() { _ = r.env.store.Revoke(context.WithoutCancel(ctx), lease) }()
		// A loop can outlast the TTL (many operations, a slow cluster):
		// its puts on the lease would then fail.
		defer r.keepLease(ctx, lease, ceilingLeaseTTL)()
	}
	defer r.deleteCeilingKeys(context.WithoutCancel(ctx), prefix, n, keysPerOp)

	value := make([]byte, ceilingValueBytes)
	for i := range value {
		value[i] = 'x'
	}
	small := []byte("bench")
	txns := (n + perTxn - 1) / perTxn
	lat := make([]time.Duration, txns)
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	cpu := markCPU()
	start := time.Now()
	for range writers {
		g.Go(func() error {
			for {
				t := int(next.Add(1)) - 1
				if t >= txns {
					return nil
				}
				lo, hi := t*perTxn, min((t+1)*perTxn, n)
				var txn kv.Txn
				if perTxn == 1 {
					txn.Then = []kv.Op{kv.Put(prefix+"a/"+strconv.Itoa(lo), value, 0)}
				} else {
					txn.Then = make([]kv.Op, 0, hi-lo)
					for i := lo; i < hi; i++ {
						id := strconv.Itoa(i)
						txn.Then = append(txn.Then, kv.Nested(kv.Txn{
							If: []kv.Cmp{kv.ModRevisionIs(prefix+"a/"+id, kv.Equal, 0)},
							Then: []kv.Op{
								kv.Put(prefix+"a/"+id, value, 0),
								kv.Put(prefix+"b/"+id, small, lease),
								kv.Put(prefix+"c/"+id, small, 0),
								kv.Put(prefix+"d/"+id, small, 0),
							},
						}))
					}
				}
				t0 := time.Now()
				if _, err := r.env.store.Txn(gctx, txn); err != nil {
					return fmt.Errorf("bench: ceiling: %w", err)
				}
				lat[t] = time.Since(t0)
				done.Add(int64(hi - lo))
			}
		})
	}
	if err := g.Wait(); err != nil {
		return Result{}, err
	}
	elapsed := time.Since(start)
	stop()
	res := r.result(PhaseCeiling, n, writers, elapsed, lat)
	cpu.fill(&res, n, elapsed)
	res.Detail = detail
	return res, nil
}

// keepLease renews lease every third of ttl until the returned stop is
// called; stop waits for the renewals to end.
func (r *runner) keepLease(ctx context.Context, lease kv.LeaseID, ttl time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, err := r.env.store.KeepAliveOnce(ctx, lease); err != nil && ctx.Err() == nil {
				r.log.Warn("bench: ceiling: renewing the loop's lease", slog.Any("err", err))
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// deleteCeilingKeys deletes what the ceiling loop wrote (keys attached to
// the lease go with its revocation).
func (r *runner) deleteCeilingKeys(ctx context.Context, prefix string, n, keysPerOp int) {
	const batch = 100
	var keys []string
	for i := range n {
		id := strconv.Itoa(i)
		keys = append(keys, prefix+"a/"+id)
		if keysPerOp > 1 {
			keys = append(keys, prefix+"c/"+id, prefix+"d/"+id)
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for len(keys) > 0 {
		k := keys[:min(batch, len(keys))]
		keys = keys[len(k):]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ops := make([]kv.Op, len(k))
			for i, key := range k {
				ops[i] = kv.Delete(key)
			}
			if _, err := r.env.store.Txn(ctx, kv.Txn{Then: ops}); err != nil {
				r.log.Warn("bench: deleting the ceiling loop's keys", "prefix", prefix, "err", err)
			}
		})
	}
	wg.Wait()
}
