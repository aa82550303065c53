package etcdnode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// A member listening on all interfaces advertises AdvertiseClientURL and
// AdvertisePeerURL (what MemberList reports), not the 0.0.0.0 it listens
// on; a client dialing the advertised URL is served. Traffic stays on
// loopback: 127.0.0.2 is a loopback address.
func TestStartAdvertisesAdvertiseURLs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cp, pp := freePort(t), freePort(t)
	advClient, advPeer := fmt.Sprintf("http://127.0.0.2:%d", cp), fmt.Sprintf("http://127.0.0.2:%d", pp)
	n, err := Start(ctx, Config{
		Dir:       t.TempDir(),
		ClientURL: fmt.Sprintf("http://0.0.0.0:%d", cp), AdvertiseClientURL: advClient,
		PeerURL: fmt.Sprintf("http://0.0.0.0:%d", pp), AdvertisePeerURL: advPeer,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.ClientURL() != advClient || n.PeerURL() != advPeer {
		t.Errorf("ClientURL %q, PeerURL %q: want the advertised %q and %q", n.ClientURL(), n.PeerURL(), advClient, advPeer)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{advClient}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list through %s: %v", advClient, err)
	}
	if len(ml.Members) != 1 {
		t.Fatalf("%d members, want 1: %v", len(ml.Members), ml.Members)
	}
	m := ml.Members[0]
	if !slices.Equal(m.ClientURLs, []string{advClient}) || !slices.Equal(m.PeerURLs, []string{advPeer}) {
		t.Errorf("member list: client URLs %v, peer URLs %v; want [%s] and [%s]", m.ClientURLs, m.PeerURLs, advClient, advPeer)
	}
}

// Advertise URLs default to the listen URLs, and the default initial
// cluster names the advertised peer URL.
func TestAdvertiseDefaults(t *testing.T) {
	c, err := Config{ClientURL: "http://127.0.0.1:1", PeerURL: "http://127.0.0.1:2"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.AdvertiseClientURL != c.ClientURL || c.AdvertisePeerURL != c.PeerURL {
		t.Errorf("advertise URLs %q, %q; want the listen URLs %q, %q", c.AdvertiseClientURL, c.AdvertisePeerURL, c.ClientURL, c.PeerURL)
	}
	c, err = Config{PeerURL: "http://0.0.0.0:2", AdvertisePeerURL: "http://10.0.0.1:2", AdvertiseClientURL: "http://10.0.0.1:1", ClientURL: "http://0.0.0.0:1"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if want := "default=http://10.0.0.1:2"; c.InitialCluster != want {
		t.Errorf("initial cluster %q, want %q", c.InitialCluster, want)
	}
	// A lone member listening on all interfaces advertises that, as before.
	c, err = Config{ClientURL: "http://0.0.0.0:1", PeerURL: "http://0.0.0.0:2"}.withDefaults()
	if err != nil || c.AdvertiseClientURL != "http://0.0.0.0:1" {
		t.Errorf("lone member on 0.0.0.0: %v, advertises %q; want accepted, advertising its listen URL", err, c.AdvertiseClientURL)
	}
}

// An advertise URL nobody can dial, and an initial cluster whose entry
// for this member is not its advertised peer URL, are refused before etcd
// creates the data directory.
func TestAdvertiseRefusals(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"client listens on 0.0.0.0", Config{ClientURL: "http://0.0.0.0:1", InitialCluster: "default=http://127.0.0.1:2380,m2=http://127.0.0.1:2382"}, "set AdvertiseClientURL"},
		{"peer listens on ::", Config{PeerURL: "http://[::]:2", InitialCluster: "default=http://[::]:2,m2=http://127.0.0.1:3"}, "set AdvertisePeerURL"},
		{"peer listens on empty host", Config{PeerURL: "http://:2", InitialCluster: "default=http://:2,m2=http://127.0.0.1:3"}, "set AdvertisePeerURL"},
		{"advertise client 0.0.0.0", Config{AdvertiseClientURL: "http://0.0.0.0:1"}, "AdvertiseClientURL \"http://0.0.0.0:1\" is an unspecified address"},
		{"advertise peer ::", Config{AdvertisePeerURL: "http://[::]:2"}, "AdvertisePeerURL \"http://[::]:2\" is an unspecified address"},
		{"advertise peer not a URL", Config{AdvertisePeerURL: "127.0.0.1:2"}, "bad URL"},
		{"initial cluster not the advertised peer", Config{AdvertisePeerURL: "http://127.0.0.2:2", InitialCluster: "default=http://127.0.0.1:2"}, "make them the same"},
		{"initial cluster other port", Config{PeerURL: "http://127.0.0.1:2", InitialCluster: "default=http://127.0.0.1:3"}, "make them the same"},
		{"initial cluster other scheme", Config{PeerURL: "http://127.0.0.1:2", InitialCluster: "default=https://127.0.0.1:2"}, "make them the same"},
		// etcd does not resolve localhost, and compares paths.
		{"initial cluster localhost, peer an address", Config{PeerURL: "http://127.0.0.1:2", InitialCluster: "default=http://localhost:2"}, "make them the same"},
		{"peer URL with a path", Config{PeerURL: "http://127.0.0.1:2/", InitialCluster: "default=http://127.0.0.1:2"}, "make them the same"},
		{"initial cluster names member twice", Config{PeerURL: "http://127.0.0.1:2", InitialCluster: "default=http://127.0.0.1:2,default=http://127.0.0.1:2"}, "more than once"},
	}
	for _, c := range cases {
		if _, err := c.cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	// Host names other than localhost are left to etcd, which resolves
	// them before comparing; port numbers and addresses compare as etcd
	// compares them.
	for _, cfg := range []Config{
		{PeerURL: "http://127.0.0.1:2", InitialCluster: "default=http://m1.example:2"},
		{PeerURL: "http://localhost:2", InitialCluster: "default=http://localhost:2"},
		{PeerURL: "http://[::1]:2", InitialCluster: "default=http://[0:0:0:0:0:0:0:1]:2"},
		{PeerURL: "http://127.0.0.1:2", InitialCluster: "default=http://[::ffff:127.0.0.1]:02"},
	} {
		if _, err := cfg.withDefaults(); err != nil {
			t.Errorf("%+v refused: %v", cfg, err)
		}
	}
}

// Spaces around the names and URLs of the initial cluster are dropped
// before etcd reads it: etcd would keep them around a name (member " m2")
// and refuse to start member m2.
func TestInitialClusterSpacesTrimmed(t *testing.T) {
	c, err := Config{Name: "m2", PeerURL: "http://127.0.0.1:2", InitialCluster: "m1=http://127.0.0.1:1, m2 = http://127.0.0.1:2 "}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if want := "m1=http://127.0.0.1:1,m2=http://127.0.0.1:2"; c.InitialCluster != want {
		t.Errorf("initial cluster %q, want %q", c.InitialCluster, want)
	}
}
