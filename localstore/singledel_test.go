package localstore

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// TestSingleDeleteNeverResurrects: keys put once and then deleted are
// deleted with Pebble's SingleDelete, which is wrong for a key set twice
// (an older value would come back after compaction). Random puts (some
// keys once, some several times, some on leases), deletes and lease
// revocations, with flushes, full compactions and a reopen in between,
// must read exactly as a model says, and Pebble must report no misuse.
func TestSingleDeleteNeverResurrects(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	model := map[string]string{}
	leased := map[kv.LeaseID][]string{}
	keyLease := map[string]kv.LeaseID{}
	var lease kv.LeaseID
	newLease := func() {
		id, err := s.Grant(ctxT(t), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		lease = id
	}
	newLease()
	check := func(when string) {
		t.Helper()
		for i := range 40 {
			k := "k" + strconv.Itoa(i)
			got := mustGetOrNil(t, s, k)
			want, ok := model[k]
			switch {
			case ok && got == nil:
				t.Fatalf("%s: %s missing, want %q", when, k, want)
			case !ok && got != nil:
				t.Fatalf("%s: %s = %q came back after its delete", when, k, got.Value)
			case ok && string(got.Value) != want:
				t.Fatalf("%s: %s = %q, want %q", when, k, got.Value, want)
			}
		}
	}
	for round := range 30 {
		for op := range 60 {
			k := "k" + strconv.Itoa(rng.IntN(40))
			v := strconv.Itoa(round*1000 + op)
			switch r := rng.IntN(10); {
			case r < 5:
				var l kv.LeaseID
				if rng.IntN(3) == 0 {
					l = lease
					leased[l] = append(leased[l], k)
				}
				mustTxn(t, s, kv.Txn{Then: []kv.Op{kv.Put(k, []byte(v), l)}})
				model[k], keyLease[k] = v, l
			case r < 9:
				mustTxn(t, s, kv.Txn{Then: []kv.Op{kv.Delete(k)}})
				delete(model, k)
				delete(keyLease, k)
			default:
				if err := s.Revoke(ctxT(t), lease); err != nil {
					t.Fatal(err)
				}
				for _, k := range leased[lease] {
					if keyLease[k] == lease {
						delete(model, k)
						delete(keyLease, k)
					}
				}
				newLease()
			}
		}
		switch round % 3 {
		case 0:
			if err := s.db.Flush(); err != nil {
				t.Fatal(err)
			}
		case 1:
			if err := s.db.Compact(ctxT(t), []byte{0}, []byte{0xff}, true); err != nil {
				t.Fatal(err)
			}
		}
		check("round " + strconv.Itoa(round))
	}
	if err := s.db.Compact(ctxT(t), []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	check("after a full compaction")
	if n := s.misuse.Load(); n != 0 {
		t.Fatalf("Pebble reported %d misused single deletes", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// At reopen the leased keys are gone.
	for k, l := range keyLease {
		if l != 0 {
			delete(model, k)
		}
	}
	s = openDir(t, dir, Options{})
	if err := s.db.Compact(ctxT(t), []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	check("after reopening")
	if n := s.misuse.Load(); n != 0 {
		t.Fatalf("Pebble reported %d misused single deletes", n)
	}
}

// TestSingleDeleteMisuseIsReported: the check above can fail. A key set
// twice and then single-deleted makes a compaction report a misuse.
func TestSingleDeleteMisuseIsReported(t *testing.T) {
	s := openTemp(t, Options{})
	for _, v := range []string{"a", "b"} {
		if err := s.db.Set([]byte("x"), []byte(v), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.SingleDelete([]byte("x"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if s.misuse.Load() == 0 {
		t.Fatal("no misuse reported for a key set twice and single-deleted")
	}
}

// TestSweepAtOpenNeverResurrects: the sweep at Open of the keys of a dead
// process's leases deletes them with a plain Delete (ADR 0010), since a
// leased key may have been put more than once on its lease (a registration
// renewed, a slot rewritten). Here one was put twice, with a flush in
// between so that both Sets are on disk in different tables; after the
// sweep and a full compaction it must stay gone. The test at the end of
// TestSingleDeleteNeverResurrects cannot show this: it compacts before
// reopening, which leaves one Set of every key. Fails if the sweep
// single-deletes.
func TestSweepAtOpenNeverResurrects(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: discardLogger})
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Grant(ctxT(t), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "owned", "first", id)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if v := mustGet(t, s, "owned"); v == nil || v.Version != 1 {
		t.Fatalf("owned after the first put: %+v", v)
	}
	mustPut(t, s, "owned", "second", id)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	// The process ends without revoking its lease: the next Open sweeps.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir, Options{})
	if n := s.RecoveredLeasedKeys(); n != 1 {
		t.Fatalf("RecoveredLeasedKeys = %d, want 1", n)
	}
	if err := s.db.Compact(ctxT(t), []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "owned"); got != nil {
		t.Fatalf("owned = %q (version %d) came back after the sweep at open", got.Value, got.Version)
	}
	if n := s.misuse.Load(); n != 0 {
		t.Fatalf("Pebble reported %d misused single deletes", n)
	}
}
