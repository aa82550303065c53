// Package etcdkv implements the coordinator's key-value seam ([kv.Store]) on
// an etcd v3 cluster, for leasehold's shared mode.
//
// It is an adapter, not a second implementation: the seam has etcd's
// semantics, so a [kv.Txn] becomes one etcd transaction (compares, then-ops,
// else-ops, nested transactions as nested etcd transactions; the request is
// built directly, not through clientv3's builders, unless the client's KV
// is wrapped), a range is a linearizable Get, a scan ([Store.Scan], a
// [kv.Scanner]) is one RangeStream (etcd 3.7 and later), a watch is an etcd
// watch on a prefix, and leases are etcd leases. Revisions are etcd's
// revisions, so the revision of a claiming transaction is a fencing token
// that every member agrees on.
//
// # Errors
//
// etcd's errors are mapped to the seam's sentinels and keep the original in
// their chain (errors.Is works for both):
//
//   - a watch from a compacted revision ends with [kv.ErrCompacted], and
//     WatchResponse.CompactRevision says up to where history is gone;
//   - an expired or revoked lease is [kv.ErrLeaseNotFound];
//   - too many operations (--max-txn-ops) or too large a request
//     (--max-request-bytes, or gRPC's message limits) is [kv.ErrTxnTooLarge];
//   - a call on a closed Store is [kv.ErrClosed].
//
// Every other error is wrapped with what was being done. A context deadline
// stays a context error. A transaction that fails with a timeout or an
// unavailable cluster may or may not have been applied: etcd does not retry
// writes, and neither does this package. Read the keys again to find out.
//
// # Connecting
//
// [Dial] builds a clientv3 client from endpoints, TLS files and credentials,
// with gRPC keepalives on (a connection whose packets are silently dropped is
// otherwise noticed only after many minutes) and endpoint auto-sync off, and
// checks that the cluster answers. [New] wraps any client, also one whose
// KV, Watcher and Lease are wrapped (by package namespace, say: transactions
// then go through its KV too); closing the Store does not close the client.
//
// # A member that hangs
//
// A member that stops answering (SIGSTOP, a disk that does not return)
// keeps its connection until the keepalive closes it, 15 s later. Until
// then reads are sent again to the next member after Options.ReadHedge,
// writes fail after Options.WriteTimeout with [ErrNoAnswer] (ADR 0029), and
// watches whose stream stays silent past Options.WatchCheck, even to a
// watch set up there to check it, end with [ErrNoAnswer] and are set up
// again by their callers on a new stream (ADR 0030). With
// Options.LeaveOutFor, a member that did not answer a read that another
// then answered at once is taken out of the client's endpoints for that
// long (ADR 0031).
//
// # Server versions
//
// Some etcd releases have lease bugs that make sessions lose their leases
// spuriously or learn of a lost lease late. [Store.ServerVersion] reads the
// members' versions and [KnownLeaseBugs] says which known bugs a version has,
// so that the daemon can warn at startup. Fencing does not rely on them being
// fixed.
package etcdkv
