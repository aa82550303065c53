package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// versionStores runs test on a fresh namespace of each store.
func versionStores(t *testing.T, test func(t *testing.T, store kv.Store)) {
	t.Run("localstore", func(t *testing.T) { test(t, tempLocalstore(t)) })
	t.Run("etcd", func(t *testing.T) { test(t, tempEtcdStore(t)) })
}

// versioned returns a coordinator of a build that runs at cluster version
// max at most.
func versioned(t *testing.T, store kv.Store, max int) *Coordinator {
	t.Helper()
	c, err := New(store, Config{Namespace: "cv", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c.testMaxVersion = max
	return c
}

func versionSession(t *testing.T, c *Coordinator, id string) (*Session, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.NewSession(ctx, SessionConfig{TTL: time.Minute, Worker: WorkerInfo{ID: id}})
	if err == nil {
		t.Cleanup(func() { closeVersionSession(s) })
	}
	return s, err
}

func closeVersionSession(s *Session) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.Close(ctx)
}

// TestClusterVersionGate: a namespace's cluster version is raised only
// once every registered daemon's build can run at it, and from then on a
// daemon whose build cannot is refused when it registers, with nothing
// written: no daemon ever reads a layout it does not know (ADR 0028).
func TestClusterVersionGate(t *testing.T) {
	versionStores(t, func(t *testing.T, store kv.Store) {
		ctx := context.Background()
		old, next := versioned(t, store, 1), versioned(t, store, 2)
		if v, err := next.ClusterVersionOf(ctx); err != nil || v != 1 {
			t.Fatalf("a new namespace runs at cluster version %d (%v), want 1", v, err)
		}
		if err := old.RaiseClusterVersion(ctx, 2); !errors.Is(err, ErrClusterVersion) {
			t.Fatalf("a build that runs at 1 raised the namespace to 2: %v", err)
		}
		oldSess, err := versionSession(t, old, "old")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := versionSession(t, next, "next"); err != nil {
			t.Fatal(err)
		}
		ws, err := next.Workers(ctx)
		if err != nil || len(ws) != 2 || ws[0].ClusterVersion != 2 || ws[1].ClusterVersion != 1 {
			t.Fatalf("registrations %+v (%v): want next at 2 and old at 1", ws, err)
		}
		err = next.RaiseClusterVersion(ctx, 2)
		if !errors.Is(err, ErrClusterVersion) {
			t.Fatalf("raised to 2 with a daemon of version 1 registered: %v", err)
		}
		t.Logf("refused raise: %v", err)
		if v, _ := next.ClusterVersionOf(ctx); v != 1 {
			t.Fatalf("a refused raise left the namespace at %d", v)
		}

		// The old daemon leaves; the raise goes through.
		closeVersionSession(oldSess)
		if err := next.RaiseClusterVersion(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if v, _ := old.ClusterVersionOf(ctx); v != 2 {
			t.Fatalf("after the raise the namespace runs at %d, want 2", v)
		}
		if err := next.RaiseClusterVersion(ctx, 2); err != nil {
			t.Fatalf("raising to the version in force: %v", err)
		}

		// An old build can no longer register; a new one can.
		_, err = versionSession(t, old, "old2")
		if !errors.Is(err, ErrClusterVersion) {
			t.Fatalf("a build that runs at 1 registered in a namespace at 2: %v", err)
		}
		t.Logf("refused registration: %v", err)
		rr, rerr := store.Range(ctx, kv.Prefix(old.keys.worker("old2"), 0))
		if rerr != nil || len(rr.KVs) != 0 {
			t.Fatalf("the refused registration wrote %d keys (%v)", len(rr.KVs), rerr)
		}
		if _, err := versionSession(t, next, "next2"); err != nil {
			t.Fatalf("a build that runs at 2 refused: %v", err)
		}
	})
}

// raceStore lets one registration of another daemon in just before the
// first conditional transaction it sees (the raise's).
type raceStore struct {
	kv.Store
	before func()
}

func (s *raceStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if len(t.If) > 0 && s.before != nil {
		f := s.before
		s.before = nil
		f()
	}
	return s.Store.Txn(ctx, t)
}

// TestClusterVersionRaiseLosesToARegistration: a daemon of an older build
// that registers after the raise read the registrations, but before it
// commits, makes the raise fail: otherwise that daemon would run at a
// version it does not know.
func TestClusterVersionRaiseLosesToARegistration(t *testing.T) {
	versionStores(t, func(t *testing.T, store kv.Store) {
		ctx := context.Background()
		old := versioned(t, store, 1)
		rs := &raceStore{Store: store}
		next := versioned(t, rs, 2)
		rs.before = func() {
			if _, err := versionSession(t, old, "late"); err != nil {
				t.Errorf("the late registration: %v", err)
			}
		}
		if err := next.RaiseClusterVersion(ctx, 2); !errors.Is(err, ErrConflict) {
			t.Fatalf("raise with a registration in between: %v, want ErrConflict", err)
		}
		if v, _ := next.ClusterVersionOf(ctx); v != 1 {
			t.Fatalf("the namespace runs at %d with a daemon of version 1 registered", v)
		}
		if err := next.RaiseClusterVersion(ctx, 2); !errors.Is(err, ErrClusterVersion) {
			t.Fatalf("raise again: %v, want ErrClusterVersion (the late daemon runs at 1)", err)
		}
	})
}

// TestClusterVersionRaiseSkippingAVersionRefusesOldBuilds: a raise from 1
// straight to 3 (by a build that runs at 3) refuses a daemon of a build
// that runs at 1 and was not registered at the time (its session lost,
// say): each build's gate looks for the key just above its own version,
// and a raise that wrote only 3's let it register (found in review).
func TestClusterVersionRaiseSkippingAVersionRefusesOldBuilds(t *testing.T) {
	versionStores(t, func(t *testing.T, store kv.Store) {
		ctx := context.Background()
		old, mid, newest := versioned(t, store, 1), versioned(t, store, 2), versioned(t, store, 3)
		if err := newest.RaiseClusterVersion(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if v, _ := old.ClusterVersionOf(ctx); v != 3 {
			t.Fatalf("namespace at %d, want 3", v)
		}
		for _, c := range []*Coordinator{old, mid} {
			s, err := versionSession(t, c, fmt.Sprintf("at-%d", c.maxVersion()))
			if !errors.Is(err, ErrClusterVersion) {
				t.Fatalf("a build that runs at %d registered in a namespace at 3 (session %v, err %v)", c.maxVersion(), s != nil, err)
			}
		}
		if _, err := versionSession(t, newest, "at-3"); err != nil {
			t.Fatalf("a build that runs at 3: %v", err)
		}
	})
}
