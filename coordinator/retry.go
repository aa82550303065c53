package coordinator

import (
	"math"
	"time"
)

// RetryPolicy returns how long to wait before the next attempt, after
// attempt (1-based) failed. One that panics does not end the process:
// the attempt fails all the same, and another policy gives the wait
// (Config.RetryPolicy, worker.KindOptions.RetryPolicy).
type RetryPolicy func(attempt int, j *Job) time.Duration

// MaxRetryDelay caps DefaultRetryPolicy.
const MaxRetryDelay = 24 * time.Hour

// DefaultRetryPolicy is River's: attempt^4 seconds, plus up to 10% jitter,
// capped at MaxRetryDelay (1s, 16s, 81s, 4m16s, 10m25s, ...). The cap
// holds with the jitter: past it, the delay is the cap less up to 10%, so
// that jobs failing together at the cap still spread out.
func DefaultRetryPolicy(attempt int, _ *Job) time.Duration {
	d := time.Duration(math.Min(math.Pow(float64(max(attempt, 1)), 4), MaxRetryDelay.Seconds())) * time.Second
	if d += jitter(d / 10); d > MaxRetryDelay {
		d = MaxRetryDelay - jitter(MaxRetryDelay/10)
	}
	return d
}
