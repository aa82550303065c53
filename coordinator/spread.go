package coordinator

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// SetPeers tells the session which daemons share its queues: their worker
// ids, its own included (see Coordinator.PeerIDs). Spread claims then
// prefer the jobs that rendezvous hashing gives to this daemon among them,
// so that daemons reading the same head of a queue mostly try different
// jobs; with no peers set they pick at random.
func (s *Session) SetPeers(ids []string) {
	ids = slices.Clone(ids)
	s.peers.Store(&ids)
}

// PeerIDs lists the worker ids of the live daemons (registrations under a
// live session lease), reading keys only.
func (c *Coordinator) PeerIDs(ctx context.Context) ([]string, error) {
	var ids []string
	if err := c.scan(ctx, c.keys.workers(), true, func(x kv.KeyValue) error {
		ids = append(ids, strings.TrimPrefix(x.Key, c.keys.workers()))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("coordinator: list workers: %w", err)
	}
	return ids, nil
}

// spreadOrder orders the candidates of a spread claim, given in queue
// order: priority first (a spread claim never takes a job while one of a
// higher priority among its candidates waits), and within each priority,
// first, in queue order, those that rendezvous hashing over the session's
// peers gives to this daemon; then the others at random, to fill a claim
// when the jobs it prefers run out (a peer that is busy or gone leaves its
// share to others).
func spreadOrder(cands []kv.KeyValue, sess *Session) {
	// Queue order is priority order: each priority's candidates are one
	// run of them.
	for len(cands) > 0 {
		p := priorityOf(cands[0].Key)
		n := 1
		for n < len(cands) && priorityOf(cands[n].Key) == p {
			n++
		}
		spreadWithin(cands[:n], sess)
		cands = cands[n:]
	}
}

// priorityOf returns the priority segment of an available-index key
// (.../PRIORITY/TIME/ID).
func priorityOf(key string) string {
	rest := key[:max(strings.LastIndexByte(key, '/'), 0)]  // less the id
	rest = rest[:max(strings.LastIndexByte(rest, '/'), 0)] // less the time
	return rest[strings.LastIndexByte(rest, '/')+1:]
}

// spreadWithin orders candidates of one priority: see spreadOrder.
func spreadWithin(cands []kv.KeyValue, sess *Session) {
	p := sess.peers.Load()
	me := sess.WorkerID()
	if p == nil || len(*p) < 2 || !slices.Contains(*p, me) {
		rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		return
	}
	var first, rest []kv.KeyValue
	for _, x := range cands {
		if rendezvous(idFromIndex(x.Key), *p) == me {
			first = append(first, x)
		} else {
			rest = append(rest, x)
		}
	}
	rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	copy(cands, first)
	copy(cands[len(first):], rest)
}

// rendezvous returns the peer with the highest weight for job id: a
// mix of the two names' hashes (FNV-1a alone, name then id, ranks peers
// by name far too regularly).
func rendezvous(id string, peers []string) string {
	hid := hash64(id)
	var best string
	var bestW uint64
	for _, p := range peers {
		if w := mix64(hash64(p) ^ hid); best == "" || w > bestW {
			best, bestW = p, w
		}
	}
	return best
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// mix64 is SplitMix64's finalizer: every input bit changes about half of
// the output bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
