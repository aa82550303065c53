// Package kvtest is the conformance suite of the [kv.Store] seam: the
// behaviour every backend (localstore on Pebble, coordinator/etcdkv on etcd)
// must show, so that the job state machine written against the seam cannot
// tell them apart.
//
// The suite tests what package kv promises, which is etcd's semantics, and
// nothing that only one backend does (restarts, compaction, directory locks
// and size limits are tested by each backend itself).
//
// Use it from a backend's tests:
//
//	func TestConformance(t *testing.T) {
//		kvtest.Run(t, func(t *testing.T) kv.Store { return openMyStore(t) })
//	}
//
// Run calls open once per subtest and closes the store when that subtest
// ends; open must not close it itself. Every subtest writes only keys under a
// prefix of its own, random per run, so one store (or one etcd cluster) may
// serve every subtest and every run. Subtests run one after another; some
// assert that the global revision moved by exactly one, so nothing else may
// write to the store while Run is running.
package kvtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// waitTimeout bounds every wait for a watch event or a goroutine. It is a
// failure guard, never a way to synchronise: passing runs do not wait for it.
const waitTimeout = 10 * time.Second

// Run runs the conformance suite against the stores that open returns.
func Run(t *testing.T, open func(t *testing.T) kv.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"RevisionAdvancesOncePerWritingTxn", testRevisionAdvances},
		{"RevisionUnchangedWithoutWrites", testRevisionUnchanged},
		{"KeyMetadata", testKeyMetadata},
		{"RecreateAfterDelete", testRecreateAfterDelete},
		{"CompareExistingKey", testCompareExisting},
		{"CompareMissingKey", testCompareMissing},
		{"CompareValueOnMissingKeyFails", testCompareValueMissing},
		{"ComparesAreAnded", testComparesAnded},
		{"ThenElse", testThenElse},
		{"GetResults", testGetResults},
		{"GetSeesEarlierWritesOfTxn", testGetSeesEarlierWrites},
		{"Nested", testNested},
		{"NestedComparesSeeStateAtTxnStart", testNestedComparesAtStart},
		{"NestedDeep", testNestedDeep},
		{"DuplicateWriteRejected", testDuplicateWrite},
		{"DuplicateWriteAcrossNestedBranchesAllowed", testDuplicateAcrossBranches},
		{"EmptyKeyRejected", testEmptyKey},
		{"Range", testRange},
		{"RangeLimit", testRangeLimit},
		{"RangeKeysOnly", testRangeKeysOnly},
		{"RangeConsistent", testRangeConsistent},
		{"WatchFromRevision", testWatchFromRevision},
		{"WatchAfterRange", testWatchAfterRange},
		{"WatchPrefixOnly", testWatchPrefix},
		{"WatchTxnEventsTogether", testWatchTxnEvents},
		{"WatchCancel", testWatchCancel},
		{"LeaseKeepAlive", testLeaseKeepAlive},
		{"LeaseRevokeDeletesKeys", testLeaseRevoke},
		{"LeaseDetachOnPut", testLeaseDetach},
		{"LeasePutUnknownLease", testLeaseUnknown},
		{"CompareAndSetOneWinner", testCASOneWinner},
		{"CreateIfMissingOneWinner", testCreateOneWinner},
		{"Limits", testLimits},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			h := &harness{t: t, s: s, prefix: newPrefix(t)}
			closeAtEnd := true
			h.noClose = func() { closeAtEnd = false }
			t.Cleanup(func() {
				if closeAtEnd {
					if err := s.Close(); err != nil {
						t.Errorf("Close: %v", err)
					}
				}
			})
			tc.fn(t, h)
		})
	}
}

// harness carries a subtest's store and key prefix and a few helpers that
// fail the test on unexpected errors.
type harness struct {
	t       *testing.T
	s       kv.Store
	prefix  string
	noClose func() // the subtest closes the store itself
}

func newPrefix(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random prefix: %v", err)
	}
	name := strings.ReplaceAll(t.Name(), "/", ".")
	return fmt.Sprintf("kvtest/%s/%s/", name, hex.EncodeToString(b[:]))
}

// k returns a key under the subtest's prefix.
func (h *harness) k(name string) string { return h.prefix + name }

func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	h.t.Cleanup(cancel)
	return ctx
}

func (h *harness) txn(t kv.Txn) kv.TxnResult {
	h.t.Helper()
	res, err := h.s.Txn(h.ctx(), t)
	if err != nil {
		h.t.Fatalf("Txn: %v", err)
	}
	return res
}

func (h *harness) put(key, value string) kv.TxnResult {
	h.t.Helper()
	return h.txn(kv.Txn{Then: []kv.Op{kv.Put(key, []byte(value), 0)}})
}

func (h *harness) del(key string) kv.TxnResult {
	h.t.Helper()
	return h.txn(kv.Txn{Then: []kv.Op{kv.Delete(key)}})
}

// get reads key with Range, nil when missing.
func (h *harness) get(key string) *kv.KeyValue {
	h.t.Helper()
	res, err := h.s.Range(h.ctx(), kv.RangeRequest{Start: key})
	if err != nil {
		h.t.Fatalf("Range %q: %v", key, err)
	}
	switch len(res.KVs) {
	case 0:
		return nil
	case 1:
		return &res.KVs[0]
	default:
		h.t.Fatalf("Range of one key %q returned %d keys", key, len(res.KVs))
		return nil
	}
}

// rev returns the store's current revision.
func (h *harness) rev() int64 {
	h.t.Helper()
	res, err := h.s.Range(h.ctx(), kv.RangeRequest{Start: h.k("\x00rev-probe")})
	if err != nil {
		h.t.Fatalf("Range: %v", err)
	}
	return res.Revision
}

func (h *harness) rangePrefix(limit int) kv.RangeResult {
	h.t.Helper()
	res, err := h.s.Range(h.ctx(), kv.Prefix(h.prefix, limit))
	if err != nil {
		h.t.Fatalf("Range prefix: %v", err)
	}
	return res
}

func checkKV(t *testing.T, what string, got *kv.KeyValue, want kv.KeyValue) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: key %q missing, want %+v", what, want.Key, want)
	}
	if got.Key != want.Key || !bytes.Equal(got.Value, want.Value) ||
		got.CreateRevision != want.CreateRevision || got.ModRevision != want.ModRevision ||
		got.Version != want.Version || got.Lease != want.Lease {
		t.Fatalf("%s:\n got  %s\n want %s", what, fmtKV(*got), fmtKV(want))
	}
}

