package metrics

import (
	"context"
	"fmt"
	"log/slog"
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
