package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// FillQuota puts values of 256 KiB under "big/" through cli until etcd
// refuses one for want of room (its NOSPACE alarm, on a server started
// with a small quota, WithQuota); it fails t after 64
// of them.
func FillQuota(ctx context.Context, t testing.TB, cli *clientv3.Client) {
	t.Helper()
	val := strings.Repeat("x", 256<<10)
	for i := range 64 {
		_, err := cli.Put(ctx, fmt.Sprintf("big/%02d", i), val)
		if errors.Is(err, rpctypes.ErrNoSpace) {
			return
		}
		if err != nil {
			t.Fatalf("etcdtest: fill the backend quota: %v", err)
		}
	}
	t.Fatal("etcdtest: 16 MiB written, and etcd has not refused a write for want of room: is its QuotaBackendBytes small?")
}

// MakeRoom does what an operator does about the NOSPACE alarm after
// FillQuota: it deletes what FillQuota put, compacts, defragments the
// member at endpoint and disarms the alarm.
func MakeRoom(ctx context.Context, t testing.TB, cli *clientv3.Client, endpoint string) {
	t.Helper()
	if _, err := cli.Delete(ctx, "big/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("etcdtest: make room: delete: %v", err)
	}
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		t.Fatalf("etcdtest: make room: status: %v", err)
	}
	if _, err := cli.Compact(ctx, st.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("etcdtest: make room: compact: %v", err)
	}
	if _, err := cli.Defragment(ctx, endpoint); err != nil {
		t.Fatalf("etcdtest: make room: defragment: %v", err)
	}
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		t.Fatalf("etcdtest: make room: disarm: %v", err)
	}
}

// WithQuota sets the member's backend quota (etcd's --quota-backend-bytes)
// to n bytes: past it, etcd raises its NOSPACE alarm (see FillQuota).
func WithQuota(n int64) Option {
	return WithConfig(func(c *embed.Config) { c.QuotaBackendBytes = n })
}