func fmtKV(kv kv.KeyValue) string {
	return fmt.Sprintf("{key=%q value=%q create=%d mod=%d version=%d lease=%d}",
		kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
}

func testRevisionAdvances(t *testing.T, h *harness) {
	r0 := h.rev()
	r1 := h.put(h.k("a"), "1").Revision
	if r1 != r0+1 {
		t.Fatalf("revision after one put = %d, want %d", r1, r0+1)
	}
	// Three writes in one transaction: one revision, shared by all.
	res := h.txn(kv.Txn{Then: []kv.Op{
		kv.Put(h.k("a"), []byte("2"), 0),
		kv.Put(h.k("b"), []byte("2"), 0),
		kv.Put(h.k("c"), []byte("2"), 0),
	}})
	if res.Revision != r1+1 {
		t.Fatalf("revision after a three-put txn = %d, want %d", res.Revision, r1+1)
	}
	for _, name := range []string{"a", "b", "c"} {
		if kv := h.get(h.k(name)); kv == nil || kv.ModRevision != r1+1 {
			t.Fatalf("key %s: %+v, want ModRevision %d", name, kv, r1+1)
		}
	}
	// A delete of an existing key writes.
	if r := h.del(h.k("b")).Revision; r != r1+2 {
		t.Fatalf("revision after a delete = %d, want %d", r, r1+2)
	}
	// The Else branch writes as well as Then does.
	res = h.txn(kv.Txn{
		If:   []kv.Cmp{kv.Exists(h.k("nope"))},
		Else: []kv.Op{kv.Put(h.k("else"), []byte("x"), 0)},
	})
	if res.Succeeded || res.Revision != r1+3 {
		t.Fatalf("else-put: succeeded=%v revision=%d, want false, %d", res.Succeeded, res.Revision, r1+3)
	}
	if got := h.rev(); got != r1+3 {
		t.Fatalf("Range revision = %d, want %d", got, r1+3)
	}
}

func testRevisionUnchanged(t *testing.T, h *harness) {
	base := h.put(h.k("a"), "1").Revision
	cases := []struct {
		name string
		txn  kv.Txn
		ok   bool
	}{
		{"empty txn", kv.Txn{}, true},
		{"get only", kv.Txn{Then: []kv.Op{kv.Get(h.k("a")), kv.Get(h.k("missing"))}}, true},
		{"failed compare, empty else", kv.Txn{
			If:   []kv.Cmp{kv.Missing(h.k("a"))},
			Then: []kv.Op{kv.Put(h.k("a"), []byte("2"), 0)},
		}, false},
		{"failed compare, else reads", kv.Txn{
			If:   []kv.Cmp{kv.Missing(h.k("a"))},
			Then: []kv.Op{kv.Put(h.k("a"), []byte("2"), 0)},
			Else: []kv.Op{kv.Get(h.k("a"))},
		}, false},
		{"delete of a missing key", kv.Txn{Then: []kv.Op{kv.Delete(h.k("missing"))}}, true},
		{"nested txn that takes a branch without writes", kv.Txn{Then: []kv.Op{kv.Nested(kv.Txn{
			If:   []kv.Cmp{kv.Missing(h.k("a"))},
			Then: []kv.Op{kv.Put(h.k("b"), []byte("x"), 0)},
			Else: []kv.Op{kv.Get(h.k("a"))},
		})}}, true},
	}
	for _, c := range cases {
		res := h.txn(c.txn)
		if res.Succeeded != c.ok {
			t.Errorf("%s: Succeeded = %v, want %v", c.name, res.Succeeded, c.ok)
		}
		if res.Revision != base {
			t.Errorf("%s: Revision = %d, want unchanged %d", c.name, res.Revision, base)
		}
		if got := h.rev(); got != base {
			t.Fatalf("%s: store revision moved from %d to %d", c.name, base, got)
		}
	}
}

func testKeyMetadata(t *testing.T, h *harness) {
	key := h.k("k")
	r1 := h.put(key, "v1").Revision
	checkKV(t, "after create", h.get(key), kv.KeyValue{Key: key, Value: []byte("v1"), CreateRevision: r1, ModRevision: r1, Version: 1})
	h.put(h.k("other"), "x") // moves the revision, not key's metadata
	r3 := h.put(key, "v2").Revision
	checkKV(t, "after update", h.get(key), kv.KeyValue{Key: key, Value: []byte("v2"), CreateRevision: r1, ModRevision: r3, Version: 2})
	r4 := h.put(key, "v2").Revision // same value still writes
	if r4 != r3+1 {
		t.Fatalf("rewriting the same value: revision %d, want %d", r4, r3+1)
	}
	checkKV(t, "after same-value put", h.get(key), kv.KeyValue{Key: key, Value: []byte("v2"), CreateRevision: r1, ModRevision: r4, Version: 3})
	// An empty value is a value: the key exists.
	r5 := h.put(h.k("empty"), "").Revision
	checkKV(t, "empty value", h.get(h.k("empty")), kv.KeyValue{Key: h.k("empty"), CreateRevision: r5, ModRevision: r5, Version: 1})
}

func testRecreateAfterDelete(t *testing.T, h *harness) {
	key := h.k("k")
	h.put(key, "v1")
	h.put(key, "v2")
	rd := h.del(key).Revision
	if kv := h.get(key); kv != nil {
		t.Fatalf("deleted key still readable: %s", fmtKV(*kv))
	}
	if got := h.rev(); got != rd {
		t.Fatalf("revision after delete = %d, want %d", got, rd)
	}
	rc := h.put(key, "v3").Revision
	if rc != rd+1 {
		t.Fatalf("re-create revision %d, want %d", rc, rd+1)
	}
	checkKV(t, "re-created", h.get(key), kv.KeyValue{Key: key, Value: []byte("v3"), CreateRevision: rc, ModRevision: rc, Version: 1})
}

// cmpCase is one compare and whether it must hold.
type cmpCase struct {
	cmp  kv.Cmp
	want bool
}

func runCmpCases(t *testing.T, h *harness, cases []cmpCase) {
	t.Helper()
	before := h.rev()
	for _, c := range cases {
		// A compare that holds runs Then; each branch reads a different key
		// so that the results also show which branch ran.
		res := h.txn(kv.Txn{
			If:   []kv.Cmp{c.cmp},
			Then: []kv.Op{kv.Get(h.k("then"))},
			Else: []kv.Op{kv.Get(h.k("else")), kv.Get(h.k("else"))},
		})
		wantLen := 1
		if !c.want {
			wantLen = 2
		}
		if res.Succeeded != c.want || len(res.Results) != wantLen {
			t.Errorf("compare %s: Succeeded=%v with %d results, want %v with %d",
				fmtCmp(c.cmp), res.Succeeded, len(res.Results), c.want, wantLen)
		}
	}
	if after := h.rev(); after != before {
		t.Fatalf("compares moved the revision from %d to %d", before, after)
	}
}

func fmtCmp(c kv.Cmp) string {
	target := map[kv.Target]string{kv.Version: "version", kv.CreateRevision: "create", kv.ModRevision: "mod", kv.Value: "value"}[c.Target]
	op := map[kv.CmpOp]string{kv.Equal: "==", kv.NotEqual: "!=", kv.Less: "<", kv.Greater: ">"}[c.Op]
	if c.Target == kv.Value {
		return fmt.Sprintf("%s(%q) %s %q", target, c.Key, op, c.Bytes)
	}
	return fmt.Sprintf("%s(%q) %s %d", target, c.Key, op, c.Int)
}

func valueIs(key string, op kv.CmpOp, v string) kv.Cmp {
	return kv.Cmp{Key: key, Target: kv.Value, Op: op, Bytes: []byte(v)}
}

func testCompareExisting(t *testing.T, h *harness) {
	key := h.k("k")
	c := h.put(key, "m").Revision
	h.put(h.k("other"), "x")
	m := h.put(key, "m").Revision // version 2, mod m, create c, value "m"
	var cases []cmpCase
	ints := []struct {
		mk  func(string, kv.CmpOp, int64) kv.Cmp
		val int64
	}{
		{kv.VersionIs, 2},
		{kv.CreateRevisionIs, c},
		{kv.ModRevisionIs, m},
	}
	for _, x := range ints {
		cases = append(cases,
			cmpCase{x.mk(key, kv.Equal, x.val), true},
			cmpCase{x.mk(key, kv.Equal, x.val+1), false},
			cmpCase{x.mk(key, kv.NotEqual, x.val), false},
			cmpCase{x.mk(key, kv.NotEqual, x.val-1), true},
			cmpCase{x.mk(key, kv.Less, x.val+1), true},
			cmpCase{x.mk(key, kv.Less, x.val), false},
			cmpCase{x.mk(key, kv.Greater, x.val-1), true},
			cmpCase{x.mk(key, kv.Greater, x.val), false},
		)
	}
	cases = append(cases,
		cmpCase{valueIs(key, kv.Equal, "m"), true},
		cmpCase{valueIs(key, kv.Equal, "n"), false},
		cmpCase{valueIs(key, kv.NotEqual, "m"), false},
		cmpCase{valueIs(key, kv.NotEqual, ""), true},
		cmpCase{valueIs(key, kv.Less, "n"), true},
		cmpCase{valueIs(key, kv.Less, "m"), false},
		cmpCase{valueIs(key, kv.Less, "ma"), true}, // bytewise order
		cmpCase{valueIs(key, kv.Greater, "l"), true},
		cmpCase{valueIs(key, kv.Greater, "m"), false},
		cmpCase{valueIs(key, kv.Greater, ""), true},
		cmpCase{kv.Exists(key), true},
		cmpCase{kv.Missing(key), false},
	)
	runCmpCases(t, h, cases)
}

func testCompareMissing(t *testing.T, h *harness) {
	key := h.k("never")
	gone := h.k("gone")
	h.put(gone, "x")
	h.del(gone)
	var cases []cmpCase
	for _, k := range []string{key, gone} {
		for _, mk := range []func(string, kv.CmpOp, int64) kv.Cmp{kv.VersionIs, kv.CreateRevisionIs, kv.ModRevisionIs} {
			cases = append(cases,
				cmpCase{mk(k, kv.Equal, 0), true},
				cmpCase{mk(k, kv.NotEqual, 0), false},
				cmpCase{mk(k, kv.Greater, 0), false},
				cmpCase{mk(k, kv.Less, 1), true},
				cmpCase{mk(k, kv.Equal, 1), false},
			)
		}
		cases = append(cases, cmpCase{kv.Missing(k), true}, cmpCase{kv.Exists(k), false})
	}
	runCmpCases(t, h, cases)
}

// testCompareValueMissing pins etcd's rule that a Value compare on a missing
// key fails whatever the operator (etcd cannot tell a missing value from an
// empty one, so it refuses to decide). Compare Version or CreateRevision to
// test for absence.
func testCompareValueMissing(t *testing.T, h *harness) {
	key := h.k("never")
	runCmpCases(t, h, []cmpCase{
		{valueIs(key, kv.Equal, "x"), false},
		{valueIs(key, kv.Equal, ""), false},
		{valueIs(key, kv.NotEqual, "x"), false},
		{valueIs(key, kv.Less, "x"), false},
		{valueIs(key, kv.Greater, ""), false},
	})
}

func testComparesAnded(t *testing.T, h *harness) {
	a, b := h.k("a"), h.k("b")
	h.put(a, "1")
	res := h.txn(kv.Txn{If: []kv.Cmp{kv.Exists(a), kv.Exists(b)}})
	if res.Succeeded {
		t.Fatalf("Exists(a) && Exists(b) held with b missing")
	}
	res = h.txn(kv.Txn{If: []kv.Cmp{kv.Exists(a), kv.Missing(b), valueIs(a, kv.Equal, "1")}})
	if !res.Succeeded {
		t.Fatalf("three true compares did not hold")
	}
}

func testThenElse(t *testing.T, h *harness) {
	flag, thenKey, elseKey := h.k("flag"), h.k("then"), h.k("else")
	txn := kv.Txn{
		If:   []kv.Cmp{kv.Missing(flag)},
		Then: []kv.Op{kv.Put(flag, []byte("set"), 0), kv.Put(thenKey, []byte("t"), 0)},
		Else: []kv.Op{kv.Put(elseKey, []byte("e"), 0), kv.Get(flag), kv.Delete(h.k("none"))},
	}
	res := h.txn(txn)
	if !res.Succeeded || len(res.Results) != 2 {
		t.Fatalf("first run: Succeeded=%v results=%d, want true, 2", res.Succeeded, len(res.Results))
	}
	if h.get(thenKey) == nil || h.get(elseKey) != nil {
		t.Fatalf("first run: Then must have run alone")
	}
	r1 := res.Revision
	res = h.txn(txn)
	if res.Succeeded || len(res.Results) != 3 {
		t.Fatalf("second run: Succeeded=%v results=%d, want false, 3", res.Succeeded, len(res.Results))
	}
	if res.Revision != r1+1 {
		t.Fatalf("second run: revision %d, want %d", res.Revision, r1+1)
	}
	checkKV(t, "Get in Else", res.Results[1].KV, kv.KeyValue{Key: flag, Value: []byte("set"), CreateRevision: r1, ModRevision: r1, Version: 1})
	if kv := h.get(thenKey); kv == nil || kv.Version != 1 {
		t.Fatalf("then key written again by the Else run: %+v", kv)
	}
	checkKV(t, "else key", h.get(elseKey), kv.KeyValue{Key: elseKey, Value: []byte("e"), CreateRevision: r1 + 1, ModRevision: r1 + 1, Version: 1})
}

func testGetResults(t *testing.T, h *harness) {
	a := h.k("a")
	r1 := h.put(a, "va").Revision
	res := h.txn(kv.Txn{Then: []kv.Op{kv.Get(a), kv.Get(h.k("missing")), kv.Get(a)}})
	if len(res.Results) != 3 {
		t.Fatalf("results: %d, want 3", len(res.Results))
	}
	checkKV(t, "Get existing", res.Results[0].KV, kv.KeyValue{Key: a, Value: []byte("va"), CreateRevision: r1, ModRevision: r1, Version: 1})
	checkKV(t, "Get existing again", res.Results[2].KV, kv.KeyValue{Key: a, Value: []byte("va"), CreateRevision: r1, ModRevision: r1, Version: 1})
	if res.Results[1].KV != nil {
		t.Fatalf("Get of a missing key returned %s, want nil", fmtKV(*res.Results[1].KV))
	}
	// Put and Delete results carry no KV.
	res = h.txn(kv.Txn{Then: []kv.Op{kv.Put(h.k("b"), []byte("x"), 0), kv.Delete(a)}})
	if len(res.Results) != 2 || res.Results[0].KV != nil || res.Results[1].KV != nil || res.Results[0].Txn != nil {
		t.Fatalf("write results: %+v, want two empty results", res.Results)
	}
}

// testGetSeesEarlierWritesOfTxn: as in etcd, a Get in a transaction reads
// the writes of the ops before it in the same transaction, at the
// transaction's revision.
func testGetSeesEarlierWrites(t *testing.T, h *harness) {
	a, b := h.k("a"), h.k("b")
	r1 := h.put(a, "old").Revision
	res := h.txn(kv.Txn{Then: []kv.Op{
		kv.Get(a),
		kv.Put(a, []byte("new"), 0),
		kv.Get(a),
		kv.Put(b, []byte("b"), 0),
		kv.Get(b),
	}})
	r2 := res.Revision
	checkKV(t, "Get before Put", res.Results[0].KV, kv.KeyValue{Key: a, Value: []byte("old"), CreateRevision: r1, ModRevision: r1, Version: 1})
	checkKV(t, "Get after Put", res.Results[2].KV, kv.KeyValue{Key: a, Value: []byte("new"), CreateRevision: r1, ModRevision: r2, Version: 2})
	checkKV(t, "Get after create", res.Results[4].KV, kv.KeyValue{Key: b, Value: []byte("b"), CreateRevision: r2, ModRevision: r2, Version: 1})
	res = h.txn(kv.Txn{Then: []kv.Op{kv.Delete(a), kv.Get(a)}})
	if res.Results[1].KV != nil {
		t.Fatalf("Get after Delete in one txn returned %s", fmtKV(*res.Results[1].KV))
	}
}

func testNested(t *testing.T, h *harness) {
	a, b, c, d := h.k("a"), h.k("b"), h.k("c"), h.k("d")
	h.put(b, "b0")
	res := h.txn(kv.Txn{
		If: []kv.Cmp{kv.Missing(a)},
		Then: []kv.Op{
			kv.Put(a, []byte("a"), 0),
			kv.Nested(kv.Txn{ // holds: b exists
				If:   []kv.Cmp{kv.Exists(b)},
				Then: []kv.Op{kv.Put(b, []byte("b1"), 0), kv.Get(d)},
				Else: []kv.Op{kv.Put(h.k("e1"), []byte("wrong"), 0)},
			}),
			kv.Nested(kv.Txn{ // fails: d missing
				If:   []kv.Cmp{kv.Exists(d)},
				Then: []kv.Op{kv.Put(c, []byte("wrong"), 0)},
				Else: []kv.Op{kv.Put(c, []byte("c"), 0)},
			}),
			kv.Get(c),
		},
	})
	if !res.Succeeded || len(res.Results) != 4 {
		t.Fatalf("outer: Succeeded=%v results=%d, want true, 4", res.Succeeded, len(res.Results))
	}
	rev := res.Revision
	n1, n2 := res.Results[1].Txn, res.Results[2].Txn
	if n1 == nil || n2 == nil {
		t.Fatalf("nested results missing: %+v", res.Results)
	}
	if !n1.Succeeded || len(n1.Results) != 2 || n1.Results[1].KV != nil {
		t.Fatalf("first nested: %+v, want Succeeded with 2 results, Get(d) nil", *n1)
	}
	if n2.Succeeded || len(n2.Results) != 1 {
		t.Fatalf("second nested: %+v, want failed with 1 result", *n2)
	}
	if n1.Revision != rev || n2.Revision != rev {
		t.Fatalf("nested revisions %d, %d, want the outer %d", n1.Revision, n2.Revision, rev)
	}
	checkKV(t, "Get(c) after nested put", res.Results[3].KV, kv.KeyValue{Key: c, Value: []byte("c"), CreateRevision: rev, ModRevision: rev, Version: 1})
	for _, want := range []struct{ key, value string }{{a, "a"}, {b, "b1"}, {c, "c"}} {
		got := h.get(want.key)
		if got == nil || string(got.Value) != want.value || got.ModRevision != rev {
			t.Fatalf("key %q = %+v, want value %q at revision %d", want.key, got, want.value, rev)
		}
	}
	if h.get(h.k("e1")) != nil {
		t.Fatalf("the Else of a nested txn that held ran")
	}
	if h.rev() != rev {
		t.Fatalf("nested writes took more than one revision")
	}
	// A failing outer compare runs Else, and its nested transactions.
	res = h.txn(kv.Txn{
		If: []kv.Cmp{kv.Missing(a)},
		Else: []kv.Op{kv.Nested(kv.Txn{
			If:   []kv.Cmp{kv.Exists(a)},
			Then: []kv.Op{kv.Delete(a)},
		})},
	})
	if res.Succeeded || len(res.Results) != 1 || res.Results[0].Txn == nil || !res.Results[0].Txn.Succeeded {
		t.Fatalf("else-nested: %+v", res)
	}
	if h.get(a) != nil || res.Revision != rev+1 {
		t.Fatalf("else-nested delete: key still there or revision %d != %d", res.Revision, rev+1)
	}
}

// testNestedComparesAtStart pins etcd's rule that the compares of every
// nested transaction are evaluated against the store as it was when the
// whole transaction started, not after the writes that precede them.
func testNestedComparesAtStart(t *testing.T, h *harness) {
	a, b := h.k("a"), h.k("b")
	res := h.txn(kv.Txn{Then: []kv.Op{
		kv.Put(a, []byte("a"), 0),
		kv.Nested(kv.Txn{
			If:   []kv.Cmp{kv.Missing(a)}, // a did not exist when the txn started
			Then: []kv.Op{kv.Put(b, []byte("start-state"), 0)},
			Else: []kv.Op{kv.Put(b, []byte("after-put"), 0)},
		}),
	}})
	if !res.Results[1].Txn.Succeeded {
		t.Fatalf("nested compare saw the outer put; etcd evaluates it against the state at txn start")
	}
	if got := h.get(b); got == nil || string(got.Value) != "start-state" {
		t.Fatalf("b = %+v, want start-state", got)
	}
}

func testNestedDeep(t *testing.T, h *harness) {
	const depth = 8
	inner := kv.Txn{If: []kv.Cmp{kv.Missing(h.k("leaf"))}, Then: []kv.Op{kv.Put(h.k("leaf"), []byte("x"), 0)}}
	for i := depth - 1; i > 0; i-- {
		inner = kv.Txn{
			If:   []kv.Cmp{kv.Missing(h.k(fmt.Sprint("level", i)))},
			Then: []kv.Op{kv.Put(h.k(fmt.Sprint("level", i)), []byte("x"), 0), kv.Nested(inner)},
		}
	}
	res := h.txn(inner)
	r := &res
	for i := 1; i < depth; i++ {
		if !r.Succeeded || len(r.Results) != 2 || r.Results[1].Txn == nil {
			t.Fatalf("level %d: %+v", i, *r)
		}
		if r.Results[1].Txn.Revision != res.Revision {
			t.Fatalf("level %d: nested revision %d, want %d", i+1, r.Results[1].Txn.Revision, res.Revision)
		}
		r = r.Results[1].Txn
	}
	if !r.Succeeded {
		t.Fatalf("leaf txn failed")
	}
	got := h.rangePrefix(0)
	if len(got.KVs) != depth || got.Revision != res.Revision {
		t.Fatalf("deep nested txn wrote %d keys at revision %d, want %d keys at %d", len(got.KVs), got.Revision, depth, res.Revision)
	}
}

func testDuplicateWrite(t *testing.T, h *harness) {
	a := h.k("a")
	base := h.put(h.k("base"), "x").Revision
	bad := map[string]kv.Txn{
		"put twice":      {Then: []kv.Op{kv.Put(a, []byte("1"), 0), kv.Put(a, []byte("2"), 0)}},
		"put and delete": {Then: []kv.Op{kv.Put(a, []byte("1"), 0), kv.Delete(a)}},
		"put in then of a nested txn and at its level": {Then: []kv.Op{
			kv.Put(a, []byte("1"), 0),
			kv.Nested(kv.Txn{Then: []kv.Op{kv.Put(a, []byte("2"), 0)}}),
		}},
		"put twice in else": {
			If:   []kv.Cmp{kv.Exists(h.k("base"))},
			Else: []kv.Op{kv.Put(a, []byte("1"), 0), kv.Put(a, []byte("2"), 0)},
		},
	}
	for name, txn := range bad {
		if _, err := h.s.Txn(h.ctx(), txn); err == nil {
			t.Errorf("%s: Txn succeeded, want an error", name)
		}
	}
	if h.get(a) != nil {
		t.Fatalf("a rejected txn wrote")
	}
	if got := h.rev(); got != base {
		t.Fatalf("rejected txns moved the revision from %d to %d", base, got)
	}
}

// testDuplicateAcrossBranches: the Then and Else of one nested transaction
// exclude each other, so they may write the same key.
func testDuplicateAcrossBranches(t *testing.T, h *harness) {
	a := h.k("a")
	res := h.txn(kv.Txn{Then: []kv.Op{kv.Nested(kv.Txn{
		If:   []kv.Cmp{kv.Missing(a)},
		Then: []kv.Op{kv.Put(a, []byte("then"), 0)},
		Else: []kv.Op{kv.Put(a, []byte("else"), 0)},
	})}})
	if got := h.get(a); got == nil || string(got.Value) != "then" || got.ModRevision != res.Revision {
		t.Fatalf("a = %+v", got)
	}
}

func testEmptyKey(t *testing.T, h *harness) {
	base := h.put(h.k("base"), "x").Revision
	if _, err := h.s.Txn(h.ctx(), kv.Txn{Then: []kv.Op{kv.Put("", []byte("x"), 0)}}); err == nil {
		t.Errorf("Put of the empty key succeeded")
	}
	if got := h.rev(); got != base {
		t.Fatalf("revision moved from %d to %d", base, got)
	}
}

func testRange(t *testing.T, h *harness) {
	// Written out of order; read back in key order.
	names := []string{"c", "a", "b/x", "b", "a\x00", "d"}
	var revs = map[string]int64{}
	for _, n := range names {
		revs[n] = h.put(h.k(n), "v-"+n).Revision
	}
	h.del(h.k("d"))
	outside := h.prefix[:len(h.prefix)-1] + "0" // sorts right after the prefix
	last := h.put(outside, "outside").Revision
	defer h.del(outside)

	res := h.rangePrefix(0)
	want := []string{"a", "a\x00", "b", "b/x", "c"}
	if len(res.KVs) != len(want) {
		t.Fatalf("prefix range: %d keys, want %d: %v", len(res.KVs), len(want), keysOf(res.KVs))
	}
	for i, n := range want {
		checkKV(t, "prefix range", &res.KVs[i], kv.KeyValue{Key: h.k(n), Value: []byte("v-" + n), CreateRevision: revs[n], ModRevision: revs[n], Version: 1})
	}
	if res.More || res.Revision != last {
		t.Fatalf("prefix range: More=%v Revision=%d, want false, %d", res.More, res.Revision, last)
	}
	// [Start, End)
	res, err := h.s.Range(h.ctx(), kv.RangeRequest{Start: h.k("a\x00"), End: h.k("b/x")})
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(res.KVs); strings.Join(got, ",") != h.k("a\x00")+","+h.k("b") {
		t.Fatalf("[a\\0, b/x): %q", got)
	}
	// Start alone.
	if got := h.get(h.k("b")); got == nil || got.Key != h.k("b") {
		t.Fatalf("single-key range: %+v", got)
	}
	if got := h.get(h.k("zzz")); got != nil {
		t.Fatalf("single-key range of a missing key: %+v", got)
	}
	// An empty range.
	res, err = h.s.Range(h.ctx(), kv.Prefix(h.k("nothing/"), 0))
	if err != nil || len(res.KVs) != 0 || res.More {
		t.Fatalf("empty range: %+v, %v", res, err)
	}
}

func keysOf(kvs []kv.KeyValue) []string {
	var ks []string
	for _, kv := range kvs {
		ks = append(ks, kv.Key)
	}
	return ks
}

func testRangeLimit(t *testing.T, h *harness) {
	for i := range 5 {
		h.put(h.k(fmt.Sprint(i)), "v")
	}
	for _, c := range []struct {
		limit, n int
		more     bool
	}{{1, 1, true}, {3, 3, true}, {4, 4, true}, {5, 5, false}, {6, 5, false}, {0, 5, false}} {
		res := h.rangePrefix(c.limit)
		if len(res.KVs) != c.n || res.More != c.more {
			t.Errorf("limit %d: %d keys, More=%v; want %d, %v", c.limit, len(res.KVs), res.More, c.n, c.more)
		}
		for i, kv := range res.KVs {
			if kv.Key != h.k(fmt.Sprint(i)) {
				t.Errorf("limit %d: key %d is %q", c.limit, i, kv.Key)
			}
		}
	}
}

func testRangeKeysOnly(t *testing.T, h *harness) {
	r1 := h.put(h.k("a"), "value").Revision
	r2 := h.put(h.k("a"), "value2").Revision
	req := kv.Prefix(h.prefix, 0)
	req.KeysOnly = true
	res, err := h.s.Range(h.ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.KVs) != 1 {
		t.Fatalf("KeysOnly: %d keys", len(res.KVs))
	}
	got := res.KVs[0]
	if len(got.Value) != 0 {
		t.Fatalf("KeysOnly returned a value %q", got.Value)
	}
	checkKV(t, "KeysOnly metadata", &got, kv.KeyValue{Key: h.k("a"), CreateRevision: r1, ModRevision: r2, Version: 2})
}

// testRangeConsistent: a Range never sees half of a transaction, and reports
// the revision it read at.
func testRangeConsistent(t *testing.T, h *harness) {
	a, b := h.k("a"), h.k("b")
	const writes = 100
	done := make(chan error, 1)
	go func() {
		for i := range writes {
			v := []byte(fmt.Sprint(i))
			if _, err := h.s.Txn(context.Background(), kv.Txn{Then: []kv.Op{kv.Put(a, v, 0), kv.Put(b, v, 0)}}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for reads := 0; ; reads++ {
		res := h.rangePrefix(0)
		if len(res.KVs) == 2 {
			x, y := res.KVs[0], res.KVs[1]
			if !bytes.Equal(x.Value, y.Value) || x.ModRevision != y.ModRevision {
				t.Fatalf("torn read: %s and %s", fmtKV(x), fmtKV(y))
			}
			if x.ModRevision > res.Revision {
				t.Fatalf("read revision %d below a key's ModRevision %d", res.Revision, x.ModRevision)
			}
		} else if len(res.KVs) != 0 {
			t.Fatalf("torn read: %d keys", len(res.KVs))
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("writer: %v", err)
			}
			return
		case <-time.After(0):
		}
		if reads > 1_000_000 {
			t.Fatalf("writer did not finish")
		}
	}
}

// collect reads watch responses until want events arrived, failing on an
// error response, a closed channel or the time-out.
func collect(t *testing.T, ch <-chan kv.WatchResponse, want int) []kv.Event {
	t.Helper()
	var evs []kv.Event
	timeout := time.After(waitTimeout)
	for len(evs) < want {
		select {
		case resp, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed after %d of %d events", len(evs), want)
			}
			if resp.Err != nil {
				t.Fatalf("watch ended after %d of %d events: %v", len(evs), want, resp.Err)
			}
			if len(resp.Events) == 0 {
				continue // progress or empty notification
			}
			checkResponseOrder(t, resp)
			evs = append(evs, resp.Events...)
		case <-timeout:
			t.Fatalf("timed out after %d of %d watch events", len(evs), want)
		}
	}
	if len(evs) > want {
		t.Fatalf("watch delivered %d events, want %d: %v", len(evs), want, fmtEvents(evs))
	}
	return evs
}

func checkResponseOrder(t *testing.T, resp kv.WatchResponse) {
	t.Helper()
	for i := 1; i < len(resp.Events); i++ {
		if resp.Events[i].KV.ModRevision < resp.Events[i-1].KV.ModRevision {
			t.Fatalf("events out of revision order in one response: %v", fmtEvents(resp.Events))
		}
	}
}

func fmtEvents(evs []kv.Event) string {
	var sb strings.Builder
	for _, e := range evs {
		typ := "put"
		if e.Type == kv.EventDelete {
			typ = "del"
		}
		fmt.Fprintf(&sb, "[%s %q@%d] ", typ, e.KV.Key, e.KV.ModRevision)
	}
	return sb.String()
}

// expect is one event a watch should deliver.
type expect struct {
	typ   kv.EventType
	key   string
	value string
	rev   int64
}

func checkEvents(t *testing.T, got []kv.Event, want []expect) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("events: got %d, want %d: %s", len(got), len(want), fmtEvents(got))
	}
	for i, w := range want {
		g := got[i]
		if g.Type != w.typ || g.KV.Key != w.key || g.KV.ModRevision != w.rev {
			t.Fatalf("event %d: got %s, want type %d %q@%d", i, fmtEvents(got[i:i+1]), w.typ, w.key, w.rev)
		}
		if w.typ == kv.EventPut && string(g.KV.Value) != w.value {
			t.Fatalf("event %d: value %q, want %q", i, g.KV.Value, w.value)
		}
	}
}

