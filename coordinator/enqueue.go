package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
	"golang.org/x/sync/errgroup"
)

// Enqueue inserts one job and returns once it is durable. It checks the job
// itself, not whether any worker runs its kind or serves its queue: a job
// of a kind no handler runs fails each attempt ("no handler for kind")
// until it is discarded, and one in a queue no worker serves waits. The
// client package (client.New over this coordinator) refuses kinds that no
// live daemon runs, as the daemon's API does.
func (c *Coordinator) Enqueue(ctx context.Context, p EnqueueParams) (EnqueueResult, error) {
	res, err := c.EnqueueBatch(ctx, []EnqueueParams{p})
	if err != nil {
		return EnqueueResult{}, err
	}
	return res[0], nil
}

// EnqueueBatch validates every job first, so that bad input writes nothing,
// then inserts them and returns once they are durable. A job with a unique
// key that matches a live job returns that job with Existed set; so does a
// job whose key an earlier job of the batch has: it is answered with what
// that job's enqueue returned, and nothing is written for it. Batches
// larger than one transaction of the store are applied in several
// transactions, concurrently; if one fails, the error says how many jobs were
// not acknowledged and none of them should be assumed inserted, nor left
// out: one that the store refuses as too large (a limit lower than
// kv.Store.Limits says) while others may have been applied is no refusal
// of the batch, and its error does not wrap kv.ErrTxnTooLarge. A store
// short of room ([kv.SpaceChecker]) refuses the batch whole, with an error
// wrapping kv.ErrNoSpace, before writing anything, unless every job of it
// has a unique key that a job holds: that batch writes nothing, and is
// answered with those jobs.
func (c *Coordinator) EnqueueBatch(ctx context.Context, ps []EnqueueParams) ([]EnqueueResult, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	now := c.clock.Now().UTC()
	all := make([]*Job, len(ps))
	// The batch's later duplicates: job index -> the earlier job with its
	// unique key, which answers for it. Only the others are written.
	dupOf := map[int]int{}
	seen := make(map[string]int)
	for i := range ps {
		p := ps[i]
		j, err := c.buildJob(ctx, &p, now)
		if err != nil {
			if len(ps) > 1 {
				return nil, fmt.Errorf("job %d: %w", i, err)
			}
			return nil, err
		}
		all[i] = j
		if j.UniqueKey != "" {
			if k, dup := seen[j.UniqueKey]; dup {
				dupOf[i] = k
				continue
			}
			seen[j.UniqueKey] = i
		}
	}

	units := make([]unit, len(all))
	for i, j := range all {
		_, puts := c.keys.put(j)
		t := kv.Txn{Then: puts}
		if j.UniqueKey != "" {
			uk := c.keys.unique(j.UniqueKey)
			t.If = []kv.Cmp{kv.Missing(uk)}
			t.Then = append(t.Then, kv.Put(uk, []byte(j.ID), 0))
			t.Else = []kv.Op{kv.Get(uk)}
		}
		units[i] = unit{txn: t}
		// An available job is written twice (its record, and its queue's
		// index entry carries it too), and JSON escaping can make a
		// record larger than its payload: check what the store can take
		// in one transaction before anything is written. A scheduled job
		// is written once now but twice when it falls due: it must fit
		// then too, or promotion could only discard it.
		size := units[i].bytes()
		if j.State != StateAvailable {
			size = max(size, c.dueBytes(j))
		}
		if !c.fitsBytes(size) {
			err := fmt.Errorf("%w: job is %d bytes as stored (an available job twice: its record and its queue's copy), over the %d bytes the store takes in one request: use a smaller payload or metadata", ErrInvalid, size, c.limits.MaxBytes-requestOverhead)
			if len(ps) > 1 {
				return nil, fmt.Errorf("job %d: %w", i, err)
			}
			return nil, err
		}
	}

	jobs, at := all, []int(nil) // at[n]: the batch index of jobs[n]
	if len(dupOf) > 0 {
		jobs, at = make([]*Job, 0, len(all)-len(dupOf)), make([]int, 0, len(all)-len(dupOf))
		kept := make([]unit, 0, cap(jobs))
		for i, j := range all {
			if _, dup := dupOf[i]; !dup {
				jobs, at, kept = append(jobs, j), append(at, i), append(kept, units[i])
			}
		}
		units = kept
	}

	// A store short of room refuses new jobs here, after the input is
	// known to be good and before anything is written; the jobs it holds
	// go on (kv.SpaceChecker). A batch whose unique keys are all held
	// (a retry after an unknown outcome) writes nothing: it is answered
	// (a key freed meanwhile lets its job in: a reserve, not a quota).
	if err := c.checkSpace(len(jobs)); err != nil {
		if held, rerr := c.uniqueKeysHeld(ctx, jobs); rerr != nil || !held {
			return nil, fmt.Errorf("coordinator: enqueue %s: %w", jobCount(len(jobs)), err)
		}
	}

	// Chunks are independent: apply them concurrently so a large batch on
	// etcd is not a chain of round trips.
	chunks := c.chunk(units)
	results := make([][]*kv.TxnResult, len(chunks))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, ch := range chunks {
		g.Go(func() error {
			r, _, err := c.runUnits(gctx, ch)
			results[i] = r
			return err
		})
	}
	if err := g.Wait(); err != nil {
		if len(chunks) > 1 && errors.Is(err, kv.ErrTxnTooLarge) {
			// The store refused one transaction (its limit lower than
			// this process was told), not the batch: another may have
			// been applied. Its sentinel would say nothing was written
			// (a 413, ErrInvalid in the clients), and jobs sent again
			// in smaller batches would be enqueued twice.
			return nil, fmt.Errorf("coordinator: enqueue %s in %d transactions: the store refused one as too large (its request limit is lower than this process was told), and the others may have been applied: some of the jobs may have been enqueued: %v", jobCount(len(jobs)), len(chunks), err)
		}
		return nil, fmt.Errorf("coordinator: enqueue %s: %w", jobCount(len(jobs)), err)
	}

	out := make([]EnqueueResult, 0, len(jobs))
	existing := map[int]string{} // index in jobs -> the id holding its unique key
	for _, rs := range results {
		for _, r := range rs {
			i := len(out)
			if r.Succeeded {
				out = append(out, EnqueueResult{Job: jobs[i]})
				continue
			}
			out = append(out, EnqueueResult{Existed: true})
			existing[i] = string(r.Results[0].KV.Value)
		}
	}
	// Unique hits: return the live job. It can finish (and release its key)
	// between the insert and this read; then report it as it is now. If it
	// was deleted meanwhile (retention, an operator), its key is free or
	// held by a newer job: try the insert again.
	for attempt := 0; len(existing) > 0; attempt++ {
		var again []int
		for i, id := range existing {
			j, err := c.Get(ctx, id)
			if errors.Is(err, ErrNotFound) && attempt < 8 {
				again = append(again, i)
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("coordinator: read existing job for unique key %q: %w", jobs[i].UniqueKey, err)
			}
			out[i].Job = j
		}
		existing = map[int]string{}
		if len(again) == 0 {
			break
		}
		sort.Ints(again)
		retry := make([]unit, len(again))
		for k, i := range again {
			retry[k] = units[i]
		}
		rs, _, err := c.runUnits(ctx, retry)
		if err != nil {
			return nil, fmt.Errorf("coordinator: enqueue %s: %w", jobCount(len(again)), err)
		}
		for k, r := range rs {
			i := again[k]
			if r.Succeeded {
				out[i] = EnqueueResult{Job: jobs[i]}
				continue
			}
			existing[i] = string(r.Results[0].KV.Value)
		}
	}
	if at == nil {
		return out, nil
	}
	// Spread the written jobs' results over the batch; each duplicate gets
	// its earlier job's, as an existing job.
	full := make([]EnqueueResult, len(all))
	for n, i := range at {
		full[i] = out[n]
	}
	for i, k := range dupOf {
		j := *full[k].Job
		full[i] = EnqueueResult{Job: &j, Existed: true}
	}
	return full, nil
}

