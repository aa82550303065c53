package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// --max-request-bytes and --quota-backend-bytes reach the member: a 2 MiB
// put, over etcd's default request limit, is taken, and a few of them fill
// a 16 MiB backend quota, past which the member refuses writes (NOSPACE),
// where etcd's default 2 GiB would take a thousand.
func TestEtcdRequestAndQuotaFlags(t *testing.T) {
	var client string
	p := startEtcdMember(t, func() []string {
		client = "http://" + closedPort(t)
		return []string{"--listen-client", client, "--listen-peer", "http://" + closedPort(t),
			"--max-request-bytes", "4MiB", "--quota-backend-bytes", "16MiB"}
	})
	defer p.stop(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 10 * time.Second,
		MaxCallSendMsgSize: 8 << 20, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	val := strings.Repeat("x", 2<<20)
	for i := range 40 {
		_, err := cli.Put(ctx, fmt.Sprintf("big/%02d", i), val)
		switch {
		case err == nil:
			continue
		case i == 0:
			t.Fatalf("a 2 MiB put with --max-request-bytes 4MiB: %v", err)
		case errors.Is(err, rpctypes.ErrNoSpace):
			return
		default:
			t.Fatalf("put %d of 2 MiB: %v, want success or %v", i, err, rpctypes.ErrNoSpace)
		}
	}
	t.Fatalf("80 MiB written under --quota-backend-bytes 16MiB, and no %v", rpctypes.ErrNoSpace)
}

// A --max-request-bytes that daemons could not fit a job in, or past what
// etcd advises, is refused before anything is written; a bad size is too.
func TestEtcdSizeFlagsRefusedBeforeWriting(t *testing.T) {
	_, taken := takenPort(t)
	for _, c := range []struct{ name, flag, value, want string }{
		{"request limit too small", "--max-request-bytes", "1KiB", "--max-request-bytes 1KiB: want 256KiB to 64MiB (etcd's default is 1.5MiB)"},
		{"request limit too large", "--max-request-bytes", "1GiB", "--max-request-bytes 1024MiB: want 256KiB to 64MiB"},
		{"quota not a size", "--quota-backend-bytes", "lots", "not a size: use e.g. 1MiB, 256KiB or a number of bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "etcd")
			r := runCLI(t, nil, "", "etcd", "--data", dir, "--listen-client", taken, "--listen-peer", taken, c.flag, c.value)
			checkOneLineError(t, c.name, r, exitUsage, c.want)
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("data directory %s was created (stat: %v)", dir, err)
			}
		})
	}
}