// assertNextIsMarker writes a marker key and fails unless it is the next
// event ch delivers: the watch delivered nothing unexpected before it.
func assertNextIsMarker(t *testing.T, h *harness, ch <-chan kv.WatchResponse, key string) {
	t.Helper()
	rev := h.put(key, "marker").Revision
	evs := collect(t, ch, 1)
	checkEvents(t, evs, []expect{{kv.EventPut, key, "marker", rev}})
}

func testWatchFromRevision(t *testing.T, h *harness) {
	a, b := h.k("a"), h.k("b")
	h.put(h.k("before"), "x") // not replayed: older than the watch
	r1 := h.put(a, "1").Revision
	r2 := h.put(b, "2").Revision
	r3 := h.put(a, "3").Revision
	r4 := h.del(a).Revision
	r5 := h.put(a, "5").Revision

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := h.s.Watch(ctx, h.prefix, r1)
	evs := collect(t, ch, 5)
	checkEvents(t, evs, []expect{
		{kv.EventPut, a, "1", r1},
		{kv.EventPut, b, "2", r2},
		{kv.EventPut, a, "3", r3},
		{kv.EventDelete, a, "", r4},
		{kv.EventPut, a, "5", r5},
	})
	// Put events carry the key's full metadata.
	if e := evs[2].KV; e.CreateRevision != r1 || e.Version != 2 {
		t.Fatalf("put event metadata %s, want create %d version 2", fmtKV(e), r1)
	}
	if e := evs[4].KV; e.CreateRevision != r5 || e.Version != 1 {
		t.Fatalf("re-create event metadata %s, want create %d version 1", fmtKV(e), r5)
	}
	// Live events follow the replayed ones.
	r6 := h.del(b).Revision
	checkEvents(t, collect(t, ch, 1), []expect{{kv.EventDelete, b, "", r6}})

	// A second watch from a middle revision starts there.
	ch2 := h.s.Watch(ctx, h.prefix, r4)
	checkEvents(t, collect(t, ch2, 3), []expect{
		{kv.EventDelete, a, "", r4},
		{kv.EventPut, a, "5", r5},
		{kv.EventDelete, b, "", r6},
	})
	assertNextIsMarker(t, h, ch2, h.k("marker"))
}

