package etcdtest_test

import (
	"context"
	"fmt"
	"log"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/worker"
)

// A test starts a server with Start and gets a client with Client; both are
// stopped when the test ends. Outside a test (in TestMain, or here), New
// starts one and Close stops it.
func Example() {
	srv, err := etcdtest.New()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "greeting", "hello"); err != nil {
		log.Fatal(err)
	}
	resp, err := cli.Get(ctx, "greeting")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", resp.Kvs[0].Value)
	// Output: hello
}

// The usual form, in a test function.
func ExampleStart() {
	_ = func(t *testing.T) {
		srv := etcdtest.Start(t)
		cli := srv.Client(t) // closed when the test ends, before the server
		if _, err := cli.Put(context.Background(), "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
}

// A test of a program's jobs in shared mode: a queue on a server of its
// own, with a worker that maintains and reaps as a daemon's does.
func Example_queue() {
	_ = func(t *testing.T) {
		srv := etcdtest.Start(t)
		store := etcdkv.New(srv.Client(t), etcdkv.Options{})
		t.Cleanup(func() { _ = store.Close() })
		coord, err := coordinator.New(store, coordinator.Config{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(coord, worker.Config{Maintain: true, Reap: true})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("email", func(ctx context.Context, j *worker.Job) error { return nil })
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // registered after the store's: runs before it
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = w.Stop(ctx)
		})
		res, err := coord.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "email"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if j, err := coord.Wait(ctx, res.Job.ID); err != nil || j.State != coordinator.StateCompleted {
			t.Fatalf("job %v, %v", j, err)
		}
	}
}

// Crash the leader of a three-member cluster and bring it back.
func ExampleCluster_Kill() {
	_ = func(t *testing.T) {
		c := etcdtest.StartCluster(t, 3, etcdtest.WithElectionTimeout(50*time.Millisecond, 500*time.Millisecond))
		cli := c.Client(t)
		leader := c.Leader()
		c.Kill(leader)
		// ... writes fail or time out until a new leader is elected; give
		// them short deadlines and retry ...
		c.Restart(leader)
		_ = cli
	}
}

// Cut a client off from its server without resetting the connection.
func ExampleNewProxy() {
	_ = func(t *testing.T) {
		srv := etcdtest.Start(t)
		p := etcdtest.NewProxy(t, srv.Endpoint())
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.URL()}})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()

		p.Blackhole() // requests now hang until their deadline
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := cli.Get(ctx, "k"); err == nil {
			t.Fatal("expected a timeout")
		}
		p.Heal()
	}
}
