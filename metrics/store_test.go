package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/localstore"
	"github.com/prometheus/client_golang/prometheus"
)

// hangingStore answers no request: each returns its context's error once
// the context ends, as a store without quorum does.
type hangingStore struct{ kv.Store }

func (hangingStore) Txn(ctx context.Context, _ kv.Txn) (kv.TxnResult, error) {
	<-ctx.Done()
	return kv.TxnResult{}, ctx.Err()
}

func (hangingStore) Range(ctx context.Context, _ kv.RangeRequest) (kv.RangeResult, error) {
	<-ctx.Done()
	return kv.RangeResult{}, ctx.Err()
}

func (hangingStore) Grant(ctx context.Context, _ time.Duration) (kv.LeaseID, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (hangingStore) KeepAliveOnce(ctx context.Context, _ kv.LeaseID) (time.Duration, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (hangingStore) Revoke(ctx context.Context, _ kv.LeaseID) error {
	<-ctx.Done()
	return ctx.Err()
}

// gatherValues sums the values of metric name by the value of its label
// (all series under "" when label is empty).
func gatherValues(t *testing.T, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			key := ""
			for _, l := range s.GetLabel() {
				if l.GetName() == label {
					key = l.GetValue()
				}
			}
			switch {
			case s.GetCounter() != nil:
				out[key] += s.GetCounter().GetValue()
			case s.GetGauge() != nil:
				out[key] += s.GetGauge().GetValue()
			}
		}
	}
	return out
}

// A request the store did not answer before its deadline is a store
// error (an etcd without quorum answers nothing: its renewals and reads
// time out); one its caller cancelled is not.
func TestStoreErrorsCountDeadlines(t *testing.T) {
	m, reg := newTest()
	s := m.WrapStore(hangingStore{}, "etcd")
	expired, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	for _, ctx := range []context.Context{expired, cancelled} {
		_, _ = s.Txn(ctx, kv.Txn{})
		_, _ = s.Range(ctx, kv.RangeRequest{})
		_, _ = s.Grant(ctx, time.Second)
		_, _ = s.KeepAliveOnce(ctx, 1)
		_ = s.Revoke(ctx, 1)
	}
	got := gatherValues(t, reg, "leasehold_store_errors_total", "op")
	for _, op := range []string{"txn", "range", "grant", "keepalive", "revoke"} {
		if got[op] != 1 {
			t.Errorf("store errors of %s = %v, want 1 (the timed-out request, not the cancelled one)", op, got[op])
		}
	}
}

