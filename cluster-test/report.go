package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// timeline writes everything known about one job, sorted by time: the
// enqueue and cancel requests, every history event from every daemon, the
// store's history of its record and ownership key, the faults around it,
// and the final record.
func timeline(w io.Writer, in *CheckInput, res *Result, id string) {
	type line struct {
		at time.Time
		s  string
	}
	var lines []line
	var first, last time.Time
	note := func(t time.Time) {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	if info := in.Jobs[id]; info != nil {
		lines = append(lines, line{at: info.EnqueuedAt, s: fmt.Sprintf("harness    enqueue kind=%s ms=%d fail_times=%d max_attempts=%d delay=%s",
			info.Spec.kind(), info.Spec.MS, info.Spec.FailTimes, info.Spec.MaxAttempts, info.Spec.Delay)})
		note(info.EnqueuedAt)
		for _, cr := range info.Cancels {
			lines = append(lines, line{at: cr.At, s: "harness    cancel request -> " + cr.Result})
		}
	}
	for _, r := range res.RunsByJob[id] {
		for _, e := range r.Events {
			note(e.At)
			s := fmt.Sprintf("%-10s %-10s token=%d attempt=%d worker=%s", laneName(r.Slot), e.Ev, e.Token, e.Attempt, e.Worker)
			if e.Op != "" {
				s += " op=" + e.Op
			}
			if e.Accepted != nil {
				s += fmt.Sprintf(" accepted=%v", *e.Accepted)
			}
			if e.Err != "" {
				s += fmt.Sprintf(" err=%q", e.Err)
			}
			lines = append(lines, line{at: e.At, s: s})
		}
	}
	if !first.IsZero() {
		for _, f := range in.Faults {
			if f.End.After(first.Add(-10*time.Second)) && f.Start.Before(last.Add(10*time.Second)) {
				lines = append(lines, line{at: f.Start, s: fmt.Sprintf("nemesis    %s %s begins%s", f.Kind, faultTarget(f), noteSuffix(f.Note))})
				lines = append(lines, line{at: f.End, s: fmt.Sprintf("nemesis    %s %s ends", f.Kind, faultTarget(f))})
			}
		}
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at.Before(lines[j].at) })
	fmt.Fprintf(w, "--- job %s\n", id)
	for _, l := range lines {
		fmt.Fprintf(w, "  %s  %s\n", l.at.Format(tsFormat), l.s)
	}
	var storeLines []string
	for _, e := range in.Log {
		if e.Job != id && (e.Key != "qs" || e.Holder != id) { // and the slots the job took
			continue
		}
		switch {
		case e.Key != "j" && e.Key != "o":
			what := map[string]string{"c": "cancel request", "r": "running index", "q": "available index", "t": "timer index", "f": "finished index", "qm": "queue configuration", "qs": "global-limit slot"}[e.Key]
			verb := "put"
			if e.Delete {
				verb = "deleted"
			}
			storeLines = append(storeLines, fmt.Sprintf("  rev %-8d %s %s %s %s", e.Rev, seen(e), what, verb, e.Index))
		case e.Key == "o" && e.Delete:
			storeLines = append(storeLines, fmt.Sprintf("  rev %-8d %s ownership key deleted", e.Rev, seen(e)))
		case e.Key == "o":
			storeLines = append(storeLines, fmt.Sprintf("  rev %-8d %s ownership key put (create revision %d)", e.Rev, seen(e), e.CreateRev))
		case e.Delete:
			storeLines = append(storeLines, fmt.Sprintf("  rev %-8d %s record deleted", e.Rev, seen(e)))
		case e.Rec != nil:
			r := e.Rec
			storeLines = append(storeLines, fmt.Sprintf("  rev %-8d %s record %s attempt=%d owner=%s token=%d errors=%d checkpoint=%s",
				e.Rev, seen(e), r.State, r.Attempt, r.Owner, r.Token, len(r.Errors), compact(r.Checkpoint)))
		}
	}
	var execLines []ExecLine
	for _, l := range in.ExecLines {
		if l.Job == id {
			execLines = append(execLines, l)
		}
	}
	if segs := execSegments(execLines); len(segs) > 0 {
		fmt.Fprintf(w, "  exec runs (%s, in file order; no clock):\n", execRunsFile)
		for _, s := range segs {
			fmt.Fprintf(w, "    %-14s token=%d %d lines: %s\n", lineRange(s.from, s.to), s.token, s.lines, strings.Join(s.phases, ","))
		}
	}
	if len(storeLines) > 0 {
		fmt.Fprintln(w, "  store history (etcd revisions, with the time the harness's watch saw them):")
		for _, s := range storeLines {
			fmt.Fprintln(w, "  "+s)
		}
	}
	if f := in.Final[id]; f != nil {
		b, _ := json.Marshal(f)
		fmt.Fprintf(w, "  final record: %s\n", b)
	} else {
		fmt.Fprintln(w, "  final record: (not in the store)")
	}
	for _, v := range res.Violations {
		if v.Job == id {
			fmt.Fprintf(w, "  VIOLATION %s: %s\n", v.Kind, v.Detail)
		}
	}
}

