package coordinator

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// TestSpreadOrderPartitionsByRendezvous: with peers known, every job is
// preferred by exactly one of them, each spread claim puts its own jobs
// first and in queue order, and the rest follow.
func TestSpreadOrderPartitionsByRendezvous(t *testing.T) {
	peers := []string{"a", "b", "c", "d"}
	var cands []kv.KeyValue
	for i := range 400 {
		cands = append(cands, kv.KeyValue{Key: fmt.Sprintf("/leasehold/ns/q/default/1/%020d/job%03d", i, i)})
	}
	owner := map[string]string{}
	for _, x := range cands {
		owner[x.Key] = rendezvous(idFromIndex(x.Key), peers)
	}
	count := map[string]int{}
	for _, p := range peers {
		sess := &Session{cfg: SessionConfig{Worker: WorkerInfo{ID: p}}}
		sess.SetPeers(peers)
		order := append([]kv.KeyValue(nil), cands...)
		spreadOrder(order, sess)
		if len(order) != len(cands) {
			t.Fatalf("%s: %d candidates after ordering, want %d", p, len(order), len(cands))
		}
		mine := 0
		for mine < len(order) && owner[order[mine].Key] == p {
			if mine > 0 && order[mine].Key < order[mine-1].Key {
				t.Fatalf("%s: its own jobs are not in queue order", p)
			}
			mine++
		}
		for _, x := range order[mine:] {
			if owner[x.Key] == p {
				t.Fatalf("%s: one of its jobs, %s, comes after others'", p, x.Key)
			}
		}
		count[p] = mine
	}
	total := 0
	for _, p := range peers {
		total += count[p]
		if count[p] < 50 {
			t.Errorf("peer %s prefers only %d of 400 jobs", p, count[p])
		}
	}
	if total != len(cands) {
		t.Errorf("peers prefer %d jobs in all, want each of the %d exactly once", total, len(cands))
	}
	// Without peers (or when the session is not among them), at random.
	sess := &Session{cfg: SessionConfig{Worker: WorkerInfo{ID: "z"}}}
	sess.SetPeers(peers)
	order := append([]kv.KeyValue(nil), cands...)
	spreadOrder(order, sess)
	if len(order) != len(cands) {
		t.Fatalf("random order lost candidates")
	}
}
