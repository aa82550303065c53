package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestEtcdAdvertisesAdvertiseURLs: a member listening on all interfaces
// with --advertise-client and --advertise-peer on another loopback address
// gives clients those URLs (MemberList, what `etcdctl member list` shows),
// and a client dialing the advertised client URL is served. It used to
// advertise the URLs it listened on, 0.0.0.0, which nobody can dial.
func TestEtcdAdvertisesAdvertiseURLs(t *testing.T) {
	var advClient, advPeer string
	p := startEtcdMember(t, func() []string {
		_, cport, _ := net.SplitHostPort(closedPort(t))
		_, pport, _ := net.SplitHostPort(closedPort(t))
		advClient, advPeer = "http://127.0.0.2:"+cport, "http://127.0.0.2:"+pport
		return []string{"--listen-client", "http://0.0.0.0:" + cport, "--advertise-client", advClient,
			"--listen-peer", "http://0.0.0.0:" + pport, "--advertise-peer", advPeer}
	})
	l, _ := p.waitLog(t, 0, "serving line", func(l spLine) bool { return l.Msg == "etcd member serving" })
	if got := l.str("client_url"); got != advClient {
		t.Errorf("serving line: client_url %q, want the advertised %q: %s", got, advClient, l.Raw)
	}

	ctx, cancel := context.WithTimeout(context.Background(), spWait)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{advClient}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put through the advertised client URL %s: %v", advClient, err)
	}
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list: %v", err)
	}
	if len(ml.Members) != 1 {
		t.Fatalf("%d members, want 1: %v", len(ml.Members), ml.Members)
	}
	m := ml.Members[0]
	if !slices.Equal(m.ClientURLs, []string{advClient}) || !slices.Equal(m.PeerURLs, []string{advPeer}) {
		t.Errorf("member list: client URLs %v, peer URLs %v; want [%s] and [%s]", m.ClientURLs, m.PeerURLs, advClient, advPeer)
	}
}

// TestEtcdAdvertiseFlagsRefusedBeforeWriting: an advertise URL nobody can
// dial, a listen URL on all interfaces without one, or an --initial-cluster
// whose entry for this member is not the peer URL it advertises (etcd
// requires that) is bad input: one line saying what to do, exit 2, and no
// data directory. The listen URLs are a taken port, so that a member that
// passes validation fails to start (exit 1) instead of serving.
func TestEtcdAdvertiseFlagsRefusedBeforeWriting(t *testing.T) {
	port, taken := takenPort(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"client listens on 0.0.0.0", []string{"--listen-client", "http://0.0.0.0:" + port, "--initial-cluster", "default=" + taken + ",m2=http://127.0.0.1:2390"},
			"--listen-client \"http://0.0.0.0:" + port + "\" listens on all interfaces and would be advertised as is, which nobody can dial: pass --advertise-client with a routable URL"},
		{"peer listens on ::", []string{"--listen-peer", "http://[::]:" + port, "--initial-cluster", "default=http://[::]:" + port + ",m2=http://127.0.0.1:2390"},
			"pass --advertise-peer with a routable URL"},
		{"advertise client 0.0.0.0", []string{"--advertise-client", "http://0.0.0.0:" + port},
			"--advertise-client \"http://0.0.0.0:" + port + "\" is an unspecified address that nobody can dial: pass a routable one"},
		{"advertise peer ::", []string{"--advertise-peer", "http://[::]:" + port},
			"--advertise-peer \"http://[::]:" + port + "\" is an unspecified address"},
		{"advertise client not a URL", []string{"--advertise-client", "foo"},
			"--advertise-client \"foo\": want a URL"},
		{"advertise peer without a port", []string{"--advertise-peer", "http://127.0.0.2"},
			"--advertise-peer \"http://127.0.0.2\": want a URL"},
		{"initial cluster is not the listened peer URL", []string{"--initial-cluster", "default=http://127.0.0.2:" + port},
			"--initial-cluster has default=http://127.0.0.2:" + port + " but this member advertises peer URL " + taken + " (--listen-peer): make them the same"},
		{"initial cluster is not the advertised peer URL", []string{"--advertise-peer", "http://127.0.0.2:" + port, "--initial-cluster", "default=" + taken},
			"but this member advertises peer URL http://127.0.0.2:" + port + " (--advertise-peer): make them the same"},
		{"initial cluster names this member twice", []string{"--initial-cluster", "default=" + taken + ",default=" + taken},
			"names this member \"default\" more than once"},
		{"initial cluster member on 0.0.0.0", []string{"--initial-cluster", "default=" + taken + ",m2=http://0.0.0.0:2380"},
			"--initial-cluster member m2 \"http://0.0.0.0:2380\" is an unspecified address"},
		{"two members with one peer URL", []string{"--initial-cluster", "default=" + taken + ",m2=http://127.0.0.1:2390,m3=http://127.0.0.1:2390"},
			"--initial-cluster gives members m2 and m3 the same peer URL http://127.0.0.1:2390: give each member its own"},
		// etcd does not resolve localhost: it never equals an address.
		{"initial cluster is localhost, peer URL an address", []string{"--initial-cluster", "default=http://localhost:" + port},
			"--initial-cluster has default=http://localhost:" + port + " but this member advertises peer URL " + taken + " (--listen-peer): make them the same"},
		// etcd compares paths, and takes none in the initial cluster.
		{"advertise peer with a path", []string{"--advertise-peer", "http://127.0.0.2:" + port + "/", "--initial-cluster", "default=http://127.0.0.2:" + port},
			"--advertise-peer \"http://127.0.0.2:" + port + "/\" has a path, which etcd refuses in a peer URL: drop the trailing /"},
		{"initial cluster entry with a path", []string{"--initial-cluster", "default=" + taken + "/"},
			"--initial-cluster member default \"" + taken + "/\" has a path, which etcd refuses in a peer URL: drop the trailing /"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "etcd")
			args := append([]string{"etcd", "--data", dir, "--listen-client", taken, "--listen-peer", taken}, c.args...)
			r := runCLI(t, nil, "", args...)
			checkOneLineError(t, c.name, r, exitUsage, c.want)
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("data directory %s was created (stat: %v)", dir, err)
			}
		})
	}
}