func seen(e StoreEvent) string {
	if e.Seen.IsZero() {
		return "            "
	}
	return e.Seen.Format(tsFormat)
}

func compact(b []byte) string {
	if len(b) == 0 {
		return "-"
	}
	return strings.ReplaceAll(string(b), " ", "")
}

// Report is the JSON report.
type Report struct {
	Summary      string           `json:"summary"`
	Mode         string           `json:"mode"`
	Seed         uint64           `json:"seed"`
	Daemons      int              `json:"daemons"`
	Concurrency  int              `json:"concurrency"`
	LeaseTTL     string           `json:"lease_ttl"`
	Rate         float64          `json:"rate"`
	Binary       string           `json:"binary"`
	Started      time.Time        `json:"started"`
	WallSeconds  float64          `json:"wall_seconds"`
	WorkloadSecs float64          `json:"workload_seconds"`
	QuiesceSecs  float64          `json:"quiesce_seconds"`
	QuiesceEnd   string           `json:"quiesce_end"`
	Faults       int              `json:"faults"`
	FaultsByKind map[string]int   `json:"faults_by_kind"`
	FaultList    []*Fault         `json:"fault_list"`
	Plan         []plan           `json:"plan"`
	Workload     map[string]int64 `json:"workload"`
	QueueOps     []QueueOp        `json:"queue_ops"`
	Check        *Result          `json:"check"`
	Anomalies    []string         `json:"anomalies"`
	Instances    []instance       `json:"instances"`
	TornLines    int              `json:"torn_history_lines"`
	StoreLog     string           `json:"store_log"`
	Out          string           `json:"out"`
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func faultsByKind(faults []*Fault) (int, map[string]int) {
	groups := map[int]string{}
	for _, f := range faults {
		groups[f.Group] = f.Kind
	}
	by := map[string]int{}
	for _, k := range groups {
		by[k]++
	}
	return len(groups), by
}

func summaryLine(res *Result, faults int) string {
	undrained := ""
	if len(res.Undrained) > 0 {
		undrained = fmt.Sprintf(", undrained %d", len(res.Undrained))
	}
	return fmt.Sprintf("cluster-test: %d jobs, %d faults, %d violations, lost %d%s, duplicate runs %d, reclaim p50/p99 %.2f/%.2f s",
		res.Jobs, faults, countViolations(res), len(res.Lost), undrained, res.DuplicateRuns, res.Reclaim.P50, res.Reclaim.P99)
}

// countViolations counts violations other than lost and undrained jobs
// (those are reported as such).
func countViolations(res *Result) int {
	n := 0
	for _, v := range res.Violations {
		if v.Kind != "lost" && v.Kind != "undrained" {
			n++
		}
	}
	return n
}
