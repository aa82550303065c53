package etcdkv

import (
	"testing"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// Only a transaction that writes nothing in any branch may be sent more
// than once (hedged): a write sent twice could be applied twice.
func TestReadOnlyTxnsOnly(t *testing.T) {
	get, put, del := kv.Get("a"), kv.Put("a", nil, 0), kv.Delete("a")
	for _, c := range []struct {
		name string
		t    kv.Txn
		want bool
	}{
		{"empty", kv.Txn{}, true},
		{"gets under a compare", kv.Txn{If: []kv.Cmp{kv.Exists("a")}, Then: []kv.Op{get}, Else: []kv.Op{get}}, true},
		{"nested gets", kv.Txn{Then: []kv.Op{kv.Nested(kv.Txn{Then: []kv.Op{get}, Else: []kv.Op{get}})}}, true},
		{"a put", kv.Txn{Then: []kv.Op{get, put}}, false},
		{"a delete in else", kv.Txn{Else: []kv.Op{del}}, false},
		{"a put nested in else", kv.Txn{Then: []kv.Op{get}, Else: []kv.Op{kv.Nested(kv.Txn{Then: []kv.Op{get}, Else: []kv.Op{put}})}}, false},
	} {
		if got := readOnly(&c.t); got != c.want {
			t.Errorf("%s: readOnly = %v, want %v", c.name, got, c.want)
		}
	}
}
