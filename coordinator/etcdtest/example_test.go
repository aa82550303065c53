package etcdtest_test

import (
	"context"
	"fmt"
	"log"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/coordinator/etcdtest"
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
