package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// readJob reads job id's record linearizably.
func (c *Coordinator) readJob(ctx context.Context, id string) (*Job, *kv.KeyValue, error) {
	if err := ValidateID(id); err != nil {
		return nil, nil, err
	}
	res, err := c.store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Get(c.keys.job(id))}})
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator: read job %s: %w", id, err)
	}
	rec := res.Results[0].KV
	if rec == nil {
		return nil, nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	j, err := decodeKV(rec)
	return j, rec, err
}

// Retry makes a discarded or cancelled job available again now, keeping its
// history (errors, attempts, checkpoint). If it had used all its attempts it
// gets one more; its count of lost runs starts again. A scheduled or
// retryable job is made available now (its next attempt is not awaited).
// A job with a unique key takes the key again; if another job holds it
// meanwhile, Retry refuses with ErrWrongState naming that job. Retrying a
// running, available or completed job is ErrWrongState; a job whose record
// has grown too large to be made available again (ADR 0018) is ErrInvalid.
// It returns the job as it is after the call (and, with ErrWrongState, as
// it is now).
func (c *Coordinator) Retry(ctx context.Context, id string) (*Job, error) {
	return c.RetryFrom(ctx, id, "")
}

// RetryFrom is Retry if job id is in state from when it is retried ("":
// any), and ErrWrongState naming its state otherwise, nothing written: a
// caller that chose to retry the job as it saw it (the dashboard's button
// of a scheduled job) does not revive it after it changed (cancelled or
// discarded meanwhile).
func (c *Coordinator) RetryFrom(ctx context.Context, id string, from State) (*Job, error) {
	for range 16 {
		j, rec, err := c.readJob(ctx, id)
		if err != nil {
			return nil, err
		}
		if from != "" && j.State != from {
			return j, fmt.Errorf("%w: job %s is %s now, not %s: nothing done (look at it again before retrying it)", ErrWrongState, id, j.State, from)
		}
		switch j.State {
		case StateRunning:
			return j, fmt.Errorf("%w: job %s is running: it can be retried once it is discarded or cancelled (cancel it first to stop it)", ErrWrongState, id)
		case StateAvailable:
			return j, fmt.Errorf("%w: job %s is already available: it runs when a daemon serving queue %s is free", ErrWrongState, id, j.Queue)
		case StateCompleted:
			return j, fmt.Errorf("%w: job %s completed: only discarded, cancelled, scheduled and retryable jobs are retried; enqueue a new job to run it again", ErrWrongState, id)
		}
		old := c.keys.index(j)
		held := j.holdsUnique(j.State)
		now := c.clock.Now().UTC()
		if j.State.Final() {
			if j.Attempt >= j.MaxAttempts {
				j.MaxAttempts = j.Attempt + 1
			}
			j.Rescues = 0
			j.FinalizedAt = nil
			j.Owner, j.Token = "", 0
		}
		j.State, j.ScheduledAt = StateAvailable, now
		_, puts := c.keys.put(j)
		t := kv.Txn{
			If:   []kv.Cmp{kv.ModRevisionIs(rec.Key, kv.Equal, rec.ModRevision)},
			Then: append([]kv.Op{kv.Delete(old)}, puts...),
		}
		if j.UniqueKey != "" {
			uk := c.keys.unique(j.UniqueKey)
			t.Else = []kv.Op{kv.Get(uk)}
			if held {
				t.If = append(t.If, kv.Cmp{Key: uk, Target: kv.Value, Op: kv.Equal, Bytes: []byte(id)})
			} else {
				t.If = append(t.If, kv.Missing(uk))
				t.Then = append(t.Then, kv.Put(uk, []byte(id), 0))
			}
		}
		// Available again, the record is written twice (its queue's index
		// carries a copy), and it may have grown with errors and a
		// checkpoint since it last fitted: the store would refuse the write
		// with an error that says nothing of why (ADR 0018).
		if u := (unit{txn: t}); !c.fits(u) {
			return nil, fmt.Errorf("%w: job %s is too large to run again (its record and its queue's copy take %d bytes, the store takes %d in one request): enqueue a new job with a smaller payload", ErrInvalid, id, u.bytes(), c.limits.MaxBytes-requestOverhead)
		}
		res, err := c.store.Txn(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("coordinator: retry job %s: %w", id, err)
		}
		if res.Succeeded {
			return j, nil
		}
		if len(res.Results) > 0 && res.Results[0].KV != nil && string(res.Results[0].KV.Value) != id {
			cur, _ := c.Get(ctx, id)
			return cur, fmt.Errorf("%w: job %s has unique key %q, which job %s holds now: wait for that job or cancel it, then retry", ErrWrongState, id, j.UniqueKey, res.Results[0].KV.Value)
		}
	}
	return nil, fmt.Errorf("coordinator: retry job %s: %w", id, ErrConflict)
}