// testWatchAfterRange is the pattern the coordinator relies on: read, then
// watch from the read's revision + 1, and miss nothing written in between.
func testWatchAfterRange(t *testing.T, h *harness) {
	h.put(h.k("a"), "1")
	res := h.rangePrefix(0)
	if len(res.KVs) != 1 {
		t.Fatalf("range: %d keys", len(res.KVs))
	}
	// Written after the read and before the watch starts.
	r1 := h.put(h.k("b"), "2").Revision
	r2 := h.del(h.k("a")).Revision

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := h.s.Watch(ctx, h.prefix, res.Revision+1)
	r3 := h.put(h.k("c"), "3").Revision
	checkEvents(t, collect(t, ch, 3), []expect{
		{kv.EventPut, h.k("b"), "2", r1},
		{kv.EventDelete, h.k("a"), "", r2},
		{kv.EventPut, h.k("c"), "3", r3},
	})
}

func testWatchPrefix(t *testing.T, h *harness) {
	in, out := h.k("in/"), h.k("out/")
	start := h.rev() + 1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := h.s.Watch(ctx, in, start)
	h.put(out+"x", "no")
	r := h.put(in+"x", "yes").Revision
	h.put(h.k("in"), "no") // the prefix without its slash is outside it
	h.txn(kv.Txn{Then: []kv.Op{kv.Put(out+"y", []byte("no"), 0), kv.Delete(out + "x")}})
	checkEvents(t, collect(t, ch, 1), []expect{{kv.EventPut, in + "x", "yes", r}})
	assertNextIsMarker(t, h, ch, in+"marker")
}