// dueBytes is the size of the transaction that makes scheduled job j
// available when it falls due (as promotion writes it: its record, and its
// queue's index entry with a copy).
func (c *Coordinator) dueBytes(j *Job) int {
	due := *j
	due.State = StateAvailable
	_, puts := c.keys.put(&due)
	return unit{txn: kv.Txn{
		If:   []kv.Cmp{kv.ModRevisionIs(c.keys.job(j.ID), kv.Equal, 0)},
		Then: append([]kv.Op{kv.Delete(c.keys.index(j))}, puts...),
	}}.bytes()
}

// EnqueueHook runs before a job is validated and inserted (see
// Config.EnqueueHooks). It may change p (set metadata, a queue, a unique
// key); an error refuses the whole enqueue, and nothing is written: the
// enqueue's error wraps ErrEnqueueRefused and the hook's error. A panic
// refuses it as an error does, an error wrapping ErrCallbackPanicked, and
// is logged with its stack (Coordinator.CallUser). Through the daemon's
// API a refusal is answered 422 with the hook's message (400 if its error
// wraps ErrInvalid).
type EnqueueHook func(ctx context.Context, p *EnqueueParams) error

// checkSpace asks a store that can run short of room ([kv.SpaceChecker])
// whether it takes n new jobs; nil for none.
func (c *Coordinator) checkSpace(n int) error {
	if sc, ok := c.store.(kv.SpaceChecker); ok && n > 0 {
		return sc.CheckSpace()
	}
	return nil
}

