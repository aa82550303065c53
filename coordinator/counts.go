package coordinator

import (
	"context"
	"fmt"
	"strings"

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
	out := map[string]int{}
	var old []string
	prefix := c.keys.runningAll()
	if err := c.scan(ctx, prefix, false, func(x kv.KeyValue) error {
		if _, q, ok := strings.Cut(string(x.Value), "\n"); ok {
			out[q]++
		} else {
			old = append(old, c.keys.job(strings.TrimPrefix(x.Key, prefix)))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("coordinator: count running jobs by queue: %w", err)
	}
	if len(old) > 0 {
		recs, err := c.getMany(ctx, old)
		if err != nil {
			return nil, fmt.Errorf("coordinator: count running jobs by queue: %w", err)
		}
		for _, rec := range recs {
			if rec == nil {
				continue // finished meanwhile
			}
			if j, err := decodeKV(rec); err == nil && j.State == StateRunning {
				out[j.Queue]++
			}
		}
	}
	return out, nil
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
	out := RunningOwners{Count: map[string]int{}, Jobs: map[string][]*Job{}}
	want := make(map[string]bool, len(owners))
	for _, o := range owners {
		want[o] = true
	}
	prefix := c.keys.runningAll()
	var ids []string
	if err := c.scan(ctx, prefix, false, func(x kv.KeyValue) error {
		owner, _, _ := strings.Cut(string(x.Value), "\n")
		out.Count[owner]++
		if want[owner] && out.Count[owner] <= n {
			ids = append(ids, strings.TrimPrefix(x.Key, prefix))
		}
		return nil
	}); err != nil {
		return RunningOwners{}, fmt.Errorf("coordinator: count running jobs by owner: %w", err)
	}
	keys := make([]string, 0, 2*len(ids))
	for _, id := range ids {
		keys = append(keys, c.keys.job(id), c.keys.cancel(id))
	}
	recs, err := c.getMany(ctx, keys)
	if err != nil {
		return RunningOwners{}, fmt.Errorf("coordinator: read running jobs: %w", err)
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
		out.Jobs[j.Owner] = append(out.Jobs[j.Owner], j)
	}
	return out, nil
}