// testWatchTxnEvents: the writes of one transaction arrive in one response,
// all at the transaction's revision.
func testWatchTxnEvents(t *testing.T, h *harness) {
	a, b, c := h.k("a"), h.k("b"), h.k("c")
	h.put(c, "c")
	start := h.rev() + 1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := h.s.Watch(ctx, h.prefix, start)
	rev := h.txn(kv.Txn{Then: []kv.Op{
		kv.Put(a, []byte("a"), 0),
		kv.Delete(c),
		kv.Nested(kv.Txn{Then: []kv.Op{kv.Put(b, []byte("b"), 0)}}),
	}}).Revision
	select {
	case resp, ok := <-ch:
		if !ok || resp.Err != nil {
			t.Fatalf("watch ended: %v", resp.Err)
		}
		if len(resp.Events) != 3 {
			t.Fatalf("one txn's events split across responses: first has %s", fmtEvents(resp.Events))
		}
		got := map[string]kv.EventType{}
		for _, e := range resp.Events {
			if e.KV.ModRevision != rev {
				t.Fatalf("event %s not at txn revision %d", fmtEvents([]kv.Event{e}), rev)
			}
			got[e.KV.Key] = e.Type
		}
		if got[a] != kv.EventPut || got[b] != kv.EventPut || got[c] != kv.EventDelete {
			t.Fatalf("events %s", fmtEvents(resp.Events))
		}
	case <-time.After(waitTimeout):
		t.Fatalf("no watch response")
	}
}