// Delete deletes a finished job (completed, discarded or cancelled) at once,
// without waiting for retention, and frees its unique key if it still held
// it. Deleting an unfinished job is ErrWrongState: cancel it first. It
// returns the job as it was.
func (c *Coordinator) Delete(ctx context.Context, id string) (*Job, error) {
	for range 16 {
		j, rec, err := c.readJob(ctx, id)
		if err != nil {
			return nil, err
		}
		if !j.State.Final() {
			return j, fmt.Errorf("%w: job %s is %s: only finished jobs (completed, discarded, cancelled) can be deleted; cancel it first", ErrWrongState, id, j.State)
		}
		idx := c.keys.index(j)
		then := []kv.Op{kv.Delete(rec.Key), kv.Delete(idx)}
		then = append(then, c.releaseHeldUnique(kv.KeyValue{Key: idx, Value: finishedIndexValue(j)})...)
		res, err := c.store.Txn(ctx, kv.Txn{
			If:   []kv.Cmp{kv.ModRevisionIs(rec.Key, kv.Equal, rec.ModRevision)},
			Then: then,
		})
		if err != nil {
			return nil, fmt.Errorf("coordinator: delete job %s: %w", id, err)
		}
		if res.Succeeded {
			return j, nil
		}
	}
	return nil, fmt.Errorf("coordinator: delete job %s: %w", id, ErrConflict)
}

