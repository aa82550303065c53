// Package coordinator is leasehold's job state machine, written once over
// the transactional key-value seam in package kv, so that the embedded mode
// (package localstore, on Pebble) and the shared mode (package etcdkv, on
// etcd) cannot drift apart.
//
// # States
//
// A job is in exactly one of River's states:
//
//	scheduled  -> available            (its time came: Maintain)
//	available  -> running              (Claim: compare-and-set, issues a token)
//	running    -> completed            (Run.Complete)
//	running    -> retryable|discarded  (Run.Fail; discarded after MaxAttempts)
//	running    -> scheduled            (Run.Snooze: does not use an attempt)
//	running    -> cancelled            (Run.Cancel, or a cancel request)
//	running    -> available            (Run.Release, or Reap after the owner's lease is gone)
//	running    -> cancelled|discarded  (Reap: a cancel request waits, or too many lost runs)
//	retryable  -> available            (its retry time came: Maintain)
//	available|scheduled|retryable -> cancelled  (Coordinator.Cancel)
//	discarded|cancelled|scheduled|retryable -> available  (Coordinator.Retry)
//
// # Keys
//
// Under the namespace prefix, a job has its record (j/ID) and exactly one
// index key that says where it stands: q/QUEUE/PRIORITY/TIME/ID when
// available, t/TIME/ID when scheduled or retryable, r/ID when running
// (value: owner, newline, queue), f/TIME/ID when finished. A running job also has an ownership key (o/ID)
// attached to its daemon's session lease; its creation revision is the run's
// fencing token. What others write while a job runs lives in keys of its own
// that the owner's writes never overwrite: a cancel request is c/ID.
//
// A unique key is u/KEY (value: the job id), held while the job is
// unfinished and, per UniqueOpts.ByState, in some final states (then the
// finished index entry carries the key, for retention to free it). Queue
// management is under qm/: qm/c/QUEUE is a queue's configuration (pause,
// global limit), and qm/s/QUEUE/N a slot of its global limit, held by a run
// on its daemon's lease (docs/adr/0005); qm/g/QUEUE is written by each
// claim while slots above a lowered limit are held (docs/adr/0044). p/NAME is a periodic schedule's
// state, advanced by compare-and-set with each tick's job (docs/adr/0007).
// e/NAME is an election's leader key, and w/ID a daemon's registration;
// both hang on their daemon's session lease. cv/N says that the namespace
// runs at cluster version N (the highest such key; 1 with none), and
// cv-registered changes with every registration (docs/adr/0028).
//
// # Fencing
//
// Every write a run makes after its claim is a transaction conditional on the
// ownership key's creation revision being the run's token
// ([fence.Predicate]); a refused write returns an error that wraps
// [fence.ErrLeaseLost] and records nothing. Writes made by others on a job
// (reaping, promoting, cancelling) are conditional on the record's
// modification revision, so a concurrent change always wins over a stale
// decision.
//
// # What it does not promise
//
// Execution is at least once: a handler can run again after its daemon lost
// its lease, and a side effect outside the store must be fenced with the run's
// token or made idempotent with its idempotency key. A batch enqueue larger
// than one transaction of the backend is applied one transaction at a time.
package coordinator