func testWatchCancel(t *testing.T, h *harness) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := h.s.Watch(ctx, h.prefix, h.rev()+1)
	r := h.put(h.k("a"), "1").Revision
	checkEvents(t, collect(t, ch, 1), []expect{{kv.EventPut, h.k("a"), "1", r}})
	cancel()
	timeout := time.After(waitTimeout)
	for {
		select {
		case resp, ok := <-ch:
			if !ok {
				return
			}
			if resp.Err != nil && !errors.Is(resp.Err, context.Canceled) {
				t.Fatalf("cancelled watch ended with %v", resp.Err)
			}
		case <-timeout:
			t.Fatalf("watch channel not closed after its context was cancelled")
		}
	}
}

func (h *harness) grant() kv.LeaseID {
	h.t.Helper()
	id, err := h.s.Grant(h.ctx(), 30*time.Second)
	if err != nil {
		h.t.Fatalf("Grant: %v", err)
	}
	if id == 0 {
		h.t.Fatalf("Grant returned lease 0")
	}
	return id
}

func testLeaseKeepAlive(t *testing.T, h *harness) {
	id := h.grant()
	ttl, err := h.s.KeepAliveOnce(h.ctx(), id)
	if err != nil {
		t.Fatalf("KeepAliveOnce: %v", err)
	}
	if ttl <= 0 {
		t.Fatalf("KeepAliveOnce TTL %v, want > 0", ttl)
	}
	id2 := h.grant()
	if id2 == id {
		t.Fatalf("Grant returned %d twice", id)
	}
	if err := h.s.Revoke(h.ctx(), id); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if _, err := h.s.KeepAliveOnce(h.ctx(), id); !errors.Is(err, kv.ErrLeaseNotFound) {
		t.Fatalf("KeepAliveOnce after Revoke: %v, want ErrLeaseNotFound", err)
	}
	if err := h.s.Revoke(h.ctx(), id); !errors.Is(err, kv.ErrLeaseNotFound) {
		t.Fatalf("second Revoke: %v, want ErrLeaseNotFound", err)
	}
	if _, err := h.s.KeepAliveOnce(h.ctx(), id2); err != nil {
		t.Fatalf("revoking one lease hurt another: %v", err)
	}
	if err := h.s.Revoke(h.ctx(), id2); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
}

