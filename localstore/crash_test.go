package localstore

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sync/errgroup"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// openOn opens a store whose Pebble files live on fs, under /data (its
// lock is on a directory of its own, since a clone of fs is opened while
// the original store is).
func openOn(t *testing.T, fs vfs.FS) *Store {
	t.Helper()
	return openOnWith(t, fs, Options{Logger: slog.New(slog.DiscardHandler)})
}

// openOnWith is openOn with opts (fs aside).
func openOnWith(t *testing.T, fs vfs.FS, opts Options) *Store {
	t.Helper()
	lock, err := lockDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lock.dir = "/data"
	opts.fs = fs
	s, err := open(lock, opts.WithDefaults())
	if err != nil {
		_ = lock.unlock()
		t.Fatal(err)
	}
	return s
}

// TestAcknowledgedWritesSurvivePowerLoss: safety promise 10 (nothing
// acknowledged is lost) and 2 (revisions, the fencing tokens, never go
// back) against a power loss, which a SIGKILL cannot show (the OS keeps
// unsynced pages). While writers commit, the filesystem is cloned as a
// power loss would leave it (only what was synced); every transaction
// acknowledged before the clone must be in it, at its revision, and the
// reopened store's revision must be at least the highest acknowledged.
func TestAcknowledgedWritesSurvivePowerLoss(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := openOn(t, fs)
	defer func() { _ = s.Close() }()

	type ack struct {
		key string
		rev int64
	}
	var (
		mu    sync.Mutex
		acked []ack
	)
	const writers, each, crashes = 8, 150, 6
	type crash struct {
		fs    *vfs.MemFS
		acked []ack // acknowledged before the clone began
	}
	crashCh := make(chan crash, crashes)
	var g errgroup.Group
	for w := range writers {
		g.Go(func() error {
			for i := range each {
				key := fmt.Sprintf("k/%d/%04d", w, i)
				res, err := s.Txn(context.Background(), kv.Txn{Then: []kv.Op{kv.Put(key, []byte(key), 0)}})
				if err != nil {
					return err
				}
				mu.Lock()
				acked = append(acked, ack{key, res.Revision})
				n := len(acked)
				var snap []ack
				if n%(writers*each/crashes) == 0 {
					snap = append(snap, acked...)
				}
				mu.Unlock()
				if snap != nil {
					crashCh <- crash{fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}), snap}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	close(crashCh)
	n := 0
	for c := range crashCh {
		n++
		func() {
			r := openOn(t, c.fs)
			defer func() { _ = r.Close() }()
			var maxRev int64
			for _, a := range c.acked {
				got, err := r.Range(context.Background(), kv.RangeRequest{Start: a.key})
				if err != nil {
					t.Fatal(err)
				}
				if len(got.KVs) != 1 || got.KVs[0].ModRevision != a.rev {
					t.Fatalf("power loss %d: %s, acknowledged at revision %d, is %v after reopening", n, a.key, a.rev, got.KVs)
				}
				maxRev = max(maxRev, a.rev)
			}
			if r.rev < maxRev {
				t.Fatalf("power loss %d: revision %d after reopening, below the acknowledged %d", n, r.rev, maxRev)
			}
		}()
	}
	if n != crashes {
		t.Fatalf("%d power losses simulated, want %d", n, crashes)
	}
}
