package main

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
)

func TestQuiescer(t *testing.T) {
	const idle, max = 60 * time.Second, 10 * time.Minute
	type read struct {
		at   float64 // seconds after the start
		open int     // -1: the read failed
		want string
	}
	for _, tc := range []struct {
		name  string
		reads []read
	}{
		{"all final", []read{{1, 5, ""}, {2, 0, quiesceAllFinal}}},
		{"stuck", []read{{1, 3, ""}, {30, 3, ""}, {61, 3, quiesceStalled}}},
		{"a backlog draining goes on past idle", []read{{1, 900, ""}, {50, 600, ""}, {100, 300, ""}, {150, 1, ""}, {160, 0, quiesceAllFinal}}},
		{"a backlog that stops draining is stuck", []read{{1, 900, ""}, {50, 2, ""}, {109, 2, ""}, {110, 2, quiesceStalled}}},
		// A count that rises again (a job retried) is no progress.
		{"a rise is no progress", []read{{1, 4, ""}, {2, 3, ""}, {30, 5, ""}, {61, 4, ""}, {62, 4, quiesceStalled}}},
		{"failed reads are no progress", []read{{1, 4, ""}, {30, -1, ""}, {61, -1, quiesceStalled}}},
		{"capped while still draining", []read{{1, 100000, ""}, {300, 50000, ""}, {599, 20000, ""}, {600, 19000, quiesceCapped}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1_700_000_000, 0)
			q := newQuiescer(start, idle, max)
			for _, r := range tc.reads {
				now := start.Add(time.Duration(r.at * float64(time.Second)))
				var got string
				if r.open < 0 {
					got = q.check(now)
				} else {
					got = q.observe(now, r.open)
				}
				if got != r.want {
					t.Fatalf("at %gs, %d open: ended %q, want %q", r.at, r.open, got, r.want)
				}
			}
		})
	}
}

// A job left open when the quiesce period reached its cap while jobs were
// still finishing is reported as undrained, not lost; one left open when
// nothing finished for --quiesce is lost, and says so.
func TestUnfinishedJobsByHowTheQuiesceEnded(t *testing.T) {
	for _, tc := range []struct {
		end, kind, detail string
	}{
		{quiesceCapped, "undrained", "an undrained backlog"},
		{quiesceStalled, "lost", "no job finished for 1m0s"},
		{"", "lost", "after the quiesce period: state available"},
	} {
		w := cleanWorld()
		w.enqueue("01JF000000000000000000000A", 2)
		w.final("01JF000000000000000000000A", coordinator.StateAvailable, "", 0)
		w.in.Final["01JF000000000000000000000A"].FinalizedAt = nil
		w.in.QuiesceEnd, w.in.Quiesce, w.in.QuiesceMax = tc.end, time.Minute, 10*time.Minute
		res := Check(w.in)
		wantKind(t, res, tc.kind)
		lost, undrained := len(res.Lost), len(res.Undrained)
		if tc.kind == "lost" && (lost != 1 || undrained != 0) || tc.kind == "undrained" && (lost != 0 || undrained != 1) {
			t.Fatalf("quiesce %q: lost %v, undrained %v; want the job %s", tc.end, res.Lost, res.Undrained, tc.kind)
		}
		if d := res.Violations[len(res.Violations)-1].Detail; !strings.Contains(d, tc.detail) {
			t.Errorf("quiesce %q: %s; want it to say %q", tc.end, d, tc.detail)
		}
		if line := summaryLine(res, 1); tc.kind == "undrained" && !strings.Contains(line, "lost 0, undrained 1") {
			t.Errorf("summary %q; want lost 0, undrained 1", line)
		}
	}
}

// The progress line counts down to the estimate, then says the run is past
// it (a quiesce still draining) with the jobs not final, not "ETA 0s".
func TestProgressLinePastTheEstimate(t *testing.T) {
	for _, tc := range []struct {
		el   time.Duration
		cur  string
		want string
	}{
		{90 * time.Second, "kill d2", "[1m30s] quiesce: 900 jobs (10.0/s), faults 3/4: kill d2, ETA 30s"},
		{150 * time.Second, "120 jobs not final", "[2m30s] quiesce: 900 jobs (6.0/s), faults 3/4: 120 jobs not final, past the estimate"},
	} {
		if got := progressLine(tc.el, 2*time.Minute, "quiesce", 900, 3, 4, tc.cur); got != tc.want {
			t.Errorf("progressLine(%s) = %q, want %q", tc.el, got, tc.want)
		}
	}
}
