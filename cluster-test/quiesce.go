package main

import (
	"fmt"
	"time"
)

// Why a quiesce period ended (Report.QuiesceEnd, CheckInput.QuiesceEnd).
const (
	quiesceAllFinal = "all final"   // no job left open
	quiesceStalled  = "stalled"     // no job finished for --quiesce
	quiesceCapped   = "capped"      // --quiesce-max passed while jobs still finished
	quiesceStopped  = "interrupted" // the run was interrupted
)

// quiescer decides when the quiesce period ends. Jobs left open when no
// job has finished for idle are stuck: the checker counts them as lost. A
// backlog that the daemons are still working through (one daemon
// restarted every few seconds falls behind a high --rate) keeps the
// period going, up to max in all; what is open then is reported as an
// undrained backlog, not as jobs no daemon will run.
type quiescer struct {
	idle, max time.Duration
	start     time.Time
	progress  time.Time // when the fewest open jobs seen last fell
	fewest    int       // -1 until the first read
}

func newQuiescer(start time.Time, idle, max time.Duration) *quiescer {
	return &quiescer{idle: idle, max: max, start: start, progress: start, fewest: -1}
}

// observe records a read at now that found open jobs not final; it
// returns why the period ends, or "" while it goes on. A failed read is
// not observed: it counts as no progress.
func (q *quiescer) observe(now time.Time, open int) string {
	if open == 0 {
		return quiesceAllFinal
	}
	if q.fewest < 0 || open < q.fewest {
		q.fewest, q.progress = open, now
	}
	return q.check(now)
}

// check returns why the period ends at now, or "".
func (q *quiescer) check(now time.Time) string {
	switch {
	case now.Sub(q.progress) >= q.idle:
		return quiesceStalled
	case now.Sub(q.start) >= q.max:
		return quiesceCapped
	}
	return ""
}

// describe says, for a job not final at the end, how the period ended.
func describeQuiesce(end string, idle, max time.Duration) string {
	switch end {
	case quiesceStalled:
		return fmt.Sprintf("no job finished for %s", idle)
	case quiesceCapped:
		return fmt.Sprintf("jobs were still finishing when --quiesce-max %s passed: an undrained backlog (lower --rate, or raise --concurrency or --quiesce-max)", max)
	}
	return end
}
