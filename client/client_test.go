package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/clienttest"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/apiserver"
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

// operator returns the suite's harness on store: an operator's
// coordinator of namespace ns, behind the clients' back.
func operator(t *testing.T, store kv.Store, ns string) clienttest.Harness {
	t.Helper()
	coord, err := coordinator.New(store, coordinator.Config{Namespace: ns, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return clienttest.Harness{SetPaused: func(ctx context.Context, q string, paused bool) error {
		if paused {
			_, _, err := coord.PauseQueue(ctx, q)
			return err
		}
		_, _, err := coord.ResumeQueue(ctx, q)
		return err
	}}
}

// openPebble opens an embedded store in a directory of the test's own,
// closed when the test ends.
func openPebble(t *testing.T) *localstore.Store {
	t.Helper()
	store, err := localstore.Open(t.TempDir(), localstore.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// directClients returns a maker of clients, each on a coordinator of its
// own over store.
func directClients(store kv.Store) func(t *testing.T, o *client.Options) *client.Client {
	return func(t *testing.T, o *client.Options) *client.Client {
		coord, err := coordinator.New(store, coordinator.Config{Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		c := client.New(coord, o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

// TestOnPebble runs the suite on a coordinator over the embedded store.
func TestOnPebble(t *testing.T) {
	store := openPebble(t)
	runEcho(t, store, "")
	clienttest.RunWith(t, directClients(store), operator(t, store, ""))
}

// TestOnHTTP runs the suite on the daemon's API served in process, where
// the harness can pause a queue (the daemon's own run of the suite, in
// cmd/leasehold, cannot).
func TestOnHTTP(t *testing.T) {
	store := openPebble(t)
	runEcho(t, store, "")
	coord, err := coordinator.New(store, coordinator.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	api := apiserver.New(apiserver.Config{Coord: coord, Kinds: map[string]apiserver.PayloadCheck{"echo": nil}, Logger: quiet()})
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.StopWaits()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := api.StopProbe(ctx); err != nil {
			t.Errorf("stop the store probe: %v", err)
		}
	})
	clienttest.RunWith(t, func(t *testing.T, o *client.Options) *client.Client {
		c, err := client.NewHTTP(srv.URL, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, operator(t, store, ""))
}

// TestOnEtcd runs the suite on etcd, dialled by the client itself.
func TestOnEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	store := etcdkv.New(srv.Client(t), etcdkv.Options{})
	t.Cleanup(func() { _ = store.Close() })
	runEcho(t, store, "clients")
	clienttest.RunWith(t, func(t *testing.T, o *client.Options) *client.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, client.EtcdConfig{Config: etcdkv.Config{Endpoints: []string{srv.Endpoint()}}, Namespace: "clients"}, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, operator(t, store, "clients"))
}

func TestNewHTTPBadServer(t *testing.T) {
	for _, s := range []string{"", "127.0.0.1:7420", "ftp://x", "http://"} {
		_, err := client.NewHTTP(s, nil)
		if !errors.Is(err, coordinator.ErrInvalid) || !strings.HasSuffix(err.Error(), "URL: pass the daemon's, e.g. http://127.0.0.1:7420") {
			t.Errorf("NewHTTP(%q): %v, want ErrInvalid saying what to pass", s, err)
		}
	}
	// A negative timeout was taken as the default.
	if c, err := client.NewHTTP("http://127.0.0.1:7420", &client.Options{HTTPTimeout: -time.Second}); !errors.Is(err, coordinator.ErrInvalid) ||
		!strings.Contains(err.Error(), "HTTPTimeout is negative: want 0 (the default, 30s) or more") {
		if c != nil {
			_ = c.Close()
		}
		t.Errorf("NewHTTP with a negative HTTPTimeout: %v, want ErrInvalid", err)
	}
}

// The suite leaves its jobs behind (finished, until retention), so a second
// run on the same daemon, as on a developer's long-lived one, must not
// count the first run's.
func TestSuiteRunsTwiceOnOneDaemon(t *testing.T) {
	store := openPebble(t)
	runEcho(t, store, "")
	newClient := directClients(store)
	// With the harness: the first run leaves a queue it paused (then
	// resumed) configured.
	h := operator(t, store, "")
	t.Run("first", func(t *testing.T) { clienttest.RunWith(t, newClient, h) })
	t.Run("second", func(t *testing.T) { clienttest.RunWith(t, newClient, h) })
}

// Insert of one job whose middleware passed on none returns an error
// instead of panicking on the missing result.
func TestInsertMiddlewareThatDropsTheJob(t *testing.T) {
	store := openPebble(t)
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

// With no daemon live (they may start later), a client on the store
// accepts any kind, as the daemon's API does in shared mode; once one is
// live, only the kinds the live daemons run.
func TestInsertKindsOfLiveDaemons(t *testing.T) {
	store := openPebble(t)
	coord, err := coordinator.New(store, coordinator.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(coord, nil)
	ctx := context.Background()
	if _, err := c.Insert(ctx, client.RawArgs{KindName: "later"}, nil); err != nil {
		t.Fatalf("no daemon live: %v", err)
	}
	runEcho(t, store, "")
	_, err = c.Insert(ctx, client.RawArgs{KindName: "later"}, nil)
	if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "unknown kind later: the live daemons run echo") {
		t.Fatalf("a daemon of echo live: %v", err)
	}
	if _, err := c.Insert(ctx, client.RawArgs{KindName: "echo"}, nil); err != nil {
		t.Fatalf("echo: %v", err)
	}
}

// Dial refuses a negative MaxPayloadBytes before it dials, naming the
// caller's field (coordinator.New would name coordinator.Config's), and
// an empty endpoint list says what to set.
func TestDialBadConfig(t *testing.T) {
	ctx := context.Background()
	_, err := client.Dial(ctx, client.EtcdConfig{Config: etcdkv.Config{Endpoints: []string{"http://127.0.0.1:1"}}, MaxPayloadBytes: -1}, nil)
	if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "client.EtcdConfig.MaxPayloadBytes is negative") {
		t.Errorf("Dial with MaxPayloadBytes -1: %v, want ErrInvalid naming client.EtcdConfig.MaxPayloadBytes", err)
	}
	_, err = client.Dial(ctx, client.EtcdConfig{}, nil)
	if err == nil || !strings.Contains(err.Error(), "set Config.Endpoints") {
		t.Errorf("Dial without endpoints: %v, want an error saying to set Config.Endpoints", err)
	}
}
