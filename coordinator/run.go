package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/fence"
)

// Run is one claimed run of a job. Its writes are fenced: each is a
// transaction conditional on the job's ownership key still having the run's
// token as its creation revision. A refused write returns an error wrapping
// fence.ErrLeaseLost, records nothing, and ends the run: every later write
// is refused too. After a final write whose reply was lost, a refusal that
// cannot tell whether that write landed returns ErrUnknownOutcome instead.
// A Run is safe for concurrent use; its writes are applied in order.
type Run struct {
	c    *Coordinator
	sess *Session
	pred fence.Predicate

	mu   sync.Mutex
	job  *Job // the stored record as this run last wrote it
	done bool // a final write was accepted, or the run was lost
	lost error
	// uncertain holds the records of final writes whose reply was lost:
	// any of them may have been applied. A later refusal is checked
	// against them all.
	uncertain [][]byte
	// slot is the key of the queue slot the run holds (global limit), or "".
	slot string
	// rev is the modification revision of the job's record as this run
	// last wrote it (its claim's, at first): a checkpoint is applied only
	// over it, so that one whose reply was lost and that lands late (an
	// etcd request that waited on a hung member, ADR 0029) cannot replace
	// a later checkpoint of the run (ADR 0048).
	rev int64
}

func (c *Coordinator) newRun(sess *Session, j *Job) *Run {
	return &Run{c: c, sess: sess, job: j, pred: fence.Predicate{Key: c.keys.owner(j.ID), Token: j.Token}, rev: int64(j.Token)}
}

// errRebased, from writeLocked, says that a checkpoint was refused only
// because the record had moved on from the revision the run last wrote:
// an earlier checkpoint of the run, whose reply was lost, landed since.
// The run took the record's revision; the write is tried again over it.
var errRebased = errors.New("the run's record moved on under an earlier write of the run")

// maxRebases bounds the retries of one checkpoint over an earlier one that
// landed meanwhile: each needs a write of the run whose reply was lost.
const maxRebases = 8

// Job returns a copy of the job as this run holds it.
func (r *Run) Job() Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	return *r.job
}

// Token returns the run's fencing token.
func (r *Run) Token() fence.Token { return r.pred.Token }

// Session returns the session the run was claimed under.
func (r *Run) Session() *Session { return r.sess }

// Checkpoint records handler state (any JSON) under the run's fence. A
// retried attempt sees the last accepted checkpoint.
func (r *Run) Checkpoint(ctx context.Context, data json.RawMessage) error {
	if err := checkJSONText("checkpoint", data); err != nil {
		return err
	}
	return r.write(ctx, "checkpoint", false, func(j *Job) { j.Checkpoint = data })
}

// Complete records success and the handler's result (any JSON, or nil).
func (r *Run) Complete(ctx context.Context, result json.RawMessage) error {
	if len(result) > 0 {
		if err := checkJSONText("result", result); err != nil {
			return err
		}
	}
	return r.write(ctx, "complete", true, func(j *Job) {
		j.State = StateCompleted
		j.Result = result
	})
}

// FailOpts refine Fail.
type FailOpts struct {
	// Trace is a stack trace (of a recovered panic, say).
	Trace string
	// RetryAt overrides the retry policy's next attempt time; a time
	// past is now.
	RetryAt time.Time
	// Discard ends the job now, whatever attempts remain.
	Discard bool
	// MaxAttempts, if positive, replaces the job's max attempts before
	// the decision (a per-kind setting of the worker).
	MaxAttempts int
}

// Fail records a failed attempt (cause nil: "attempt failed"). The job
// becomes retryable at the time the retry policy gives, or discarded once
// it has used MaxAttempts. With a cancel request pending it becomes
// cancelled instead (so do Snooze and Release): an acknowledged cancel is
// never dropped by an outcome that would run the job again.
func (r *Run) Fail(ctx context.Context, cause error, o FailOpts) error {
	now := r.c.clock.Now().UTC()
	if cause == nil {
		cause = errors.New("attempt failed")
	}
	return r.write(ctx, "fail", true, func(j *Job) {
		j.Errors = append(j.Errors, AttemptError{At: now, Attempt: j.Attempt, Error: cause.Error(), Trace: o.Trace})
		if o.MaxAttempts > 0 {
			j.MaxAttempts = o.MaxAttempts
		}
		if o.Discard || j.Attempt >= j.MaxAttempts {
			j.State = StateDiscarded
			return
		}
		j.State = StateRetryable
		j.ScheduledAt = o.RetryAt.UTC()
		if o.RetryAt.IsZero() {
			j.ScheduledAt = now.Add(r.c.retryDelay(r.c.cfg.RetryPolicy, j.Attempt, j))
		}
		// A time past is now, as an enqueue's is: the store keys times as
		// Unix nanoseconds, and one before 1678 would be keyed as due in
		// the 23rd century.
		switch {
		case j.ScheduledAt.Before(now):
			j.ScheduledAt = now
		case j.ScheduledAt.After(MaxScheduledAt):
			j.ScheduledAt = MaxScheduledAt
		}
	})
}

