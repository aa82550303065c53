// Package bench is the workload of `leasehold bench`: it measures the job
// queue end to end, in this process, on either backend, and reports one
// [Result] per phase (one JSON object each with --json).
//
// # Phases
//
// Run executes, in order, on a fresh namespace of the store (so a reused
// data directory or etcd cluster is fine):
//
//   - ceiling (only with Config.Ceiling): the raw store alone, through the
//     same kv seam, with transactions shaped like the queue's. Embedded:
//     N synced single-put transactions from 128 concurrent writers. Shared:
//     N claim-shaped nested transactions (1 compare and 4 puts each, one put
//     on a lease), 25 per etcd transaction, from 8 concurrent writers on the
//     one client. jobs_per_sec is operations per second; the latencies are
//     those of one store transaction. Its keys are deleted afterwards.
//   - insert: N no-op jobs with payload {"t":<unix ns>,"i":<n>}, 1000 per
//     EnqueueBatch call, one call at a time, no worker running. The
//     latencies are those of one call.
//   - drain: a worker with Config.Concurrency slots is started, and timed
//     from its Start until all N jobs are durably recorded completed. The
//     latencies are, per job, from the worker's Start to its handler's
//     start: their spread shows whether the drain kept an even pace.
//   - latency: with the worker running, LatencyJobs jobs are enqueued one
//     per call, open loop at LatencyRate per second, each call in its own
//     goroutine. The latency of a job is from the start of its Enqueue call
//     to the start of its handler, both read on the monotonic clock (the
//     handler finds its job's enqueue time by the payload's index, not by
//     the payload's wall-clock t). jobs_per_sec is the rate achieved;
//     enqueue_p50_ms and enqueue_p99_ms time the Enqueue calls alone (the
//     durable write before the job is claimable), so that a latency tail
//     can be told apart: the store's writes or the pickup after them.
//
// Every write is durable throughout (Pebble fsync, etcd quorum and fsync);
// nothing is tuned for the bench. A store directory on a memory-backed
// filesystem (tmpfs, as the temporary directory is on some systems) makes
// fsync reach no disk: Run then warns, and the results' store says so.
// The handlers do nothing but note when they started. max_rss_mb is the
// process's peak resident set so far (getrusage), in MiB; in shared mode
// without endpoints it includes the embedded etcd member, which Run starts
// in a temporary directory and talks to directly (not through etcdtest's
// fault proxy). The etcd ceiling loop keeps its lease alive, however long
// it runs.
//
// # How the end of the drain is detected
//
// Without polling the store: the handlers count their starts, and once all
// N have started Run watches worker.Worker.Pending, an in-memory count
// that drops for a job only after the worker's write of its outcome (a
// durable transaction) has returned. A Counts read then confirms, untimed,
// that N jobs are completed; should it find fewer, Run polls Counts every
// 20 ms until they are and times the drain up to then.
//
// # Noise
//
// Nothing here is a timed assertion: Run reports numbers. They depend on
// the disk's fsync latency, which on shared virtual machines varies a lot
// from run to run: compare runs on the same machine, and several of them.
//
// # Cleaning up
//
// A temporary store (embedded without Config.Data, shared without
// endpoints) is removed. In a given data directory or etcd cluster Run
// deletes the namespace's finished jobs and the ceiling's keys afterwards;
// after a failure, unfinished jobs may remain in the namespace, which Run
// logs.
package bench
