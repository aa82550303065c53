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
