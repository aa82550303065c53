package localstore

import (
	"context"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// TestWatchEndsWithErrClosedWhenStoreCloses: a watch ended by Close says
// so (kv.ErrClosed) when its reader's buffer has room, also when Close
// lands while the watch is still delivering events; a channel closed
// without an error would read as the caller's own context ending. Close
// runs while the watch has a replay to send; repeated, since which of the
// two the watch sees first is up to the scheduler.
func TestWatchEndsWithErrClosedWhenStoreCloses(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 50 {
		s := openDir(t, dir, Options{})
		rev := mustPut(t, s, "k", "v", 0)
		ch := s.Watch(ctx, "", rev) // a replay of rev to send
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		var last kv.WatchResponse
		n := 0
		for resp := range ch { // Close waited for the watch: ch is closed
			last = resp
			n++
		}
		if n == 0 || !errors.Is(last.Err, kv.ErrClosed) {
			t.Fatalf("round %d: watch ended after %d responses, the last %+v; want kv.ErrClosed last", i, n, last)
		}
	}
}