func testLeaseRevoke(t *testing.T, h *harness) {
	id := h.grant()
	other := h.grant()
	defer func() { _ = h.s.Revoke(context.Background(), other) }()
	a, b, c, d := h.k("a"), h.k("b"), h.k("c"), h.k("d")
	r1 := h.txn(kv.Txn{Then: []kv.Op{
		kv.Put(a, []byte("a"), id),
		kv.Put(b, []byte("b"), id),
		kv.Put(c, []byte("c"), 0),
		kv.Put(d, []byte("d"), other),
	}}).Revision
	checkKV(t, "leased key", h.get(a), kv.KeyValue{Key: a, Value: []byte("a"), CreateRevision: r1, ModRevision: r1, Version: 1, Lease: id})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := h.s.Watch(ctx, h.prefix, r1+1)
	if err := h.s.Revoke(h.ctx(), id); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	evs := collect(t, ch, 2)
	rev := evs[0].KV.ModRevision
	if rev != r1+1 {
		t.Fatalf("revoke revision %d, want %d", rev, r1+1)
	}
	got := map[string]bool{}
	for _, e := range evs {
		if e.Type != kv.EventDelete || e.KV.ModRevision != rev {
			t.Fatalf("revoke events %s: want deletes at one revision", fmtEvents(evs))
		}
		got[e.KV.Key] = true
	}
	if !got[a] || !got[b] {
		t.Fatalf("revoke events %s, want deletes of a and b", fmtEvents(evs))
	}
	if h.get(a) != nil || h.get(b) != nil {
		t.Fatalf("leased keys survived Revoke")
	}
	if h.get(c) == nil || h.get(d) == nil {
		t.Fatalf("Revoke deleted keys of no lease or of another lease")
	}
	if h.rev() != rev {
		t.Fatalf("revoke took more than one revision")
	}
	// Revoking a lease with no keys left writes nothing.
	empty := h.grant()
	if err := h.s.Revoke(h.ctx(), empty); err != nil {
		t.Fatal(err)
	}
	if h.rev() != rev {
		t.Fatalf("revoking a lease without keys moved the revision")
	}
	assertNextIsMarker(t, h, ch, h.k("marker"))
}

// testLeaseDetach: a put without the lease detaches the key from it; a
// delete and re-create does too.
func testLeaseDetach(t *testing.T, h *harness) {
	id := h.grant()
	a, b := h.k("a"), h.k("b")
	h.txn(kv.Txn{Then: []kv.Op{kv.Put(a, []byte("a"), id), kv.Put(b, []byte("b"), id)}})
	h.put(a, "a2")
	h.del(b)
	rb := h.put(b, "b2").Revision
	if err := h.s.Revoke(h.ctx(), id); err != nil {
		t.Fatal(err)
	}
	if got := h.get(a); got == nil || got.Lease != 0 {
		t.Fatalf("a detached from the lease but: %+v", got)
	}
	checkKV(t, "b", h.get(b), kv.KeyValue{Key: b, Value: []byte("b2"), CreateRevision: rb, ModRevision: rb, Version: 1})
	if h.rev() != rb {
		t.Fatalf("revoke of a lease whose keys were detached moved the revision")
	}
}