// CancelFilter selects the jobs of a bulk cancel. Empty fields match all;
// State, if set, must be an unfinished state.
type CancelFilter struct {
	State State  `json:"state,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Queue string `json:"queue,omitempty"`
}

// CancelManyResult counts what a bulk cancel did.
type CancelManyResult struct {
	// Cancelled jobs were scheduled, available or retryable and are
	// cancelled now.
	Cancelled int `json:"cancelled"`
	// CancelRequested jobs were running: their daemons stop them.
	CancelRequested int `json:"cancel_requested"`
}

// CancelMany cancels every unfinished job that matches f, as Cancel does
// each (running jobs get a cancel request). It reads the state indexes,
// and cancels every 500 entries read in as few transactions as the store
// allows; a job that changed meanwhile is cancelled on its own. A job can
// move, while the indexes are read one after another, into one already
// read (promoted, given back, run again): it reads them again, each only
// for the entries written since its last read began, until a pass finds
// none of a job older than the call (ADR 0043). Jobs enqueued while it
// runs may or may not be cancelled.
func (c *Coordinator) CancelMany(ctx context.Context, f CancelFilter) (CancelManyResult, error) {
	var out CancelManyResult
	if f.State != "" {
		if _, err := ParseState(string(f.State)); err != nil {
			return out, err
		}
		if f.State.Final() {
			return out, fmt.Errorf("%w: state %s: finished jobs cannot be cancelled; filter on scheduled, available, running or retryable", ErrInvalid, f.State)
		}
	}
	if f.Kind != "" {
		if err := ValidateKind(f.Kind); err != nil {
			return out, err
		}
	}
	avail := c.keys.available()
	if f.Queue != "" {
		if err := ValidateQueue(f.Queue); err != nil {
			return out, err
		}
		avail = c.keys.queue(f.Queue)
	}
	var prefixes []string
	switch f.State {
	case "":
		prefixes = []string{avail, c.keys.timers(), c.keys.runningAll()}
	case StateAvailable:
		prefixes = []string{avail}
	case StateScheduled, StateRetryable:
		prefixes = []string{c.keys.timers()}
	case StateRunning:
		prefixes = []string{c.keys.runningAll()}
	}
	// Per index, what the last pass read: entries created at or before
	// base existed when its read began and were seen by it (index keys
	// are never rewritten in place: a job that moves away and back gets a
	// new entry), as were those in seen (created since, key -> create
	// revision). A pass reads only the other entries.
	type mark struct {
		base int64
		seen map[string]int64
	}
	marks := make([]mark, len(prefixes))
	var before int64 // a job whose record was created after it is newer than the call
	for pass := 0; ; pass++ {
		p := cancelPass{f: f, before: before, out: &out}
		for i, prefix := range prefixes {
			rr, err := c.store.Range(ctx, kv.RangeRequest{Start: prefix})
			if err != nil {
				return out, fmt.Errorf("coordinator: cancel jobs: list: %w", err)
			}
			if pass == 0 && i == 0 {
				before, p.before = rr.Revision, rr.Revision
			}
			prev := marks[i]
			next := mark{base: rr.Revision, seen: map[string]int64{}}
			// Read as scans are (on etcd, past the first page, in one pass:
			// pages of a large backlog would each walk the member's index to
			// the prefix's end), and cancel every 500 entries read.
			var page []kv.KeyValue
			var cerr error
			flush := func() error {
				if len(page) > 0 {
					cerr = c.cancelPage(ctx, page, &p)
					page = page[:0]
				}
				return cerr
			}
			err = c.scan(ctx, prefix, true, func(x kv.KeyValue) error {
				if pass > 0 && (x.CreateRevision <= prev.base || prev.seen[x.Key] == x.CreateRevision) {
					return nil
				}
				if x.CreateRevision > next.base {
					next.seen[x.Key] = x.CreateRevision
				}
				if page = append(page, x); len(page) == 500 {
					return flush()
				}
				return nil
			})
			if cerr != nil {
				return out, cerr
			}
			if err != nil {
				return out, fmt.Errorf("coordinator: cancel jobs: list: %w", err)
			}
			if err := flush(); err != nil {
				return out, err
			}
			marks[i] = next
		}
		if pass > 0 && p.older == 0 {
			return out, nil
		}
	}
}

// cancelPass is one pass of CancelMany over the indexes.
type cancelPass struct {
	f      CancelFilter
	before int64 // the store revision the call began at
	out    *CancelManyResult
	// older counts the jobs of the pass that match, are unfinished and
	// are older than the call (their records were created at or before
	// before).
	older int
}

// cancelPage cancels the jobs of one page of index entries that match f.
func (c *Coordinator) cancelPage(ctx context.Context, idx []kv.KeyValue, p *cancelPass) error {
	f, out := p.f, p.out
	jkeys := make([]string, len(idx))
	for i, x := range idx {
		jkeys[i] = c.keys.job(idFromIndex(x.Key))
	}
	recs, err := c.getMany(ctx, jkeys)
	if err != nil {
		return fmt.Errorf("coordinator: cancel jobs: read: %w", err)
	}
	now := c.clock.Now().UTC()
	var units []unit
	var jobs []*Job
	for _, rec := range recs {
		if rec == nil {
			continue
		}
		j, err := decodeKV(rec)
		if err != nil {
			c.log.Error("cancel: skipping corrupt job record", slog.Any("err", err))
			continue
		}
		if j.State.Final() || (f.State != "" && j.State != f.State) || (f.Kind != "" && j.Kind != f.Kind) || (f.Queue != "" && j.Queue != f.Queue) {
			continue
		}
		if rec.CreateRevision <= p.before {
			p.older++
		}
		if j.State == StateRunning {
			units = append(units, unit{txn: c.cancelRequest(j, now)})
		} else {
			old := c.keys.index(j)
			j.State, j.FinalizedAt = StateCancelled, &now
			_, puts := c.keys.put(j)
			then := append([]kv.Op{kv.Delete(old)}, puts...)
			units = append(units, unit{txn: kv.Txn{
				If:   []kv.Cmp{kv.ModRevisionIs(rec.Key, kv.Equal, rec.ModRevision)},
				Then: append(then, c.keys.releaseUnique(j)...),
			}})
		}
		jobs = append(jobs, j)
	}
	if len(units) == 0 {
		return nil
	}
	res, _, err := c.runUnits(ctx, units)
	if err != nil {
		return fmt.Errorf("coordinator: cancel %d jobs: %w", len(units), err)
	}
	for i, r := range res {
		j := jobs[i]
		if r != nil && r.Succeeded {
			if j.State == StateRunning {
				out.CancelRequested++
			} else {
				out.Cancelled++
			}
			continue
		}
		// It changed meanwhile (claimed, finished): decide again.
		cur, err := c.Cancel(ctx, j.ID)
		switch {
		case errors.Is(err, ErrNotFound) || errors.Is(err, ErrWrongState):
			// Finished, or deleted, meanwhile: nothing to cancel.
		case err != nil:
			return err
		case cur.CancelRequested:
			out.CancelRequested++
		default:
			out.Cancelled++
		}
	}
	return nil
}
