package localstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// ErrCorrupt is wrapped by the error returned when a stored record cannot be
// decoded. The message names the key.
var ErrCorrupt = errors.New("localstore: corrupt record")

// The Pebble key space. User keys live under prefixData, so no user key can
// collide with the store's own records.
const (
	prefixData  = 'd' // 'd' + user key -> value record
	prefixLease = 'l' // 'l' + lease id (8 bytes, big endian) + user key -> empty
	prefixMeta  = 'm' // 'm' + name -> store metadata
)

var (
	// keyFormat holds the on-disk format version of the store.
	keyFormat = []byte("mformat")
	// keyRevision holds the last revision, 8 bytes big endian, written in
	// the same batch as every write of that revision.
	keyRevision = []byte("mrevision")
	// keyLeaseSeq holds the last lease id granted, 8 bytes big endian.
	keyLeaseSeq = []byte("mleaseseq")
)

// storeFormat is the on-disk format that this code writes and reads.
const storeFormat = 1

// valueFormat is the first byte of every value record.
const valueFormat = 1

func dataKey(key string) []byte {
	b := make([]byte, 0, 1+len(key))
	return append(append(b, prefixData), key...)
}

func leaseIndexKey(id kv.LeaseID, key string) []byte {
	b := make([]byte, 9, 9+len(key))
	b[0] = prefixLease
	binary.BigEndian.PutUint64(b[1:], uint64(id))
	return append(b, key...)
}

// parseLeaseIndexKey splits a lease index key into its lease and user key.
func parseLeaseIndexKey(b []byte) (kv.LeaseID, string, error) {
	if len(b) < 10 || b[0] != prefixLease {
		return 0, "", fmt.Errorf("%w: lease index key %q", ErrCorrupt, b)
	}
	id := binary.BigEndian.Uint64(b[1:9])
	if id == 0 || id > math.MaxInt64 {
		return 0, "", fmt.Errorf("%w: lease index key %q: lease id %d", ErrCorrupt, b, id)
	}
	return kv.LeaseID(id), string(b[9:]), nil
}

func encodeUint64(v int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(v))
	return b
}

// decodeCounter decodes a counter record; name says which, for errors.
func decodeCounter(name string, b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: %s: %d bytes, want 8", ErrCorrupt, name, len(b))
	}
	v := binary.BigEndian.Uint64(b)
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("%w: %s: %d out of range", ErrCorrupt, name, v)
	}
	return int64(v), nil
}

// appendValue appends the record of kv to dst: a format byte, then the
// create revision, mod revision, version and lease as uvarints, then the
// value.
func appendValue(dst []byte, kv *kv.KeyValue) []byte {
	dst = append(dst, valueFormat)
	dst = binary.AppendUvarint(dst, uint64(kv.CreateRevision))
	dst = binary.AppendUvarint(dst, uint64(kv.ModRevision))
	dst = binary.AppendUvarint(dst, uint64(kv.Version))
	dst = binary.AppendUvarint(dst, uint64(kv.Lease))
	return append(dst, kv.Value...)
}

// decodeValue decodes the record raw of key. It copies the value out of raw
// unless keysOnly, in which case Value is left nil. It never panics: a
// record that is not one appendValue could have written yields an error
// wrapping ErrCorrupt that names the key.
func decodeValue(key string, raw []byte, keysOnly bool) (kv.KeyValue, error) {
	out := kv.KeyValue{Key: key}
	if len(raw) == 0 {
		return out, corrupt(key, "empty record")
	}
	if raw[0] != valueFormat {
		return out, corrupt(key, fmt.Sprintf("unknown record format %d", raw[0]))
	}
	rest := raw[1:]
	var fields [4]int64
	names := [4]string{"create revision", "mod revision", "version", "lease"}
	for i := range fields {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return out, corrupt(key, "truncated or overlong "+names[i])
		}
		if v > math.MaxInt64 {
			return out, corrupt(key, fmt.Sprintf("%s %d out of range", names[i], v))
		}
		fields[i] = int64(v)
		rest = rest[n:]
	}
	out.CreateRevision, out.ModRevision, out.Version, out.Lease = fields[0], fields[1], fields[2], kv.LeaseID(fields[3])
	switch {
	case out.CreateRevision < 1:
		return out, corrupt(key, "create revision 0")
	case out.ModRevision < out.CreateRevision:
		return out, corrupt(key, fmt.Sprintf("mod revision %d below create revision %d", out.ModRevision, out.CreateRevision))
	case out.Version < 1:
		return out, corrupt(key, "version 0")
	}
	if !keysOnly && len(rest) > 0 {
		out.Value = append([]byte(nil), rest...)
	}
	return out, nil
}

func corrupt(key, why string) error {
	return fmt.Errorf("%w: key %q: %s", ErrCorrupt, key, why)
}