func testLeaseUnknown(t *testing.T, h *harness) {
	id := h.grant()
	if err := h.s.Revoke(h.ctx(), id); err != nil {
		t.Fatal(err)
	}
	base := h.rev()
	_, err := h.s.Txn(h.ctx(), kv.Txn{Then: []kv.Op{
		kv.Put(h.k("plain"), []byte("x"), 0),
		kv.Put(h.k("leased"), []byte("x"), id),
	}})
	if err == nil {
		t.Fatalf("Put with a revoked lease succeeded")
	}
	if h.get(h.k("plain")) != nil || h.rev() != base {
		t.Fatalf("a txn refused for its lease wrote")
	}
	// Only the branch that runs is checked.
	res := h.txn(kv.Txn{
		If:   []kv.Cmp{kv.Missing(h.k("plain"))},
		Then: []kv.Op{kv.Put(h.k("plain"), []byte("x"), 0)},
		Else: []kv.Op{kv.Put(h.k("leased"), []byte("x"), id)},
	})
	if !res.Succeeded || h.get(h.k("plain")) == nil {
		t.Fatalf("a revoked lease in the branch that did not run failed the txn")
	}
	if _, err := h.s.KeepAliveOnce(h.ctx(), 0x7eadbeef12345); !errors.Is(err, kv.ErrLeaseNotFound) {
		t.Fatalf("KeepAliveOnce of a lease never granted: %v, want ErrLeaseNotFound", err)
	}
}

// testCASOneWinner is the property that makes claims safe: of many
// concurrent transactions that compare a key's ModRevision with the one they
// read and then write it, exactly one wins each round.
func testCASOneWinner(t *testing.T, h *harness) {
	const workers, rounds = 16, 10
	key := h.k("job")
	mod := h.put(key, "available").Revision
	for round := range rounds {
		var wg sync.WaitGroup
		wins := make(chan int, workers)
		errs := make(chan error, workers)
		start := make(chan struct{})
		for w := range workers {
			wg.Go(func() {
				<-start
				res, err := h.s.Txn(context.Background(), kv.Txn{
					If:   []kv.Cmp{kv.ModRevisionIs(key, kv.Equal, mod)},
					Then: []kv.Op{kv.Put(key, []byte(fmt.Sprintf("owner-%d-%d", round, w)), 0)},
					Else: []kv.Op{kv.Get(key)},
				})
				if err != nil {
					errs <- err
					return
				}
				if res.Succeeded {
					wins <- w
				} else if res.Results[0].KV == nil || res.Results[0].KV.ModRevision == mod {
					errs <- fmt.Errorf("worker %d lost but read the key unchanged: %+v", w, res.Results[0].KV)
				}
			})
		}
		close(start)
		if !waitGroup(&wg) {
			t.Fatalf("round %d: workers did not finish", round)
		}
		close(wins)
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		var winners []int
		for w := range wins {
			winners = append(winners, w)
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d winners %v, want exactly 1", round, len(winners), winners)
		}
		got := h.get(key)
		if want := fmt.Sprintf("owner-%d-%d", round, winners[0]); got == nil || string(got.Value) != want {
			t.Fatalf("round %d: key %+v, want the winner's value %q", round, got, want)
		}
		if got.Version != int64(round)+2 {
			t.Fatalf("round %d: version %d, want %d: a loser wrote", round, got.Version, round+2)
		}
		mod = got.ModRevision
	}
}

// testCreateOneWinner: of many concurrent create-if-missing transactions on
// one key, exactly one creates it, and its revision is the key's
// CreateRevision (the fencing token of a claim).
func testCreateOneWinner(t *testing.T, h *harness) {
	const workers = 16
	key := h.k("owner")
	var wg sync.WaitGroup
	type win struct {
		w   int
		rev int64
	}
	wins := make(chan win, workers)
	errs := make(chan error, workers)
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			res, err := h.s.Txn(context.Background(), kv.Txn{
				If:   []kv.Cmp{kv.Missing(key)},
				Then: []kv.Op{kv.Put(key, []byte(fmt.Sprint(w)), 0)},
			})
			if err != nil {
				errs <- err
			} else if res.Succeeded {
				wins <- win{w, res.Revision}
			}
		})
	}
	close(start)
	if !waitGroup(&wg) {
		t.Fatalf("workers did not finish")
	}
	close(wins)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var got []win
	for w := range wins {
		got = append(got, w)
	}
	if len(got) != 1 {
		t.Fatalf("%d winners, want 1: %v", len(got), got)
	}
	checkKV(t, "owner key", h.get(key), kv.KeyValue{Key: key, Value: []byte(fmt.Sprint(got[0].w)), CreateRevision: got[0].rev, ModRevision: got[0].rev, Version: 1})
}

func waitGroup(wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(waitTimeout):
		return false
	}
}

// testLimits: a transaction at the backend's advertised limits goes through.
func testLimits(t *testing.T, h *harness) {
	l := h.s.Limits()
	if l.MaxOps < 0 || l.MaxBytes < 0 {
		t.Fatalf("negative limits %+v", l)
	}
	n := 64
	if l.MaxOps > 0 && l.MaxOps < n {
		n = l.MaxOps
	}
	var ops []kv.Op
	for i := range n {
		ops = append(ops, kv.Put(h.k(fmt.Sprintf("%03d", i)), []byte("v"), 0))
	}
	rev := h.txn(kv.Txn{Then: ops}).Revision
	res := h.rangePrefix(0)
	if len(res.KVs) != n || res.KVs[n-1].ModRevision != rev {
		t.Fatalf("a %d-op txn: read back %d keys", n, len(res.KVs))
	}
}

func testClosed(t *testing.T, h *harness) {
	h.noClose()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id := h.grant()
	ch := h.s.Watch(ctx, h.prefix, h.rev()+1)
	if err := h.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The open watch ends.
	timeout := time.After(waitTimeout)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-timeout:
			t.Fatalf("watch still open after Close")
		}
	}
	c := context.Background()
	if _, err := h.s.Txn(c, kv.Txn{Then: []kv.Op{kv.Put(h.k("a"), nil, 0)}}); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("Txn after Close: %v, want ErrClosed", err)
	}
	if _, err := h.s.Range(c, kv.Prefix(h.prefix, 0)); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("Range after Close: %v, want ErrClosed", err)
	}
	if _, err := h.s.Grant(c, time.Minute); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("Grant after Close: %v, want ErrClosed", err)
	}
	if _, err := h.s.KeepAliveOnce(c, id); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("KeepAliveOnce after Close: %v, want ErrClosed", err)
	}
	if err := h.s.Revoke(c, id); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("Revoke after Close: %v, want ErrClosed", err)
	}
	select {
	case resp, ok := <-h.s.Watch(ctx, h.prefix, 0):
		if ok && !errors.Is(resp.Err, kv.ErrClosed) {
			t.Errorf("Watch after Close delivered %+v, want ErrClosed or a closed channel", resp)
		}
	case <-time.After(waitTimeout):
		t.Errorf("Watch after Close: channel neither closed nor failed")
	}
}
