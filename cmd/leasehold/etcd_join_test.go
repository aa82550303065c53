package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestEtcdJoinsExistingCluster: a member added to a running cluster
// (MemberAdd, what etcdctl member add does) and started with
// --initial-cluster-state existing joins it: the cluster lists it under
// its name, and a key put through the first member is read through the
// new one. `leasehold etcd` used to start every member as of a new
// cluster, which a running one refuses (its members ignore the newcomer's
// messages: another cluster ID).
func TestEtcdJoinsExistingCluster(t *testing.T) {
	var aClient, aPeer string
	startEtcdMember(t, func() []string {
		aClient, aPeer = "http://"+closedPort(t), "http://"+closedPort(t)
		return []string{"--name", "a", "--listen-client", aClient, "--listen-peer", aPeer}
	})
	ctx, cancel := context.WithTimeout(context.Background(), spWait)
	defer cancel()
	cliA, err := clientv3.New(clientv3.Config{Endpoints: []string{aClient}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cliA.Close()

	bPeer, bDir := "http://"+closedPort(t), filepath.Join(t.TempDir(), "etcd-b")
	bArgs := []string{"--name", "b", "--listen-peer", bPeer, "--initial-cluster-state", "existing", "--initial-cluster", "a=" + aPeer + ",b=" + bPeer}
	// Before the member add, the cluster refuses it: one line that says
	// to add it. The data directory etcd leaves does not stop the retry.
	r := runCLI(t, nil, "", append([]string{"etcd", "--data", bDir, "--listen-client", "http://" + closedPort(t)}, bArgs...)...)
	checkOneLineError(t, "join before member add", r, exitFailure, "check that the cluster has this member (etcdctl member add b --peer-urls="+bPeer+")")

	if _, err := cliA.MemberAdd(ctx, []string{bPeer}); err != nil {
		t.Fatalf("member add %s: %v", bPeer, err)
	}
	var bClient string
	p := startEtcdMemberIn(t, bDir, func() []string {
		bClient = "http://" + closedPort(t)
		return append([]string{"--listen-client", bClient}, bArgs...)
	})
	if l, _ := p.waitLog(t, 0, "serving line", func(l spLine) bool { return l.Msg == "etcd member serving" }); l.str("client_url") != bClient {
		t.Errorf("serving line: client_url %q, want %q: %s", l.str("client_url"), bClient, l.Raw)
	}

	ml, err := cliA.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list: %v", err)
	}
	var names []string
	for _, m := range ml.Members {
		names = append(names, m.Name)
		if m.Name == "b" && (!slices.Equal(m.PeerURLs, []string{bPeer}) || !slices.Equal(m.ClientURLs, []string{bClient})) {
			t.Errorf("member b: peer URLs %v, client URLs %v; want [%s] and [%s]", m.PeerURLs, m.ClientURLs, bPeer, bClient)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("members %q, want a and b, both started (a member added but not started has no name)", names)
	}

	if _, err := cliA.Put(ctx, "joined", "yes"); err != nil {
		t.Fatalf("put through a: %v", err)
	}
	cliB, err := clientv3.New(clientv3.Config{Endpoints: []string{bClient}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cliB.Close()
	resp, err := cliB.Get(ctx, "joined")
	if err != nil {
		t.Fatalf("get through b: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "yes" {
		t.Fatalf("get through b: %v, want joined=yes", resp.Kvs)
	}
}

// A bad --initial-cluster-state, and existing without the cluster to
// join, are usage errors before anything is written: etcd refuses the
// latter only after it has created the data directory.
func TestEtcdInitialClusterStateRefusedBeforeWriting(t *testing.T) {
	peer := "http://" + closedPort(t)
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"unknown state", nil, []string{"--initial-cluster-state", "join"},
			"--initial-cluster-state \"join\": want new (start a new cluster) or existing (join a running one, after etcdctl member add)"},
		{"unknown state from the environment", []string{"LEASEHOLD_INITIAL_CLUSTER_STATE=Existing"}, nil,
			"LEASEHOLD_INITIAL_CLUSTER_STATE \"Existing\": want new"},
		{"existing without an initial cluster", nil, []string{"--initial-cluster-state", "existing"},
			"--initial-cluster-state existing joins a running cluster: pass --initial-cluster with every member, this one included"},
		{"existing alone in its initial cluster", []string{"LEASEHOLD_INITIAL_CLUSTER_STATE=existing"}, []string{"--initial-cluster", "default=" + peer},
			"LEASEHOLD_INITIAL_CLUSTER_STATE existing joins a running cluster: pass --initial-cluster"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "etcd")
			args := append([]string{"etcd", "--data", dir, "--listen-client", "http://" + closedPort(t), "--listen-peer", peer}, c.args...)
			r := runCLI(t, c.env, "", args...)
			checkOneLineError(t, c.name, r, exitUsage, c.want)
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("data directory %s was created (stat: %v)", dir, err)
			}
		})
	}
}