// leasehold_queue_jobs keeps the queue labels of the first MaxQueueLabels
// queues, in name order, and sums the others as "other", as
// leasehold_enqueued_total does: each queue name would otherwise be two
// series.
func TestQueueJobsLabelsBounded(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	coord := testCoordinator(t, nil)
	ctx := context.Background()
	const queues = MaxQueueLabels + 50
	for i := range queues {
		if _, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k", Queue: fmt.Sprintf("q%03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	m, reg := newTest()
	m.RegisterJobs(coord, log)
	for range 2 { // labels stay the same from one scrape to the next
		got := gatherValues(t, reg, "leasehold_queue_jobs", "queue")
		if len(got) != MaxQueueLabels+1 || got["other"] != 50 || got["q000"] != 1 || got[fmt.Sprintf("q%03d", MaxQueueLabels-1)] != 1 {
			t.Fatalf("%d queue labels (other %v, q000 %v); want %d, other 50, q000 1", len(got), got["other"], got["q000"], MaxQueueLabels+1)
		}
	}
}

// leasehold_queue_paused and leasehold_queue_limit give each queue's stored
// configuration at scrape time: a queue paused with no job in it included,
// and a resume or a limit change seen at the next scrape. Queues beyond
// MaxQueueLabels count their paused ones under "other", with no limit.
func TestQueuePausedAndLimitGauges(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	coord := testCoordinator(t, nil)
	ctx := context.Background()
	if _, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "k", Queue: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := coord.SetQueueLimit(ctx, "a", 3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := coord.PauseQueue(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	m, reg := newTest()
	m.RegisterJobs(coord, log)
	check := func(when string, paused, limit map[string]float64) {
		t.Helper()
		if got := gatherValues(t, reg, "leasehold_queue_paused", "queue"); !maps.Equal(got, paused) {
			t.Errorf("%s: leasehold_queue_paused %v, want %v", when, got, paused)
		}
		if got := gatherValues(t, reg, "leasehold_queue_limit", "queue"); !maps.Equal(got, limit) {
			t.Errorf("%s: leasehold_queue_limit %v, want %v", when, got, limit)
		}
	}
	check("b paused, a limited", map[string]float64{"a": 0, "b": 1}, map[string]float64{"a": 3, "b": 0})
	if _, _, err := coord.ResumeQueue(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := coord.SetQueueLimit(ctx, "a", 0); err != nil {
		t.Fatal(err)
	}
	check("b resumed, a unlimited", map[string]float64{"a": 0, "b": 0}, map[string]float64{"a": 0, "b": 0})

	for i := range MaxQueueLabels + 2 {
		if _, _, err := coord.PauseQueue(ctx, fmt.Sprintf("z%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	paused := gatherValues(t, reg, "leasehold_queue_paused", "queue")
	limits := gatherValues(t, reg, "leasehold_queue_limit", "queue")
	// a and b and the first 98 z queues have labels; 4 z queues are other.
	if len(paused) != MaxQueueLabels+1 || paused["other"] != 4 || paused["z000"] != 1 || paused["b"] != 0 {
		t.Errorf("%d paused labels (other %v, z000 %v, b %v); want %d, other 4, z000 1, b 0", len(paused), paused["other"], paused["z000"], paused["b"], MaxQueueLabels+1)
	}
	if _, ok := limits["other"]; ok || len(limits) != MaxQueueLabels {
		t.Errorf("%d limit labels (other included: %v); want %d, without other", len(limits), ok, MaxQueueLabels)
	}
}

// A queue named "other", below the bound, keeps its leasehold_queue_limit:
// only the "other" that sums the queues past the bound has none. It had
// none, so that a limited queue of that name had no limit series at all.
func TestQueueNamedOtherHasItsLimit(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	ls, err := localstore.Open(t.TempDir(), localstore.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ls.Close() }()
	coord, err := coordinator.New(ls, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := coord.SetQueueLimit(ctx, "other", 3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := coord.PauseQueue(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	m, reg := newTest()
	m.RegisterJobs(coord, log)
	if got, want := gatherValues(t, reg, "leasehold_queue_limit", "queue"), map[string]float64{"other": 3}; !maps.Equal(got, want) {
		t.Errorf("leasehold_queue_limit %v, want %v", got, want)
	}
	if got, want := gatherValues(t, reg, "leasehold_queue_paused", "queue"), map[string]float64{"other": 1}; !maps.Equal(got, want) {
		t.Errorf("leasehold_queue_paused %v, want %v", got, want)
	}
}

// scanningStore scans: it visits keys "a" and "b", or fails with err.
type scanningStore struct {
	kv.Store
	err   error
	scans int
}

func (s *scanningStore) Scan(_ context.Context, _ kv.RangeRequest, visit func(kv.KeyValue) error) (int64, error) {
	s.scans++
	if s.err != nil {
		return 0, s.err
	}
	for _, k := range []string{"a", "b"} {
		if err := visit(kv.KeyValue{Key: k}); err != nil {
			return 0, err
		}
	}
	return 7, nil
}

// The daemon gives the coordinator its store wrapped: scans in one pass
// (etcd's RangeStream; without them counting a million finished jobs takes
// a minute on etcd) go through the wrapper to a store that can, and their
// failures count as failed range reads. A store that cannot scan says so.
func TestWrappedStoreScans(t *testing.T) {
	m, reg := newTest()
	inner := &scanningStore{}
	s, ok := m.WrapStore(inner, "etcd").(kv.Scanner)
	if !ok {
		t.Fatal("the wrapped store does not scan")
	}
	var keys []string
	rev, err := s.Scan(context.Background(), kv.RangeRequest{}, func(x kv.KeyValue) error {
		keys = append(keys, x.Key)
		return nil
	})
	if err != nil || rev != 7 || fmt.Sprint(keys) != "[a b]" || inner.scans != 1 {
		t.Fatalf("Scan through the wrapper: %v at %d, %v (%d scans of the store); want [a b] at 7", keys, rev, err, inner.scans)
	}

	stop := fmt.Errorf("visit stops")
	if _, err := s.Scan(context.Background(), kv.RangeRequest{}, func(kv.KeyValue) error { return stop }); err != stop {
		t.Fatalf("Scan whose visit fails: %v, want %v", err, stop)
	}
	inner.err = kv.ErrScanUnsupported
	if _, err := s.Scan(context.Background(), kv.RangeRequest{}, nil); err != kv.ErrScanUnsupported {
		t.Fatalf("Scan of a store that cannot: %v", err)
	}
	if got := gatherValues(t, reg, "leasehold_store_errors_total", "op"); got["range"] != 0 {
		t.Fatalf("store errors of range = %v after a stopped and an unsupported scan, want 0", got["range"])
	}
	inner.err = fmt.Errorf("member down")
	if _, err := s.Scan(context.Background(), kv.RangeRequest{}, nil); err != inner.err {
		t.Fatalf("failed Scan: %v", err)
	}
	if got := gatherValues(t, reg, "leasehold_store_errors_total", "op"); got["range"] != 1 {
		t.Fatalf("store errors of range = %v after a failed scan, want 1", got["range"])
	}

	plain, ok := m.WrapStore(hangingStore{}, "pebble").(kv.Scanner)
	if !ok {
		t.Fatal("the wrapped store does not scan")
	}
	if _, err := plain.Scan(context.Background(), kv.RangeRequest{}, nil); err != kv.ErrScanUnsupported {
		t.Fatalf("Scan through the wrapper of a store that cannot scan: %v, want kv.ErrScanUnsupported", err)
	}
}

// testCoordinator returns a coordinator on a fresh Pebble directory
// (through wrap, if not nil), which is closed when the test ends.
func testCoordinator(t *testing.T, wrap func(kv.Store) kv.Store) *coordinator.Coordinator {
	t.Helper()
	return testCoordinatorWith(t, coordinator.Config{}, wrap)
}

// testCoordinatorWith is testCoordinator with cfg (its Logger is set).
func testCoordinatorWith(t *testing.T, cfg coordinator.Config, wrap func(kv.Store) kv.Store) *coordinator.Coordinator {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	ls, err := localstore.Open(t.TempDir(), localstore.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ls.Close() })
	var store kv.Store = ls
	if wrap != nil {
		store = wrap(ls)
	}
	cfg.Logger = log
	c, err := coordinator.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
