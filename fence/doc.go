// Package fence holds the fencing token of a job run, the errors a fenced
// write can end in, and the predicate such a write carries.
//
// A token is issued each time a job is claimed. It is strictly greater than
// every token issued earlier for the same job: in shared mode it is the etcd
// revision of the claim transaction (which is also the CreateRevision of the
// job's ownership key); in embedded mode it is the same kind of revision, kept
// by a counter that is persisted with every write and so survives restarts.
//
// Every write that a run makes after its claim (a checkpoint, which is also
// how a run records its progress; its result and final state) carries a
// [Predicate]: "the ownership key of this job was
// created at this token". A store applies the write only if the predicate
// still holds. A write that is refused fails with [ErrLeaseLost]; the run must
// then be abandoned and nothing recorded for it, because another run of the
// job may already own the record.
//
// The package imports neither etcd nor Pebble: it is the vocabulary that the
// coordinator, the worker runtime and handler code share. Handlers receive the
// token and use it to fence their own side effects outside the store, per
// job (see [Token.Validates]).
package fence
