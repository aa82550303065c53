package etcdnode

import (
	"strings"
	"testing"
)

// InitialClusterState defaults to new, takes existing, and refuses
// anything else; existing needs the other members to learn the cluster
// from (etcd, alone, fails after creating the data directory).
func TestInitialClusterState(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil || c.InitialClusterState != ClusterStateNew {
		t.Fatalf("default: %q, %v; want %q", c.InitialClusterState, err, ClusterStateNew)
	}
	join := Config{Name: "b", PeerURL: "http://127.0.0.1:2", InitialCluster: "a=http://127.0.0.1:1,b=http://127.0.0.1:2", InitialClusterState: ClusterStateExisting}
	if c, err := join.withDefaults(); err != nil || c.InitialClusterState != ClusterStateExisting {
		t.Fatalf("existing: %q, %v", c.InitialClusterState, err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{InitialClusterState: "join"}, `InitialClusterState "join": want "new" or "existing"`},
		{Config{InitialClusterState: "Existing"}, `want "new" or "existing"`},
		{Config{InitialClusterState: ClusterStateExisting}, "set InitialCluster to every member"},
		{Config{Name: "b", PeerURL: "http://127.0.0.1:2", InitialCluster: "b=http://127.0.0.1:2", InitialClusterState: ClusterStateExisting}, "set InitialCluster to every member"},
	} {
		if _, err := c.cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.cfg, err, c.want)
		}
	}
}
