package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// ClusterVersion is the newest cluster version this build can run at: the
// layout of keys and records it reads and writes. A namespace runs at the
// highest version raised in it (1 until one is), and only daemons that can
// run at that version may register in it (docs/adr/0028).
//
// A later build that changes what readers must understand (ADR 0026's
// claim that leaves the record alone, say) raises ClusterVersion, keeps
// writing the old layout until the namespace's version is raised, and
// raises it with [Coordinator.RaiseClusterVersion] once every registered
// daemon can run at it.
const ClusterVersion = 1

// ErrClusterVersion is wrapped by a registration (a daemon's session) that
// a namespace refuses because it runs at a cluster version newer than the
// daemon's build, and by a raise that some registered daemon could not
// follow.
var ErrClusterVersion = errors.New("coordinator: cluster version")

// maxVersion returns the newest cluster version c can run at.
func (c *Coordinator) maxVersion() int {
	if c.testMaxVersion != 0 {
		return c.testMaxVersion
	}
	return ClusterVersion
}

// registrationGate returns the conditions and writes that a daemon's
// registration makes in the same transaction as its key: the namespace
// runs at no version newer than this build's, and the registrations'
// change key is written, so that a raise that read the registrations
// before this one fails (see RaiseClusterVersion).
func (c *Coordinator) registrationGate() ([]kv.Cmp, []kv.Op) {
	return []kv.Cmp{kv.Missing(c.keys.clusterVersion(c.maxVersion() + 1))},
		[]kv.Op{kv.Put(c.keys.registrations(), nil, 0)}
}

// versionRefused is the error of a registration that the gate refused:
// the namespace runs at a newer version than this build's (the one read
// now, or at least the next).
func (c *Coordinator) versionRefused(ctx context.Context) error {
	if err := c.CheckClusterVersion(ctx); errors.Is(err, ErrClusterVersion) {
		return err
	}
	return c.tooNew(c.maxVersion() + 1)
}

func (c *Coordinator) tooNew(v int) error {
	return fmt.Errorf("%w: namespace %s runs at cluster version %d, and this build of leasehold at %d at most: upgrade it", ErrClusterVersion, c.cfg.Namespace, v, c.maxVersion())
}

// CheckClusterVersion returns an error wrapping ErrClusterVersion if the
// namespace runs at a cluster version newer than this build's. A daemon
// checks before it writes anything (an embedded one re-queues the jobs
// left running first); its registration checks again, atomically.
func (c *Coordinator) CheckClusterVersion(ctx context.Context) error {
	v, err := c.ClusterVersionOf(ctx)
	if err == nil && v > c.maxVersion() {
		err = c.tooNew(v)
	}
	return err
}

// ClusterVersionOf returns the cluster version the namespace runs at: the
// highest one raised in it, 1 if none was. The read is serializable (an
// etcd member answers it without a quorum, and may lag behind): every
// decision it informs is checked again by a conditional write.
func (c *Coordinator) ClusterVersionOf(ctx context.Context) (int, error) {
	rr, err := c.store.Range(ctx, kv.RangeRequest{Start: c.keys.clusterVersions(), End: kv.PrefixEnd(c.keys.clusterVersions()), KeysOnly: true, Serializable: true})
	if err != nil {
		return 0, fmt.Errorf("coordinator: read the cluster version: %w", err)
	}
	v := 1
	for _, x := range rr.KVs {
		n, err := strconv.Atoi(strings.TrimPrefix(x.Key, c.keys.clusterVersions()))
		if err != nil {
			return 0, fmt.Errorf("%w: %s is not a cluster version", ErrCorrupt, x.Key)
		}
		v = max(v, n)
	}
	return v, nil
}

// RaiseClusterVersion raises the namespace's cluster version to v, once
// every daemon registered in it can run at v (and this build can): from
// then on, a daemon whose build cannot is refused when it registers
// (ErrClusterVersion), so that no daemon reads a layout it does not know.
// A daemon that registers while the raise reads the registrations makes
// the raise fail with ErrConflict (try again). Raising to the version the
// namespace runs at, or to an older one, does nothing.
func (c *Coordinator) RaiseClusterVersion(ctx context.Context, v int) error {
	if v > c.maxVersion() {
		return fmt.Errorf("%w: this build runs at cluster version %d at most, not %d: raise it with a newer build", ErrClusterVersion, c.maxVersion(), v)
	}
	cur, err := c.ClusterVersionOf(ctx)
	if err != nil || cur >= v {
		return err
	}
	// The change key first, then the registrations: a daemon that
	// registers after the first read moves the change key, and the raise
	// below fails, whether the second read saw it or not.
	rr, err := c.store.Range(ctx, kv.RangeRequest{Start: c.keys.registrations()})
	if err != nil {
		return fmt.Errorf("coordinator: raise the cluster version to %d: %w", v, err)
	}
	changed := int64(0)
	if len(rr.KVs) == 1 {
		changed = rr.KVs[0].ModRevision
	}
	ws, err := c.Workers(ctx)
	if err != nil {
		return fmt.Errorf("coordinator: raise the cluster version to %d: %w", v, err)
	}
	var behind []string // in id order, as Workers returns them
	for _, w := range ws {
		if max(w.ClusterVersion, 1) < v {
			behind = append(behind, w.ID)
		}
	}
	if len(behind) > 0 {
		return fmt.Errorf("%w: daemon %s cannot run at cluster version %d: upgrade it (or stop it) first", ErrClusterVersion, strings.Join(behind, ", "), v)
	}
	// Every version's key up to v, not v's alone: a build's gate looks
	// for the key just above its own version, so a raise from 1 to 3
	// that wrote only 3's would let a build that runs at 1 register (one
	// whose session was lost while the raise read the registrations).
	var puts []kv.Op
	for k := 2; k <= v; k++ {
		puts = append(puts, kv.Put(c.keys.clusterVersion(k), nil, 0))
	}
	res, err := c.store.Txn(ctx, kv.Txn{
		If:   []kv.Cmp{kv.ModRevisionIs(c.keys.registrations(), kv.Equal, changed)},
		Then: puts,
	})
	if err != nil {
		return fmt.Errorf("coordinator: raise the cluster version to %d: %w", v, err)
	}
	if !res.Succeeded {
		return fmt.Errorf("%w: a daemon registered while the cluster version was being raised to %d", ErrConflict, v)
	}
	c.log.Info("cluster version raised", "version", v)
	return nil
}
