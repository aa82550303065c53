package etcdkv_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"golang.org/x/crypto/bcrypt"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// startAuth starts a member with auth on and a user root (password
// secret), and returns it and a client of it that logged in before auth
// was on. The cheapest bcrypt cost keeps these tests fast under -race.
func startAuth(ctx context.Context, t *testing.T) (*etcdtest.Server, *clientv3.Client) {
	t.Helper()
	srv := etcdtest.Start(t, etcdtest.WithConfig(func(c *embed.Config) { c.BcryptCost = uint(bcrypt.MinCost) }))
	admin := srv.Client(t)
	if _, err := admin.UserAdd(ctx, "root", "secret"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	return srv, admin
}

// dialRoot logs in to srv as root, and returns the client and a store on
// it; both are closed when the test ends.
func dialRoot(ctx context.Context, t *testing.T, srv *etcdtest.Server) (*clientv3.Client, *etcdkv.Store) {
	t.Helper()
	cli, err := etcdkv.Dial(ctx, etcdkv.Config{Endpoints: []string{srv.Endpoint()}, Username: "root", Password: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	s := etcdkv.New(cli, etcdkv.Options{})
	t.Cleanup(func() { _ = s.Close() })
	return cli, s
}

func TestDialAuthAndServerVersion(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	srv, _ := startAuth(ctx, t)

	_, err := etcdkv.Dial(ctx, etcdkv.Config{Endpoints: []string{srv.Endpoint()}, Username: "root", Password: "wrong"})
	if !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("Dial with a wrong password: %v, want %v", err, rpctypes.ErrAuthFailed)
	}

	_, s := dialRoot(ctx, t, srv)
	put(t, s, "auth/k", "v", 0)

	v, err := s.ServerVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v != version.Version {
		t.Fatalf("ServerVersion = %q, want %q", v, version.Version)
	}
	if bugs := etcdkv.KnownLeaseBugs(v); len(bugs) != 0 {
		t.Fatalf("known lease bugs in %s: %q", v, bugs)
	}
	_ = s.Close()
	if _, err := s.ServerVersion(ctx); !errors.Is(err, kv.ErrClosed) || !strings.Contains(err.Error(), "server version") {
		t.Fatalf("ServerVersion after Close: %v", err)
	}
}

// With etcd auth on, a lease renewal is one request: clientv3
// authenticates again (a raft round and a password hash on the server)
// for every stream it opens, so renewals must not open one each.
func TestAuthRenewalsDoNotAuthenticate(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv, _ := startAuth(ctx, t)
	cli, s := dialRoot(ctx, t, srv)
	id, err := s.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	raftIndex := func() uint64 {
		st, err := cli.Status(ctx, srv.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		return st.RaftIndex
	}
	before := raftIndex()
	const n = 20
	for range n {
		if ttl, err := s.KeepAliveOnce(ctx, id); err != nil || ttl != time.Minute {
			t.Fatalf("KeepAliveOnce: %v, %v", ttl, err)
		}
	}
	// Renewals do not go through raft; an authentication does.
	if d := raftIndex() - before; d >= n/2 {
		t.Fatalf("%d renewals advanced the raft index by %d: each authenticated again", n, d)
	}
	// A revoked lease is still reported as gone.
	if err := s.Revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeepAliveOnce(ctx, id); !errors.Is(err, kv.ErrLeaseNotFound) {
		t.Fatalf("KeepAliveOnce after Revoke: %v, want kv.ErrLeaseNotFound", err)
	}
}

// A renewal on the kept stream whose auth token is no longer valid (here:
// auth was turned off and on again, which drops every token) is made again
// on a new stream, which authenticates again, instead of failing.
func TestAuthRenewalAfterTokensDropped(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	srv, admin := startAuth(ctx, t)
	cli, s := dialRoot(ctx, t, srv)
	id, err := s.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeepAliveOnce(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthDisable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	if ttl, err := s.KeepAliveOnce(ctx, id); err != nil || ttl != time.Minute {
		t.Fatalf("renewal after the server dropped its auth tokens: %v, %v", ttl, err)
	}
}
