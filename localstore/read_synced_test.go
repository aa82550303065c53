package localstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// heldSyncFS holds every sync of Pebble's write-ahead log while armed, as
// a slow disk would: a batch is applied, visible in the memtable, and not
// yet on disk. While failing is set, the syncs fail, as on a full disk.
type heldSyncFS struct {
	vfs.FS
	armed   atomic.Bool
	failing atomic.Bool
	holding chan struct{} // closed when a sync is first held
	once    sync.Once
	release chan struct{} // closed to let held syncs go on
}

func (fs *heldSyncFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &heldSyncFile{File: f, fs: fs}, nil
}

func (fs *heldSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *heldSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

func (fs *heldSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

func (fs *heldSyncFS) hold() error {
	if fs.failing.Load() {
		return syscall.ENOSPC
	}
	if fs.armed.Load() {
		fs.once.Do(func() { close(fs.holding) })
		<-fs.release
	}
	return nil
}

type heldSyncFile struct {
	vfs.File
	fs *heldSyncFS
}

func (f *heldSyncFile) Sync() error {
	if err := f.fs.hold(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *heldSyncFile) SyncData() error {
	if err := f.fs.hold(); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f *heldSyncFile) SyncTo(n int64) (bool, error) {
	if err := f.fs.hold(); err != nil {
		return false, err
	}
	return f.File.SyncTo(n)
}

// TestReadsWaitForSync: safety promise 10. A read (a read-only
// transaction, a linearizable range) never answers with a write that is
// not yet on disk: that write is not acknowledged, and a power loss now
// would take it back, so the answer would show a state the store then
// never had (a job completed, say, that runs again after the restart).
// The write's fsync is held here; reads of its key wait for it, and answer
// it once it is on disk.
func TestReadsWaitForSync(t *testing.T) {
	fs := &heldSyncFS{FS: vfs.NewMem(), holding: make(chan struct{}), release: make(chan struct{})}
	s := openOn(t, fs)
	defer func() { _ = s.Close() }()
	ctx := context.Background()
	if _, err := s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("k", []byte("synced"), 0)}}); err != nil {
		t.Fatal(err)
	}

	fs.armed.Store(true)
	released := false
	defer func() {
		if !released {
			close(fs.release)
		}
	}()
	written := make(chan error, 1)
	go func() {
		_, err := s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("k", []byte("unsynced"), 0)}})
		written <- err
	}()
	select {
	case <-fs.holding:
	case err := <-written:
		t.Fatalf("write acknowledged (%v) without an fsync", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the write's fsync never began")
	}

	reads := map[string]func(ctx context.Context) (*kv.KeyValue, error){
		"read-only txn": func(ctx context.Context) (*kv.KeyValue, error) {
			res, err := s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Get("k")}})
			if err != nil {
				return nil, err
			}
			return res.Results[0].KV, nil
		},
		"linearizable range": func(ctx context.Context) (*kv.KeyValue, error) {
			rr, err := s.Range(ctx, kv.RangeRequest{Start: "k"})
			if err != nil || len(rr.KVs) == 0 {
				return nil, err
			}
			return &rr.KVs[0], nil
		},
	}
	for name, read := range reads {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		got, err := read(rctx)
		cancel()
		switch {
		case err == nil && got != nil && string(got.Value) == "unsynced":
			t.Errorf("%s answered a write whose fsync has not completed (revision %d): a power loss now would take it back", name, got.ModRevision)
		case err == nil:
			t.Errorf("%s answered %v while a newer write waits for its fsync: want it to wait", name, got)
		case !errors.Is(err, context.DeadlineExceeded):
			t.Errorf("%s: %v, want it to wait for the fsync (context.DeadlineExceeded)", name, err)
		}
	}

	close(fs.release)
	released = true
	if err := <-written; err != nil {
		t.Fatalf("held write: %v", err)
	}
	for name, read := range reads {
		got, err := read(ctx)
		if err != nil || got == nil || string(got.Value) != "unsynced" {
			t.Errorf("%s once the write is synced: %v, %v; want it", name, got, err)
		}
	}
}