// uniqueKeysHeld reports whether every job has a unique key that a job
// holds, so that enqueueing them writes nothing. It reads the keys with
// getMany, in as few transactions as the store allows.
func (c *Coordinator) uniqueKeysHeld(ctx context.Context, jobs []*Job) (bool, error) {
	keys := make([]string, len(jobs))
	for i, j := range jobs {
		if j.UniqueKey == "" {
			return false, nil
		}
		keys[i] = c.keys.unique(j.UniqueKey)
	}
	held, err := c.getMany(ctx, keys)
	if err != nil {
		return false, err
	}
	return !slices.Contains(held, nil), nil
}

// buildJob runs the enqueue hooks on p, validates it, and returns the job
// it describes. It writes nothing.
func (c *Coordinator) buildJob(ctx context.Context, p *EnqueueParams, now time.Time) (*Job, error) {
	for i, h := range c.cfg.EnqueueHooks {
		var err error
		if perr := c.CallUser("coordinator.Config.EnqueueHooks", nil, func() { err = h(ctx, p) }); perr != nil {
			err = perr
		}
		if err != nil {
			return nil, fmt.Errorf("%w: hook %d of %d: %w (nothing written)", ErrEnqueueRefused, i+1, len(c.cfg.EnqueueHooks), err)
		}
	}
	if err := p.normalize(c.cfg.MaxPayloadBytes); err != nil {
		return nil, err
	}
	return c.jobOf(p, now)
}

// jobOf returns the job that normalized p describes, enqueued at now.
func (c *Coordinator) jobOf(p *EnqueueParams, now time.Time) (*Job, error) {
	j := &Job{
		ID:          c.newID(now),
		Kind:        p.Kind,
		Queue:       p.Queue,
		Priority:    p.Priority,
		State:       StateAvailable,
		Payload:     p.Payload,
		MaxAttempts: p.MaxAttempts,
		Errors:      []AttemptError{},
		CreatedAt:   now,
		ScheduledAt: now,
		TimeoutMS:   p.Timeout.Milliseconds(),
		UniqueKey:   deriveUniqueKey(p, now),
		Metadata:    p.Metadata,
	}
	if p.Unique != nil {
		j.UniqueStates = p.Unique.finalStates()
	}
	if len(j.UniqueKey) > 4*maxUniqueKeyLen {
		return nil, fmt.Errorf("%w: unique key is %d bytes: use a shorter kind, queue or key", ErrInvalid, len(j.UniqueKey))
	}
	if p.ScheduledAt.After(now) {
		j.State = StateScheduled
		j.ScheduledAt = p.ScheduledAt.UTC()
	}
	return j, nil
}

// jobCount is "1 job" or "N jobs", for messages.
func jobCount(n int) string {
	if n == 1 {
		return "1 job"
	}
	return fmt.Sprintf("%d jobs", n)
}
