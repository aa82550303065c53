package localstore

import (
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Defaults of [Options].
const (
	// CacheSizeDefault is the default of Options.CacheSize: 32 MiB.
	CacheSizeDefault = 32 << 20
	// MaxTxnBytesDefault is the default of Options.MaxTxnBytes: 64 MiB.
	MaxTxnBytesDefault = 64 << 20
	// MemTableSizeDefault is the default of Options.MemTableSize: 16 MiB.
	MemTableSizeDefault = 16 << 20
	// WatchBufferDefault is the default of Options.WatchBuffer.
	WatchBufferDefault = 64
	// WatchHistoryDefault is the default of Options.WatchHistory.
	WatchHistoryDefault = 65536
	// WatchHistoryBytesDefault is the default of
	// Options.WatchHistoryBytes: 64 MiB.
	WatchHistoryBytesDefault = 64 << 20
	// MinFreeBytesDefault is the default of Options.MinFreeBytes: 256 MiB.
	MinFreeBytesDefault = 256 << 20
)

// Options configure a [Store]. The zero value is valid: every field has a
// default, and [Open] fills them in with [Options.WithDefaults].
//
// Durability is not an option: every transaction is synced to disk before
// [Store.Txn] returns.
type Options struct {
	// CacheSize is the size in bytes of Pebble's block cache, beyond the
	// memtables: Pebble charges live memtables to its cache, so the store
	// gives it CacheSize plus two memtables (with a cache no larger than
	// the memtables, nothing would be cached at all).
	// Default: CacheSizeDefault (32 MiB).
	CacheSize int64
	// Logger receives the store's log lines (recovery at open) and Pebble's
	// own, Pebble's informational ones at debug level.
	// Default: slog.Default().
	Logger *slog.Logger
	// MaxTxnBytes bounds the size of one transaction (keys and values of
	// every op and compare, nested ones counted in), reported by
	// [Store.Limits] as MaxBytes; a larger one fails with
	// kv.ErrTxnTooLarge. Default: MaxTxnBytesDefault (64 MiB).
	MaxTxnBytes int
	// MemTableSize is the size in bytes of one Pebble memtable; larger
	// memtables mean fewer flushes under a high write rate.
	// Default: MemTableSizeDefault (16 MiB).
	MemTableSize uint64
	// WatchBuffer is how many responses each watch buffers for a slow
	// reader. A watch whose reader falls further behind than the in-memory
	// history (WatchHistory) ends with kv.ErrCompacted; writers never wait
	// for watchers. Default: WatchBufferDefault (64).
	WatchBuffer int
	// WatchHistory is how many recent events the store keeps in memory so
	// that a watch can start from a past revision. Default:
	// WatchHistoryDefault (65536).
	WatchHistory int
	// WatchHistoryBytes bounds the memory of that history: its events'
	// keys and values (large payloads fill it long before WatchHistory
	// events). The events of the newest revision are always kept.
	// Default: WatchHistoryBytesDefault (64 MiB).
	WatchHistoryBytes int
	// MinFreeBytes is the free space the store keeps on its file system
	// for the work it holds: once less is free, [Store.CheckSpace] fails
	// with kv.ErrNoSpace, and the coordinator refuses new jobs while the
	// jobs held still claim, finish and expire. It is a reserve, not a
	// quota: claims, outcomes and Pebble's compactions write into it,
	// and without it a full disk stalls every write (Pebble cannot flush
	// its memtables) until space is freed. Negative: no reserve.
	// Default: MinFreeBytesDefault (256 MiB).
	MinFreeBytes int64

	// fs, when set (by this package's tests only), is the filesystem Pebble
	// writes to: a crashable in-memory one that can be cloned as a power
	// loss would leave it.
	fs vfs.FS
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	if o.CacheSize == 0 {
		o.CacheSize = CacheSizeDefault
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxTxnBytes == 0 {
		o.MaxTxnBytes = MaxTxnBytesDefault
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = MemTableSizeDefault
	}
	if o.WatchBuffer == 0 {
		o.WatchBuffer = WatchBufferDefault
	}
	if o.WatchHistory == 0 {
		o.WatchHistory = WatchHistoryDefault
	}
	if o.WatchHistoryBytes == 0 {
		o.WatchHistoryBytes = WatchHistoryBytesDefault
	}
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = MinFreeBytesDefault
	}
	return o
}

// validate rejects values no store can run with. It expects defaults filled.
func (o Options) validate() error {
	switch {
	case o.CacheSize < 0:
		return fmt.Errorf("localstore: CacheSize %d is negative", o.CacheSize)
	case o.MaxTxnBytes < 0:
		return fmt.Errorf("localstore: MaxTxnBytes %d is negative", o.MaxTxnBytes)
	case o.MemTableSize < 1<<20:
		return fmt.Errorf("localstore: MemTableSize %d is below 1 MiB", o.MemTableSize)
	case o.MemTableSize >= 4<<30:
		return fmt.Errorf("localstore: MemTableSize %d is 4 GiB or more, which Pebble does not support", o.MemTableSize)
	case o.WatchBuffer < 0:
		return fmt.Errorf("localstore: WatchBuffer %d is negative", o.WatchBuffer)
	case o.WatchHistory < 0:
		return fmt.Errorf("localstore: WatchHistory %d is negative", o.WatchHistory)
	case o.WatchHistoryBytes < 0:
		return fmt.Errorf("localstore: WatchHistoryBytes %d is negative", o.WatchHistoryBytes)
	}
	return nil
}
