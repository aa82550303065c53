package coordinator

import (
	stdjson "encoding/json"
	"errors"
	"github.com/leasehold/leasehold/coordinator/kv"
	"reflect"
	"strings"
	"testing"
	"time"
)

func FuzzDecodeJob(f *testing.F) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	good := &Job{ID: "01JEXAMPXE0000000000000000", Kind: "k", Queue: "default", Priority: 1, State: StateCompleted,
		Payload: []byte(`{"a":1}`), CreatedAt: now, ScheduledAt: now, FinalizedAt: &now, Errors: []AttemptError{}}
	f.Add(encodeJob(good))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"id":"01JEXAMPXE0000000000000000","state":"running","kind":"k","queue":"q"}`))
	f.Add([]byte(`null`))
	f.Add([]byte{0xff, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := DecodeJob("/leasehold/ns/j/x", b)
		// What encoding/json reads, the record decoder reads alike.
		var std Job
		if stdjson.Unmarshal(b, &std) == nil && err == nil && !reflect.DeepEqual(*j, std) {
			t.Fatalf("decodes differently from encoding/json:\n got %+v\nwant %+v", *j, std)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "/leasehold/ns/j/x") {
				t.Fatalf("error %v does not wrap ErrCorrupt with the key", err)
			}
			return
		}
		// Whatever decodes re-encodes and decodes to the same record.
		j2, err := DecodeJob("k", encodeJob(j))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if j2.ID != j.ID || j2.State != j.State {
			t.Fatalf("round trip changed the record")
		}
	})
}

func TestDecodeJobRejects(t *testing.T) {
	for _, b := range []string{`{}`, `{"id":"bad"}`, `{"id":"01JEXAMPXE0000000000000000","state":"done","kind":"k","queue":"q"}`,
		`{"id":"01JEXAMPXE0000000000000000","state":"completed","kind":"k","queue":"q"}`} {
		if _, err := DecodeJob("key", []byte(b)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("DecodeJob(%s) = %v, want ErrCorrupt", b, err)
		}
	}
}

func TestChunkRespectsEtcdOpCounting(t *testing.T) {
	c := &Coordinator{limits: kv.Limits{MaxOps: 128, MaxBytes: 1 << 20}}
	units := make([]unit, 300)
	for i := range units {
		units[i] = unit{txn: txnWithOps(4)}
	}
	total := 0
	for _, ch := range c.chunk(units) {
		// etcd: outer ops + the largest nested branch <= MaxOps.
		if len(ch)+4 > 128 {
			t.Fatalf("chunk of %d nested txns of 4 ops exceeds 128", len(ch))
		}
		total += len(ch)
	}
	if total != 300 {
		t.Fatalf("chunks hold %d units", total)
	}
}

func txnWithOps(n int) kv.Txn {
	var t kv.Txn
	for i := range n {
		t.Then = append(t.Then, kv.Put(string(rune('a'+i)), nil, 0))
	}
	return t
}