// Snooze puts the job back to run again after d without using an attempt.
func (r *Run) Snooze(ctx context.Context, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: negative snooze %s", ErrInvalid, d)
	}
	// As RetryAt: a snooze past the latest time the store can key is
	// until that time (the job would otherwise end discarded by the
	// worker, which cannot record the snooze).
	at := r.c.clock.Now().UTC().Add(d)
	if at.After(MaxScheduledAt) {
		at = MaxScheduledAt
	}
	return r.write(ctx, "snooze", true, func(j *Job) {
		j.Attempt--
		j.State = StateScheduled
		j.ScheduledAt = at
		if d == 0 {
			j.State = StateAvailable
		}
	})
}

// Cancel ends the job as cancelled (a cancel request was honoured, or the
// handler asked for no more attempts); cause, if not nil, is recorded.
func (r *Run) Cancel(ctx context.Context, cause error) error {
	now := r.c.clock.Now().UTC()
	return r.write(ctx, "cancel", true, func(j *Job) {
		if cause != nil {
			j.Errors = append(j.Errors, AttemptError{At: now, Attempt: j.Attempt, Error: cause.Error()})
		}
		j.State = StateCancelled
	})
}

// Release gives the job back, available at once, without using an attempt:
// for a daemon that stops before the handler finished.
func (r *Run) Release(ctx context.Context) error {
	now := r.c.clock.Now().UTC()
	return r.write(ctx, "release", true, func(j *Job) {
		j.Attempt--
		j.State = StateAvailable
		j.ScheduledAt = now
	})
}

// Lost returns the error that ended the run through a refused write, or nil.
func (r *Run) Lost() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost
}

// write applies mutate to a copy of the record and writes it under the
// run's fence. final writes move the job out of running.
func (r *Run) write(ctx context.Context, op string, final bool, mutate func(*Job)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for range maxRebases {
		if err := r.writeLocked(ctx, op, final, mutate); !errors.Is(err, errRebased) {
			return err
		}
	}
	return fmt.Errorf("coordinator: %s job %s: %w", op, r.job.ID, ErrConflict)
}

