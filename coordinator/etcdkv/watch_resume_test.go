package etcdkv_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/etcdtest"
)

// A watch from revision 0 never delivers a change made before it was
// created, not even after its connection was reset: clientv3 resumes such a
// watch from the revision it was created at, which it has already seen.
func TestWatchFromZeroResumeSkipsOlderChanges(t *testing.T) {
	srv := etcdtest.Start(t)
	p := etcdtest.NewProxy(t, srv.Endpoint())
	watcher := dialStore(t, p.URL())
	writer := dialStore(t, srv.Endpoint())
	before := put(t, writer, "r/before", "x", 0)
	ch := watcher.Watch(ctxT(t, 20*time.Second), "r/", 0)
	p.DropConnections()
	after := put(t, writer, "r/after", "y", 0)
	r, ok := next(t, ch)
	if !ok || r.Err != nil || len(r.Events) == 0 {
		t.Fatalf("watch: %+v, %v", r, ok)
	}
	if got := r.Events[0].KV.ModRevision; got != after {
		t.Fatalf("watch from 0, created after revision %d, delivered the change at %d (%s) after a reconnect; want the one at %d first", before, got, r.Events[0].KV.Key, after)
	}
}
