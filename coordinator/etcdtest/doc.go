// Package etcdtest runs real etcd servers inside a Go test, for leasehold's
// own tests and for the tests of programs that use leasehold in shared mode.
//
// A server is an embedded etcd member (go.etcd.io/etcd/server/v3/embed) with
// its data in the test's temporary directory, reachable on 127.0.0.1 only,
// never on etcd's default ports. It is stopped when the test ends:
//
//	func TestSomething(t *testing.T) {
//		srv := etcdtest.Start(t)
//		cli := srv.Client(t) // a *clientv3.Client, closed when the test ends
//		...
//	}
//
// [StartCluster] starts several members; [Cluster.Kill] crashes one (its
// connections are reset and raft stops without handing over leadership),
// [Cluster.Stop] shuts one down gracefully, [Cluster.Restart] brings it back
// on the same data directory and URLs, and [Cluster.Leader] finds the
// leader. [New] and [NewCluster] start servers outside a test, for example in
// TestMain to share one server among a package's tests.
//
// Defaults: log level "error", with the logs kept in memory and printed only
// when the test fails; periodic auto-compaction keeping one hour of history
// (etcd's own default is none, which lets a long test fill the backend);
// etcd's default heartbeat (100 ms) and election timeout (1 s). See the
// Options.
//
// # Faults
//
// [NewProxy] puts a TCP proxy in front of any loopback address. It can
// blackhole traffic (the connection stays open and hangs, as in a network
// partition), in one direction or both, delay it, or reset every
// connection, and heal again. Each member of a cluster is itself reached
// through two such proxies, one for clients ([Member.ClientProxy]) and one
// for peers ([Member.PeerProxy]), so its URLs survive restarts and its
// connections can be cut at once.
//
// [FillQuota] fills a server started with a small backend quota
// ([WithQuota]) until etcd raises its NOSPACE
// alarm and refuses writes; [MakeRoom] does what an operator does then
// (delete, compact, defragment, disarm).
//
// # Timing facts worth knowing
//
//   - A member starts in about 0.2–1 s.
//   - After a leader crash, a write that reached a follower before the new
//     leader was elected waits for etcd's request timeout (5 s + 2 ×
//     election timeout, 7 s by default) and fails with "etcdserver: request
//     timed out", and may or may not have been applied. Give writes short
//     deadlines and retry them idempotently.
//   - etcd's graceful shutdown waits up to the same request timeout for open
//     client streams (watches, lease keepalives); this package resets client
//     connections first, so Kill, Stop and cleanup are immediate.
//   - Auto-compaction in "revision" mode runs only every 5 minutes, whatever
//     the retention; "periodic" with a short retention compacts within about
//     that retention.
//
// Everything this package starts is stopped and awaited when the test ends
// (in t.Cleanup), so it can be used with go.uber.org/goleak: call
// goleak.VerifyTestMain(m) in TestMain, or register
// t.Cleanup(func() { goleak.VerifyNone(t) }) before starting a cluster
// (cleanups run last-registered first). A deferred goleak.VerifyNone(t)
// runs before the cleanups, while the members still run, and fails.
package etcdtest
