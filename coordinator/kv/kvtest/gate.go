package kvtest

import (
	"context"
	"sync/atomic"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// Gate is a kv.Store that, once armed, holds the first transaction Match
// accepts until Open: a commit caught on its way to the disk or the raft
// log, so that a test can act meanwhile. Create it with NewGate.
type Gate struct {
	kv.Store
	// Match picks the transaction to hold. Default: Writes.
	Match func(kv.Txn) bool
	// Land commits the held transaction even if its caller's context
	// ended while it was held, as a commit already under way would.
	Land bool

	armed      atomic.Bool
	held, open chan struct{}
}

// NewGate returns a gate over s, not armed.
func NewGate(s kv.Store) *Gate {
	return &Gate{Store: s, Match: Writes, held: make(chan struct{}), open: make(chan struct{})}
}

// Arm makes the gate hold the next transaction Match accepts. A gate
// holds one transaction in its life.
func (g *Gate) Arm() { g.armed.Store(true) }

// Held is closed once the gate holds a transaction.
func (g *Gate) Held() <-chan struct{} { return g.held }

// Open lets the held transaction (and any later one) through.
func (g *Gate) Open() { close(g.open) }

// Txn implements kv.Store.
func (g *Gate) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if g.Match(t) && g.armed.CompareAndSwap(true, false) {
		close(g.held)
		<-g.open
		if g.Land {
			ctx = context.WithoutCancel(ctx)
		}
	}
	return g.Store.Txn(ctx, t)
}

// Writes reports whether t (or a transaction nested in it) puts or
// deletes a key, in either branch.
func Writes(t kv.Txn) bool {
	for _, ops := range [][]kv.Op{t.Then, t.Else} {
		for _, op := range ops {
			if op.Type == kv.OpPut || op.Type == kv.OpDelete || (op.Type == kv.OpTxn && Writes(*op.Txn)) {
				return true
			}
		}
	}
	return false
}
