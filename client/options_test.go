package client_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
)

// A daemon serving HTTPS with a private certificate is reached with an
// HTTP client that trusts it; Close leaves that client's connections to
// its owner.
func TestHTTPClientOption(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"job":{"id":"01JF00000000000000000000AA","kind":"echo","state":"completed"}}`))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	plain, err := client.NewHTTP(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Get(ctx, "01JF00000000000000000000AA"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("private certificate without a trusting client: %v, want a certificate error", err)
	}

	c, err := client.NewHTTP(srv.URL, &client.Options{HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Get(ctx, "01JF00000000000000000000AA")
	if err != nil || j.State != coordinator.StateCompleted {
		t.Fatalf("Get with a trusting client: %+v %v", j, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// A server started with a larger --max-request-bytes takes larger jobs
// from a client told so.
func TestDialLimits(t *testing.T) {
	const limit = 8 << 20
	srv := etcdtest.Start(t, etcdtest.WithConfig(func(c *embed.Config) { c.MaxRequestBytes = limit }))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	big := client.RawArgs{KindName: "echo", Payload: []byte(`"` + strings.Repeat("x", 900<<10) + `"`)}

	dflt, err := client.Dial(ctx, client.EtcdConfig{Config: etcdkv.Config{Endpoints: []string{srv.Endpoint()}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dflt.Close()
	if _, err := dflt.Insert(ctx, big, nil); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("900 KiB payload under etcd's default limit: %v, want ErrInvalid", err)
	}

	c, err := client.Dial(ctx, client.EtcdConfig{
		Config: etcdkv.Config{Endpoints: []string{srv.Endpoint()}},
		Limits: etcdkv.Options{MaxRequestBytes: limit},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Insert(ctx, big, nil)
	if err != nil {
		t.Fatalf("900 KiB payload under an 8 MiB limit: %v", err)
	}
	j, err := c.Get(ctx, res.Job.ID)
	if err != nil || len(j.Payload) != len(big.Payload) {
		t.Fatalf("Get: %d bytes, %v", len(j.Payload), err)
	}
}