func (r *Run) writeLocked(ctx context.Context, op string, final bool, mutate func(*Job)) error {
	if r.lost != nil {
		return r.lost
	}
	if r.done {
		return fmt.Errorf("%w: %s of job %s after its run ended", ErrWrongState, op, r.job.ID)
	}
	// A session past its deadline stops writing: the store would refuse
	// (or, worse, race the lease's expiry), and the caller must abandon.
	if fencing && !r.sess.Valid() && len(r.uncertain) > 0 {
		// An earlier attempt may still land: the outcome is unknown, not
		// refused.
		r.lost = fmt.Errorf("%w: %s of job %s: an earlier attempt's reply was lost and the session ended", ErrUnknownOutcome, op, r.job.ID)
		return r.lost
	}
	if fencing && !r.sess.Valid() {
		return r.loseLocked(&fence.LostError{JobID: r.job.ID, Token: r.pred.Token, Op: op, Local: true}, "session no longer valid")
	}
	j := *r.job
	// A copy, never nil: a job's errors are a JSON array, [] when none.
	j.Errors = append(make([]AttemptError, 0, len(r.job.Errors)+1), r.job.Errors...)
	mutate(&j)
	j.Token = r.pred.Token
	k := r.c.keys
	var rec []byte
	var then []kv.Op
	if final {
		now := r.c.clock.Now().UTC()
		if j.State.Final() {
			j.FinalizedAt = &now
		} else {
			j.Owner, j.Token = "", 0
		}
		then = []kv.Op{kv.Delete(k.running(j.ID)), kv.Delete(k.owner(j.ID)), kv.Delete(k.cancel(j.ID))}
		then = append(then, k.releaseUnique(&j)...)
		if r.slot != "" {
			then = append(then, kv.Delete(r.slot)) // the queue's global-limit slot
		}
		var puts []kv.Op
		rec, puts = k.put(&j)
		then = append(then, puts...)
	} else {
		rec = encodeJob(&j)
		then = []kv.Op{kv.Put(k.job(j.ID), rec, 0)}
	}
	var cond []kv.Cmp
	if fencing {
		cond = []kv.Cmp{kv.CreateRevisionIs(r.pred.Key, kv.Equal, int64(r.pred.Token))}
	}
	t := kv.Txn{If: cond, Then: then, Else: []kv.Op{kv.Get(r.pred.Key)}}
	if fencing && !final {
		// Over the record as the run last wrote it: an earlier
		// checkpoint whose reply was lost may land after this one,
		// and must then be refused (ADR 0048). A final write needs no
		// such compare: it deletes the ownership key, which refuses
		// every write of the run that lands after it.
		t.If = append(t.If, kv.ModRevisionIs(k.job(j.ID), kv.Equal, r.rev))
		t.Else = append(t.Else, kv.Get(k.job(j.ID)))
	}
	// An outcome that would run the job again (a retry, a snooze, a
	// release) must not drop a cancel request that was acknowledged
	// meanwhile: it applies only while there is none (below: else the job
	// is cancelled).
	again := final && !j.State.Final()
	if again {
		t.If = append(t.If, kv.Missing(k.cancel(j.ID)))
		t.Else = append(t.Else, kv.Get(k.cancel(j.ID)))
	}
	// A record the store cannot take is refused before anything is sent.
	// One that may run again (a checkpoint, a retry, a snooze) must also
	// fit twice: once available, its queue's index entry carries a copy
	// (a write that makes it available, a release, already holds both).
	size := (unit{txn: t}).bytes()
	if !j.State.Final() && j.State != StateAvailable {
		size += len(rec)
	}
	if !r.c.fitsBytes(size) {
		return fmt.Errorf("%w: %s of job %s: its record would be %d bytes, more than the store takes in one request (with the copy in its queue's index when it runs again): keep checkpoints, results and errors smaller", ErrInvalid, op, j.ID, len(rec))
	}
	var res *kv.TxnResult
	var err error
	if final {
		// Outcomes of many runs share one store transaction (each on its
		// own fence), and so one fsync or one raft round.
		res, err = r.c.group.apply(ctx, t)
	} else {
		var one kv.TxnResult
		one, err = r.c.store.Txn(ctx, t)
		res = &one
	}
	if err != nil {
		if final && !errors.Is(err, errNotSent) {
			switch applied, known := r.noSpaceApplied(ctx, err, rec); {
			case applied:
				return nil
			case !known:
				r.uncertain = append(r.uncertain, rec)
			}
		}
		return fmt.Errorf("coordinator: %s job %s: %w", op, j.ID, err)
	}
	if !res.Succeeded {
		var cur int64
		if o := res.Results[0].KV; o != nil {
			cur = o.CreateRevision
		}
		if fencing && !final && cur == int64(r.pred.Token) {
			// Still the run's: only the record moved, and while the run
			// holds the job nothing writes its record but the run. An
			// earlier checkpoint of the run, whose reply was lost,
			// landed: go on over it.
			if rec := res.Results[1].KV; rec != nil && rec.ModRevision != r.rev {
				r.rev = rec.ModRevision
				return errRebased
			}
		}
		if again && res.Results[1].KV != nil && (!fencing || cur == int64(r.pred.Token)) {
			// Still ours, and a cancel request waits: honour it. The job
			// keeps this attempt (and its error, if it failed).
			prev := r.job
			return r.writeLocked(ctx, op, true, func(j *Job) {
				mutate(j)
				j.State, j.Attempt, j.ScheduledAt = StateCancelled, prev.Attempt, prev.ScheduledAt
			})
		}
		if cur == 0 && len(r.uncertain) > 0 {
			applied, err := r.appliedEarlier(ctx)
			if err != nil {
				// Whether the earlier write landed is still unknown: not
				// refused, and the run not lost; a retry asks again.
				return fmt.Errorf("coordinator: %s job %s: read the record back: %w", op, j.ID, err)
			}
			if applied && !final {
				// The run ended with that write: this one is not recorded.
				// The run is left open for the outcome's own retry, which
				// finds the same and is accepted.
				return fmt.Errorf("%w: %s of job %s after its run ended (an earlier outcome whose reply was lost was applied)", ErrWrongState, op, j.ID)
			}
			if applied {
				// The final write whose reply was lost had been applied:
				// it deleted the ownership key that this retry compared on.
				r.done = true
				return nil
			}
		}
		if len(r.uncertain) > 0 {
			// An earlier write whose reply was lost may have landed and
			// the job moved on since, so that its record no longer shows
			// it: run again and claimed (a retry, a snooze, a release),
			// or finished and deleted (an operator, retention), or
			// retried by an operator. The outcome is unknown, not
			// refused.
			r.lost = fmt.Errorf("%w: %s of job %s: an earlier attempt's reply was lost and the job has moved on since", ErrUnknownOutcome, op, j.ID)
			if cur == 0 {
				r.sess.RenewNow() // the lease may be gone: find out now
			}
			r.c.log.Warn("fenced write refused after a lost reply: outcome unknown, abandoning run", slog.String("job", j.ID), slog.String("op", op),
				slog.Int64("token", int64(r.pred.Token)), slog.Int64("current", cur))
			return r.lost
		}
		return r.loseLocked(&fence.LostError{JobID: j.ID, Token: r.pred.Token, Current: cur, Op: op}, "refused by the store")
	}
	r.job = &j
	r.done = final
	r.rev = res.Revision
	return nil
}

