package localstore

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/leasehold/leasehold/coordinator/kv"
)

func TestValueRoundTrip(t *testing.T) {
	for _, in := range []kv.KeyValue{
		{Key: "k", CreateRevision: 1, ModRevision: 1, Version: 1},
		{Key: "k", Value: []byte("hello"), CreateRevision: 5, ModRevision: 900, Version: 7, Lease: 3},
		{Key: "k", Value: []byte{0, 1, 2}, CreateRevision: 1 << 62, ModRevision: 1<<63 - 1, Version: 1 << 40, Lease: 1<<63 - 1},
	} {
		raw := appendValue(nil, &in)
		out, err := decodeValue(in.Key, raw, false)
		if err != nil {
			t.Fatalf("decode %+v: %v", in, err)
		}
		if out.Key != in.Key || !bytes.Equal(out.Value, in.Value) || out.CreateRevision != in.CreateRevision ||
			out.ModRevision != in.ModRevision || out.Version != in.Version || out.Lease != in.Lease {
			t.Fatalf("round trip: %+v became %+v", in, out)
		}
		keysOnly, err := decodeValue(in.Key, raw, true)
		if err != nil || keysOnly.Value != nil || keysOnly.ModRevision != in.ModRevision {
			t.Fatalf("keys only: %+v, %v", keysOnly, err)
		}
	}
}

// corruptSeeds are records that must not decode.
var corruptSeeds = [][]byte{
	nil,
	{},
	{2, 1, 1, 1, 0},           // unknown format
	{valueFormat},             // no header
	{valueFormat, 1, 1},       // truncated header
	{valueFormat, 0x80},       // truncated varint
	{valueFormat, 0, 1, 1, 0}, // create revision 0
	{valueFormat, 5, 4, 1, 0}, // mod below create
	{valueFormat, 1, 1, 0, 0}, // version 0
	{valueFormat, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1, 1, 0}, // out of int64 range
	{valueFormat, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},    // varint overflow
}

func TestDecodeCorrupt(t *testing.T) {
	for _, raw := range corruptSeeds {
		_, err := decodeValue("jobs/42", raw, false)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `"jobs/42"`) {
			t.Errorf("decode %x: %v, want ErrCorrupt naming the key", raw, err)
		}
	}
}

func FuzzDecodeValue(f *testing.F) {
	for _, raw := range corruptSeeds {
		f.Add(raw)
	}
	f.Add(appendValue(nil, &kv.KeyValue{CreateRevision: 1, ModRevision: 2, Version: 2, Lease: 9, Value: []byte("v")}))
	f.Add(appendValue(nil, &kv.KeyValue{CreateRevision: 1 << 50, ModRevision: 1 << 60, Version: 3}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := decodeValue("key", raw, false)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `"key"`) {
				t.Fatalf("error %v does not wrap ErrCorrupt or name the key", err)
			}
			return
		}
		if got.CreateRevision < 1 || got.ModRevision < got.CreateRevision || got.Version < 1 || got.Lease < 0 {
			t.Fatalf("decoded impossible metadata %+v", got)
		}
		// Whatever decodes re-encodes to a record that decodes the same.
		again, err := decodeValue("key", appendValue(nil, &got), false)
		if err != nil || !bytes.Equal(again.Value, got.Value) || again.CreateRevision != got.CreateRevision ||
			again.ModRevision != got.ModRevision || again.Version != got.Version || again.Lease != got.Lease {
			t.Fatalf("re-encoding %+v: %+v, %v", got, again, err)
		}
	})
}

// TestCorruptRecordReported: a corrupt record on disk is an error naming
// the key from every read path, and never a panic.
func TestCorruptRecordReported(t *testing.T) {
	s := openTemp(t, Options{})
	mustPut(t, s, "good", "v", 0)
	if err := s.db.Set(dataKey("bad"), []byte{valueFormat, 0x80}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `"bad"`) {
			t.Errorf("%s: %v, want ErrCorrupt naming \"bad\"", what, err)
		}
	}
	_, err := s.Range(ctxT(t), kv.Prefix("", 0))
	check("Range", err)
	_, err = s.Range(ctxT(t), kv.RangeRequest{Start: "bad", KeysOnly: true})
	check("Range KeysOnly", err)
	_, err = s.Txn(ctxT(t), kv.Txn{If: []kv.Cmp{kv.Exists("bad")}})
	check("compare", err)
	_, err = s.Txn(ctxT(t), kv.Txn{Then: []kv.Op{kv.Get("bad")}})
	check("Get", err)
	_, err = s.Txn(ctxT(t), kv.Txn{Then: []kv.Op{kv.Put("bad", nil, 0)}})
	check("Put over it", err)
	// The rest of the store still works.
	if got := mustGet(t, s, "good"); got == nil {
		t.Fatalf("good key unreadable")
	}
}
