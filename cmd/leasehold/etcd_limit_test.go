package main

import (
	"strings"
	"testing"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/leasehold/leasehold/coordinator/etcdtest"
)

// On etcd servers started with a larger --max-request-bytes,
// --etcd-max-request-bytes lets jobs grow with it; without it the default
// payload limit is what fits etcd's default 1.5 MiB request twice.
func TestEtcdMaxRequestBytesRaisesThePayloadLimit(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithConfig(func(c *embed.Config) { c.MaxRequestBytes = 4 << 20 }))
	ep := strings.Join(srv.Endpoints(), ",")
	payload := `"` + strings.Repeat("x", 900<<10) + `"` // over 664 KiB
	r := runCLI(t, nil, payload, "enqueue", "echo", "-", "--etcd", ep)
	checkOneLineError(t, "900 KiB payload on etcd's default limit", r, 2, "payload")
	r = runCLI(t, nil, payload, "enqueue", "echo", "-", "--etcd", ep, "--etcd-max-request-bytes", "4MiB")
	if r.code != 0 || len(strings.TrimSpace(r.stdout)) != 26 {
		t.Fatalf("900 KiB payload with --etcd-max-request-bytes 4MiB: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, "", "enqueue", "echo", "--etcd", ep, "--etcd-max-request-bytes", "1KiB")
	checkOneLineError(t, "a tiny --etcd-max-request-bytes", r, 2, "--etcd-max-request-bytes")
}