// noSpaceApplied finds out whether a final write answered with err, which
// would have stored rec, was applied, when err is the store's want of room
// (kv.ErrNoSpace). etcd answers NOSPACE both for the writes its alarm
// refuses and for those that took it over its quota, which it applied
// first; its answer comes once the write was applied or refused, so a
// read now tells which. Applied (rec stored): the run ended with it.
// Known and not applied: the ownership key the write would have deleted
// is still the run's, and a retry need not allow for the write (a session
// that ends meanwhile loses the run, its outcome not unknown). Otherwise,
// or for any other error, known is false.
func (r *Run) noSpaceApplied(ctx context.Context, err error, rec []byte) (applied, known bool) {
	if !errors.Is(err, kv.ErrNoSpace) {
		return false, false
	}
	res, rerr := r.c.store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Get(r.c.keys.job(r.job.ID)), kv.Get(r.pred.Key)}})
	if rerr != nil || len(res.Results) != 2 {
		return false, false
	}
	if o := res.Results[0].KV; o != nil && bytes.Equal(o.Value, rec) {
		j, derr := decodeKV(o)
		if derr != nil {
			return false, false
		}
		r.job, r.done = j, true
		return true, true
	}
	if o := res.Results[1].KV; o != nil && o.CreateRevision == int64(r.pred.Token) {
		return false, true
	}
	return false, false
}

// appliedEarlier reports whether the stored record is exactly the one an
// earlier write with a lost reply tried to store. An error means the
// record could not be read: it does not say.
func (r *Run) appliedEarlier(ctx context.Context) (bool, error) {
	res, err := r.c.store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Get(r.c.keys.job(r.job.ID))}})
	if err != nil {
		return false, err
	}
	if res.Results[0].KV == nil {
		return false, nil
	}
	stored := res.Results[0].KV.Value
	if !slices.ContainsFunc(r.uncertain, func(rec []byte) bool { return bytes.Equal(stored, rec) }) {
		return false, nil
	}
	j, err := decodeKV(res.Results[0].KV)
	if err != nil {
		return false, nil
	}
	r.job = j
	return true, nil
}

func (r *Run) loseLocked(err *fence.LostError, why string) error {
	r.lost = err
	if err.Current == 0 && !err.Local {
		r.sess.RenewNow() // the lease may be gone: find out now
	}
	r.c.log.Warn("fenced write refused: abandoning run", slog.String("worker", r.sess.WorkerID()), slog.String("job", err.JobID),
		slog.String("kind", r.job.Kind), slog.Int("attempt", r.job.Attempt), slog.String("op", err.Op),
		slog.Int64("token", int64(err.Token)), slog.Int64("current", err.Current), slog.String("why", why))
	return err
}
