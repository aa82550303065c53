package client_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/clienttest"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// runEcho starts a worker on store that runs "echo" (result: the payload).
func runEcho(t *testing.T, store kv.Store, ns string) {
	t.Helper()
	coord, err := coordinator.New(store, coordinator.Config{Namespace: ns, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(coord, worker.Config{Maintain: true, LeaseTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("echo", func(ctx context.Context, j *worker.Job) error { return j.SetResult(j.Payload) })
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
}

// TestOnPebble runs the suite on a coordinator over the embedded store.
func TestOnPebble(t *testing.T) {
	store, err := localstore.Open(t.TempDir(), localstore.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	runEcho(t, store, "")
	clienttest.Run(t, func(t *testing.T, o *client.Options) *client.Client {
		coord, err := coordinator.New(store, coordinator.Config{Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		c := client.New(coord, o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	})
}

// TestOnEtcd runs the suite on etcd, dialled by the client itself.
func TestOnEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	store := etcdkv.New(srv.Client(t), etcdkv.Options{})
	t.Cleanup(func() { _ = store.Close() })
	runEcho(t, store, "clients")
	clienttest.Run(t, func(t *testing.T, o *client.Options) *client.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, client.EtcdConfig{Config: etcdkv.Config{Endpoints: []string{srv.Endpoint()}}, Namespace: "clients"}, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	})
}

func TestNewHTTPBadServer(t *testing.T) {
	for _, s := range []string{"", "127.0.0.1:7420", "ftp://x", "http://"} {
		if _, err := client.NewHTTP(s, nil); err == nil {
			t.Errorf("NewHTTP(%q) accepted", s)
		}
	}
}

// The suite leaves its jobs behind (finished, until retention), so a second
// run on the same daemon, as on a developer's long-lived one, must not
// count the first run's.
func TestSuiteRunsTwiceOnOneDaemon(t *testing.T) {
	store, err := localstore.Open(t.TempDir(), localstore.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	runEcho(t, store, "")
	newClient := func(t *testing.T, o *client.Options) *client.Client {
		coord, err := coordinator.New(store, coordinator.Config{Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		c := client.New(coord, o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	t.Run("first", func(t *testing.T) { clienttest.Run(t, newClient) })
	t.Run("second", func(t *testing.T) { clienttest.Run(t, newClient) })
}

// Insert of one job whose middleware passed on none returns an error
// instead of panicking on the missing result.
func TestInsertMiddlewareThatDropsTheJob(t *testing.T) {
	store, err := localstore.Open(t.TempDir(), localstore.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	coord, err := coordinator.New(store, coordinator.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	drop := func(next client.InsertFunc) client.InsertFunc {
		return func(ctx context.Context, ps []coordinator.EnqueueParams) ([]client.InsertResult, error) {
			return next(ctx, nil)
		}
	}
	c := client.New(coord, &client.Options{InsertMiddleware: []client.InsertMiddleware{drop}})
	t.Cleanup(func() { _ = c.Close() })
	res, err := c.Insert(context.Background(), clienttest.Echo{Msg: "dropped"}, nil)
	if err == nil {
		t.Fatalf("Insert = %+v, want an error", res)
	}
}
