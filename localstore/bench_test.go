package localstore

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// BenchmarkTxnSerial: one writer, one synced transaction at a time. Bound by
// the latency of one fsync.
func BenchmarkTxnSerial(b *testing.B) {
	s := openTemp(b, Options{})
	ctx := context.Background()
	value := make([]byte, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		key := "job/" + strconv.Itoa(i)
		if _, err := s.Txn(ctx, kv.Txn{
			If:   []kv.Cmp{kv.Missing(key)},
			Then: []kv.Op{kv.Put(key, value, 0)},
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "txn/s")
}

// BenchmarkTxnParallel: 64 writers; their transactions share fsyncs (group
// commit), so throughput is far above the serial one.
func BenchmarkTxnParallel(b *testing.B) {
	s := openTemp(b, Options{})
	value := make([]byte, 256)
	var n atomic.Int64
	b.ReportAllocs()
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((64 + procs - 1) / procs) // 64 writers or just above
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			key := "job/" + strconv.FormatInt(n.Add(1), 10)
			if _, err := s.Txn(ctx, kv.Txn{
				If:   []kv.Cmp{kv.Missing(key)},
				Then: []kv.Op{kv.Put(key, value, 0)},
			}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "txn/s")
}

// BenchmarkCheckTxnGroup validates a group commit's transaction: 512
// outcomes of five writes each, as nested transactions.
func BenchmarkCheckTxnGroup(b *testing.B) {
	ops := make([]kv.Op, 512)
	for i := range ops {
		id := fmt.Sprintf("%026d", i)
		ops[i] = kv.Nested(kv.Txn{
			If:   []kv.Cmp{kv.CreateRevisionIs("/o/"+id, kv.Equal, 7)},
			Then: []kv.Op{kv.Delete("/r/" + id), kv.Delete("/o/" + id), kv.Delete("/c/" + id), kv.Put("/j/"+id, []byte("record"), 0), kv.Put("/f/"+id, nil, 0)},
			Else: []kv.Op{kv.Get("/o/" + id)},
		})
	}
	t := kv.Txn{Then: ops}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := checkTxn(&t); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckSpace is the reserve check each enqueue call makes (one
// statfs of the data directory's file system).
func BenchmarkCheckSpace(b *testing.B) {
	s := openTemp(b, Options{MinFreeBytes: 1})
	b.ReportAllocs()
	for b.Loop() {
		if err := s.CheckSpace(); err != nil {
			b.Fatal(err)
		}
	}
}
