package etcdkv_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/server/v3/embed"
	"golang.org/x/crypto/bcrypt"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

func TestDialAuthAndServerVersion(t *testing.T) {
	// The cheapest bcrypt cost keeps this test fast under -race.
	srv := etcdtest.Start(t, etcdtest.WithConfig(func(c *embed.Config) { c.BcryptCost = uint(bcrypt.MinCost) }))
	admin := srv.Client(t)
	ctx := ctxT(t, 20*time.Second)
	if _, err := admin.UserAdd(ctx, "root", "secret"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}

	_, err := etcdkv.Dial(ctx, etcdkv.Config{Endpoints: []string{srv.Endpoint()}, Username: "root", Password: "wrong"})
	if !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("Dial with a wrong password: %v, want %v", err, rpctypes.ErrAuthFailed)
	}

	cli, err := etcdkv.Dial(ctx, etcdkv.Config{Endpoints: []string{srv.Endpoint()}, Username: "root", Password: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	s := etcdkv.New(cli, etcdkv.Options{})
	t.Cleanup(func() { _ = s.Close() })
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
