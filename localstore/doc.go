// Package localstore is the kv.Store seam on a Pebble directory owned by one
// process: the store of leasehold's embedded mode.
//
// It gives the job state machine in package coordinator etcd's semantics
// without etcd, so that the state machine is written once for both modes.
//
// # What it guarantees
//
//   - One owner. [Open] takes the data directory: an exclusive flock on a
//     lock file in it, and a registry of the directories open in this
//     process (flock and Pebble's fcntl lock do not both conflict within one
//     process). A second Open, here or in another process, fails with a
//     [*LockedError] (matching [ErrLocked]) that names the directory and
//     its holder, and leaves the owner untouched.
//   - Durable, atomic transactions. [Store.Txn] evaluates
//     If(compares) Then(ops) Else(ops), nested transactions included, under
//     one mutex, writes the result as one Pebble batch together with the
//     revision counter, and returns once the batch is fsynced. Concurrent
//     transactions share fsyncs (group commit): each is applied, in
//     revision order, under the mutex, and waits for the disk outside it.
//   - Revisions are fencing tokens. Every transaction that writes advances
//     the revision by exactly one; one that writes nothing does not. The
//     counter is persisted in the batch it belongs to, so revisions only
//     grow, across Close and reopen and across kill -9 alike.
//   - Nothing observed is lost. Range, read-only transactions and watches
//     report a revision only once it is on disk.
//   - Consistent reads. [Store.Range] reads at one revision, which it
//     reports.
//   - Leases end with their process. Leases never expire while the process
//     that granted them lives; [Store.Revoke] deletes their keys. The keys
//     attached to leases are also indexed on disk, and [Open] deletes every
//     one of them, in one synced transaction of one new revision, because
//     holding the directory lock proves that the process that held those
//     leases is gone ([Store.RecoveredLeasedKeys] says how many). This is
//     how embedded mode re-queues every job left running by a crash, at
//     once: with their ownership keys gone, worker.Worker's Start
//     re-queues them all (one coordinator.Reap(ctx, nil, nil) call, which
//     a program that runs no worker can make itself). Lease ids
//     come from a persisted counter and are never reused.
//   - Backups keep revisions growing. [Store.Backup] writes a consistent,
//     durable copy while the store serves; [Open] refuses it (and a
//     backup or restore cut short). [Restore] makes a data directory of a
//     copy, or of a directory put back from a snapshot, and raises its
//     revision counter, so that its tokens stay above those the lost
//     store handed out after the copy (ADR 0020).
//   - Corruption is reported, not trusted: a record that does not decode
//     yields an error wrapping [ErrCorrupt] that names the key, never a
//     panic or a made-up value.
//
// # What it does not do
//
//   - It is not shared: one process, one directory. Use the etcd backend
//     for several daemons.
//   - It keeps no history on disk. Watches replay only from a bounded ring of
//     recent events in memory ([Options].WatchHistory events, at most
//     [Options].WatchHistoryBytes), never from before
//     this process opened the store; older start revisions, and watchers
//     that fall behind the ring, end with kv.ErrCompacted. Reads are always
//     of the latest revision.
//   - Lease TTLs are recorded and reported, not enforced: there is no other
//     process for whom an expiry would matter.
//   - Durability is that of fsync on the local disk, no more.
//   - It does not go on after a write error. A WAL write or sync that fails
//     (a full disk, an I/O error) fails the store: every later call fails
//     with an error wrapping kv.ErrFailed, [Store.Failed] is closed and [Store.Err] says why. The program should
//     stop and open the directory again, which recovers what was synced.
//     To keep a full disk from getting that far, [Store.CheckSpace] refuses
//     new jobs once less than [Options].MinFreeBytes is free (ADR 0032).
//
// # Layout
//
// The data directory holds the lock file leasehold.lock (with the owner's
// pid) and the Pebble database in pebble/. In Pebble, user keys are stored
// under the prefix 'd', the lease index under 'l' and the store's metadata
// (format version, revision and lease counters) under 'm'. A value record is
// a format byte, then the create revision, mod revision, version and lease
// as uvarints, then the value.
package localstore
