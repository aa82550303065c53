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