// The advertise flags are optional: without them a member on a loopback
// address still passes validation (and advertises what it listens on, as
// before), here up to the taken port it cannot listen on.
func TestEtcdWithoutAdvertiseFlagsPassesValidation(t *testing.T) {
	_, taken := takenPort(t)
	_, takenClient := takenPort(t)
	r := runCLI(t, nil, "", "etcd", "--data", filepath.Join(t.TempDir(), "etcd"), "--listen-client", takenClient, "--listen-peer", taken,
		"--initial-cluster", "default="+taken)
	if r.code != exitFailure || !strings.Contains(r.stderr, "address already in use") {
		t.Fatalf("exit %d, want %d from etcd failing on the taken port; stderr:\n%s", r.code, exitFailure, r.stderr)
	}
	// A lone member listening on all interfaces is accepted as before (it
	// advertises that; no other member dials it).
	_, cport, _ := net.SplitHostPort(closedPort(t))
	r = runCLI(t, nil, "", "etcd", "--data", filepath.Join(t.TempDir(), "etcd"), "--listen-client", "http://0.0.0.0:"+cport, "--listen-peer", taken)
	if r.code != exitFailure || !strings.Contains(r.stderr, "address already in use") {
		t.Fatalf("a lone member on 0.0.0.0: exit %d, want %d from etcd failing on the taken port; stderr:\n%s", r.code, exitFailure, r.stderr)
	}
}

// TestEtcdPeerURLsThatEtcdAcceptsPassValidation: peer URLs that etcd
// takes as equal, and a lone member that names itself on 0.0.0.0 (as it
// does without --initial-cluster), pass validation: here up to the taken
// port they cannot listen on (exit 1, not a usage error).
func TestEtcdPeerURLsThatEtcdAcceptsPassValidation(t *testing.T) {
	port, taken := takenPort(t)
	_, takenClient := takenPort(t)
	cases := []struct {
		name string
		args []string
	}{
		{"lone member naming itself on 0.0.0.0", []string{"--listen-peer", "http://0.0.0.0:" + port, "--initial-cluster", "default=http://0.0.0.0:" + port}},
		{"port with a leading zero", []string{"--listen-peer", taken, "--initial-cluster", "default=http://127.0.0.1:0" + port}},
		{"IPv4-mapped IPv6 address", []string{"--listen-peer", taken, "--initial-cluster", "default=http://[::ffff:127.0.0.1]:" + port}},
		// Spaces around names and URLs are dropped: etcd would name the
		// member " m2" and refuse to start m2.
		{"spaces around names and URLs", []string{"--name", "m2", "--listen-peer", taken, "--initial-cluster", "m1 = http://127.0.0.1:2390 , m2 = " + taken}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"etcd", "--data", filepath.Join(t.TempDir(), "etcd"), "--listen-client", takenClient}, c.args...)
			r := runCLI(t, nil, "", args...)
			if r.code != exitFailure || !strings.Contains(r.stderr, "address already in use") {
				t.Fatalf("exit %d, want %d from etcd failing on the taken port; stderr:\n%s", r.code, exitFailure, r.stderr)
			}
		})
	}
}

// TestEtcdAdvertiseRefusalsNameTheVariable: a refusal about a flag that a
// LEASEHOLD_* variable set names the variable, as other commands' errors
// do (flagLabel), and suggests a URL of the same scheme. It used to name
// --listen-client, which the user had not passed.
func TestEtcdAdvertiseRefusalsNameTheVariable(t *testing.T) {
	peer := "http://" + closedPort(t)
	r := runCLI(t, []string{"LEASEHOLD_LISTEN_CLIENT=https://0.0.0.0:2379", "LEASEHOLD_INITIAL_CLUSTER=default=" + peer + ",m2=http://127.0.0.1:2390"}, "",
		"etcd", "--data", filepath.Join(t.TempDir(), "etcd"), "--listen-peer", peer)
	checkOneLineError(t, "listen client from the environment", r, exitUsage,
		"LEASEHOLD_LISTEN_CLIENT \"https://0.0.0.0:2379\" listens on all interfaces and would be advertised as is, which nobody can dial: pass --advertise-client with a routable URL, such as https://10.0.0.1:2379")
	r = runCLI(t, []string{"LEASEHOLD_INITIAL_CLUSTER=default=http://127.0.0.2:2380"}, "",
		"etcd", "--data", filepath.Join(t.TempDir(), "etcd"), "--listen-peer", peer)
	checkOneLineError(t, "initial cluster from the environment", r, exitUsage,
		"LEASEHOLD_INITIAL_CLUSTER has default=http://127.0.0.2:2380 but this member advertises peer URL "+peer+" (--listen-peer): make them the same")
}
