package coordinator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// AvailableByQueue returns the number of available jobs of each queue that
// has any, read from the availability index keys (no record reads): what
// Counts reads for StateAvailable, split by queue. The other states are
// indexed without their queue, so counting them by queue would read every
// record; callers that need it for a few jobs (running ones) list them.
func (c *Coordinator) AvailableByQueue(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	prefix := c.keys.available()
	if err := c.scan(ctx, prefix, true, func(x kv.KeyValue) error {
		q, _, ok := strings.Cut(strings.TrimPrefix(x.Key, prefix), "/")
		if ok {
			out[q]++
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("coordinator: count available jobs by queue: %w", err)
	}
	return out, nil
}

// runningValue is the value of a running job's index entry r/ID: its owner
// and, after a newline, its queue (so that running jobs are counted by
// queue without reading their records). Entries written before 2026-12
// hold the owner alone.
func runningValue(owner, queue string) []byte { return []byte(owner + "\n" + queue) }

// RunningByQueue returns the number of running jobs of each queue that has
// any, read from the running index's small values (the records, payloads
// and all, are read only for entries of daemons older than the queue in
// the value).
func (c *Coordinator) RunningByQueue(ctx context.Context) (map[string]int, error) {
	rt := c.newRunningTally(0, nil)
	if err := c.scan(ctx, c.keys.runningAll(), false, rt.visit); err != nil {
		return nil, fmt.Errorf("coordinator: count running jobs by queue: %w", err)
	}
	if err := rt.byQueue(ctx); err != nil {
		return nil, err
	}
	return rt.queues, nil
}

// RunningOwners is what RunningByOwner returns.
type RunningOwners struct {
	// Count is the number of running jobs of each owner (worker id).
	Count map[string]int
	// Jobs holds up to n running jobs of each owner asked for, the first
	// in id (creation) order, with their pending cancel requests.
	Jobs map[string][]*Job
}

// RunningByOwner counts the running jobs of every owner from the running
// index's small values, and reads the records of the first n jobs of each
// of owners and no others: a view of thousands of running jobs reads a few
// records per daemon shown, not one per job.
func (c *Coordinator) RunningByOwner(ctx context.Context, n int, owners []string) (RunningOwners, error) {
	rt := c.newRunningTally(n, owners)
	if err := c.scan(ctx, c.keys.runningAll(), false, rt.visit); err != nil {
		return RunningOwners{}, fmt.Errorf("coordinator: count running jobs by owner: %w", err)
	}
	if err := rt.ownersJobs(ctx); err != nil {
		return RunningOwners{}, err
	}
	return rt.owners, nil
}

// runningTally is what one read of the running index gives: the running
// jobs of each queue and of each owner, and the first n jobs of the owners
// wanted (RunningByQueue, RunningByOwner and RecentTally share it).
type runningTally struct {
	c      *Coordinator
	n      int
	want   map[string]bool
	queues map[string]int
	owners RunningOwners
	old    []string // records of entries without their queue
	ids    []string // the jobs of the owners wanted, to read
}

func (c *Coordinator) newRunningTally(n int, owners []string) *runningTally {
	rt := &runningTally{c: c, n: n, want: make(map[string]bool, len(owners)), queues: map[string]int{},
		owners: RunningOwners{Count: map[string]int{}, Jobs: map[string][]*Job{}}}
	for _, o := range owners {
		rt.want[o] = true
	}
	return rt
}

// visit counts one entry of the running index.
func (rt *runningTally) visit(x kv.KeyValue) error {
	prefix := rt.c.keys.runningAll()
	owner, q, ok := strings.Cut(string(x.Value), "\n")
	if ok {
		rt.queues[q]++
	} else {
		rt.old = append(rt.old, rt.c.keys.job(strings.TrimPrefix(x.Key, prefix)))
	}
	rt.owners.Count[owner]++
	if rt.want[owner] && rt.owners.Count[owner] <= rt.n {
		rt.ids = append(rt.ids, strings.TrimPrefix(x.Key, prefix))
	}
	return nil
}

// byQueue counts by queue the entries without their queue, from their
// records.
func (rt *runningTally) byQueue(ctx context.Context) error {
	if len(rt.old) == 0 {
		return nil
	}
	recs, err := rt.c.getMany(ctx, rt.old)
	if err != nil {
		return fmt.Errorf("coordinator: count running jobs by queue: %w", err)
	}
	for _, rec := range recs {
		if rec == nil {
			continue // finished meanwhile
		}
		if j, err := decodeKV(rec); err == nil && j.State == StateRunning {
			rt.queues[j.Queue]++
		}
	}
	return nil
}

// ownersJobs reads the records of the jobs of the owners wanted, with
// their cancel requests.
func (rt *runningTally) ownersJobs(ctx context.Context) error {
	if len(rt.ids) == 0 {
		return nil
	}
	keys := make([]string, 0, 2*len(rt.ids))
	for _, id := range rt.ids {
		keys = append(keys, rt.c.keys.job(id), rt.c.keys.cancel(id))
	}
	recs, err := rt.c.getMany(ctx, keys)
	if err != nil {
		return fmt.Errorf("coordinator: read running jobs: %w", err)
	}
	for i := 0; i+1 < len(recs); i += 2 {
		if recs[i] == nil {
			continue // finished and purged meanwhile
		}
		j, err := decodeKV(recs[i])
		if err != nil || j.State != StateRunning {
			continue // finished meanwhile; a corrupt record is the job page's to report
		}
		j.CancelRequested = recs[i+1] != nil
		rt.owners.Jobs[j.Owner] = append(rt.owners.Jobs[j.Owner], j)
	}
	return nil
}

// Tally is what RecentTally returns: one read of the unfinished states'
// indexes, counted in several ways.
type Tally struct {
	// Counts and CountedAt are what RecentCounts returns.
	Counts    map[State]int
	CountedAt time.Time
	// AvailableByQueue and RunningByQueue are what the methods of those
	// names return, from the same reads as Counts.
	AvailableByQueue map[string]int
	RunningByQueue   map[string]int
	// Running is what RunningByOwner returns for TallyParams.JobsPerOwner
	// and Owners.
	Running RunningOwners
}

// TallyParams says which running jobs RecentTally reads the records of:
// the first JobsPerOwner of each of Owners, as RunningByOwner does.
type TallyParams struct {
	Owners       []string
	JobsPerOwner int
}

// RecentTally is RecentCounts, AvailableByQueue, RunningByQueue and
// RunningByOwner at the cost of RecentCounts: it reads the available and
// running indexes once each, where calling those methods one after the
// other reads each index twice or three times (a metrics scrape and the
// dashboard's overview need them all, and a large index costs its read at
// every call).
func (c *Coordinator) RecentTally(ctx context.Context, p TallyParams) (Tally, error) {
	fin, err := c.countFinished(ctx)
	if err != nil {
		return Tally{}, err
	}
	var t Tally
	var rt *runningTally
	read := func() (first, last int64, err error) {
		t.Counts, t.AvailableByQueue = newCounts(), map[string]int{}
		rt = c.newRunningTally(p.JobsPerOwner, p.Owners)
		prefix := c.keys.available()
		if first, _, err = c.scanRevs(ctx, prefix, true, func(x kv.KeyValue) error {
			t.Counts[StateAvailable]++
			if q, _, ok := strings.Cut(strings.TrimPrefix(x.Key, prefix), "/"); ok {
				t.AvailableByQueue[q]++
			}
			return nil
		}); err != nil {
			return 0, 0, fmt.Errorf("coordinator: count jobs: %w", err)
		}
		if _, _, err = c.countInto(ctx, t.Counts, []string{c.keys.timers()}); err != nil {
			return 0, 0, err
		}
		if _, last, err = c.scanRevs(ctx, c.keys.runningAll(), false, func(x kv.KeyValue) error {
			t.Counts[StateRunning]++
			return rt.visit(x)
		}); err != nil {
			return 0, 0, fmt.Errorf("coordinator: count jobs: %w", err)
		}
		return first, last, nil
	}
	first, last, err := read()
	// As confirmPending: counts that say nothing is pending are read
	// again until one read saw no write between its first and last page.
	for i := 0; err == nil && i < 8 && first != last && !pending(t.Counts); i++ {
		first, last, err = read()
	}
	if err != nil {
		return Tally{}, err
	}
	if err := rt.byQueue(ctx); err != nil {
		return Tally{}, err
	}
	if err := rt.ownersJobs(ctx); err != nil {
		return Tally{}, err
	}
	for st, n := range fin.counts {
		t.Counts[st] = n
	}
	t.CountedAt, t.RunningByQueue, t.Running = fin.at, rt.queues, rt.owners
	return t, nil
}

// pending reports whether counts hold an unfinished job.
func pending(counts map[State]int) bool {
	return counts[StateScheduled]+counts[StateAvailable]+counts[StateRunning]+counts[StateRetryable] > 0
}

// The counts of the finished states that RecentCounts returns are counted
// again once they are older than finishedRecountFactor times as long as
// their last count took, but no sooner than finishedRecountMin and no later
// than finishedRecountMax after it began: counting them then takes at most
// 0.1 % of a process's time, or one count a minute once a count takes
// 60 ms or more (about 200,000 kept jobs on Pebble). A small namespace's
// counts stay about 1 s old.
const (
	finishedRecountFactor = 1000
	finishedRecountMin    = time.Second
	finishedRecountMax    = time.Minute
)

// finishedCounts keeps the last count of the finished index for
// RecentCounts, and shares a recount under way between its callers.
type finishedCounts struct {
	mu     sync.Mutex
	last   *finishedCount // nil before the first count
	flight *finishedCount // the recount under way, if any
	// joined, if set, is called when a caller waits for the recount
	// under way (tests).
	joined func()
}

// finishedCount is one count of the finished index. Its fields other than
// done are set before done is closed and not changed after.
type finishedCount struct {
	done   chan struct{}
	counts map[State]int
	at     time.Time // when the count began
	took   time.Duration
	err    error
	// abandoned: err is the end of the counting caller's context, not
	// the store's answer.
	abandoned bool
}

// fresh reports whether the count is recent enough to use at now (a clock
// stepped back before it began makes it stale).
func (f *finishedCount) fresh(now time.Time) bool {
	age := now.Sub(f.at)
	return age >= 0 && age < min(finishedRecountMax, max(finishedRecountMin, finishedRecountFactor*f.took))
}

// RecentCounts is Counts for gauges, read often by many processes (each
// metrics scrape, the dashboard's reloads): the unfinished states are read
// at each call, as Counts reads them (a count that says that nothing is
// pending is confirmed), but the finished states, whose index holds every
// job kept until retention removes it, come from a count that began at the
// returned time. That count is made again once it is older than 1,000
// times as long as it took, at least 1 s and at most 60 s after it began;
// callers that need it while it is made wait for it and share it.
//
// Jobs that finished after that time are counted in no state. Counts is
// exact at the time of the call.
func (c *Coordinator) RecentCounts(ctx context.Context) (map[State]int, time.Time, error) {
	fin, err := c.countFinished(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	out := newCounts()
	first, last, err := c.countInto(ctx, out, c.unfinishedIndexes())
	if err != nil {
		return nil, time.Time{}, err
	}
	if err := c.confirmPending(ctx, out, first, last); err != nil {
		return nil, time.Time{}, err
	}
	for st, n := range fin.counts {
		out[st] = n
	}
	return out, fin.at, nil
}

// countFinished returns the last count of the finished index if it is
// fresh, else the recount under way, else a new count.
func (c *Coordinator) countFinished(ctx context.Context) (*finishedCount, error) {
	fc := &c.finished
	for {
		now := c.clock.Now()
		fc.mu.Lock()
		if f := fc.last; f != nil && f.fresh(now) {
			fc.mu.Unlock()
			return f, nil
		}
		if f := fc.flight; f != nil {
			joined := fc.joined
			fc.mu.Unlock()
			if joined != nil {
				joined()
			}
			select {
			case <-f.done:
			case <-ctx.Done():
				return nil, fmt.Errorf("coordinator: count jobs: %w", ctx.Err())
			}
			if f.abandoned && ctx.Err() == nil {
				continue // its caller gave up, this one has not: count
			}
			return f, f.err
		}
		f := &finishedCount{done: make(chan struct{}), counts: map[State]int{}, at: now}
		fc.flight = f
		fc.mu.Unlock()
		c.recountFinished(ctx, f)
		return f, f.err
	}
}

// recountFinished makes the count f, flown by countFinished, and hands it
// to the callers waiting for it, also when the read does not return (a
// panic the caller recovers, an HTTP handler's say): they then count
// themselves rather than wait for it until their contexts end.
func (c *Coordinator) recountFinished(ctx context.Context, f *finishedCount) {
	fc := &c.finished
	f.abandoned = true // until the read returns
	defer func() {
		fc.mu.Lock()
		fc.flight = nil
		if f.err == nil && !f.abandoned {
			fc.last = f
		}
		fc.mu.Unlock()
		close(f.done)
	}()
	_, _, f.err = c.countInto(ctx, f.counts, []string{c.keys.finished()})
	f.took = c.clock.Now().Sub(f.at)
	f.abandoned = f.err != nil && ctx.Err() != nil
}
