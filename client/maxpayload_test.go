package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
)

// Daemons that run with a raised --max-payload take payloads over the
// default (1 MiB); a client given the same EtcdConfig.MaxPayloadBytes
// takes them too, and one over what the store fits is refused at Dial.
func TestDialMaxPayloadBytes(t *testing.T) {
	const limit = 8 << 20
	srv := etcdtest.Start(t, etcdtest.WithConfig(func(c *embed.Config) { c.MaxRequestBytes = limit }))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := client.EtcdConfig{
		Config: etcdkv.Config{Endpoints: []string{srv.Endpoint()}},
		Limits: etcdkv.Options{MaxRequestBytes: limit},
	}
	big := client.RawArgs{KindName: "echo", Payload: []byte(`"` + strings.Repeat("x", 1536<<10) + `"`)}

	dflt, err := client.Dial(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dflt.Close()
	if _, err := dflt.Insert(ctx, big, nil); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("1.5 MiB payload under the default payload limit: %v, want ErrInvalid", err)
	}

	raised := cfg
	raised.MaxPayloadBytes = 2 << 20
	c, err := client.Dial(ctx, raised, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Insert(ctx, big, nil)
	if err != nil {
		t.Fatalf("1.5 MiB payload with MaxPayloadBytes 2 MiB: %v", err)
	}
	if j, err := c.Get(ctx, res.Job.ID); err != nil || len(j.Payload) != len(big.Payload) {
		t.Fatalf("Get: %v", err)
	}

	tooBig := cfg
	tooBig.MaxPayloadBytes = limit
	if c, err := client.Dial(ctx, tooBig, nil); !errors.Is(err, coordinator.ErrInvalid) {
		if c != nil {
			_ = c.Close()
		}
		t.Fatalf("MaxPayloadBytes over what the store fits: %v, want ErrInvalid", err)
	}
}
