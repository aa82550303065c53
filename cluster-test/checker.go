package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/leasehold/leasehold/coordinator"
)

// Event is one line of a daemon's history file (see
// cmd/leasehold/history.go): a run's start, its checkpoint with the store's
// verdict, and its outcome with the store's verdict.
type Event struct {
	Ev       string     `json:"ev"` // start, checkpoint, outcome
	Job      string     `json:"job"`
	Attempt  int        `json:"attempt"`
	Token    int64      `json:"token"`
	Worker   string     `json:"worker"`
	At       time.Time  `json:"at"`
	Op       string     `json:"op,omitempty"`
	Accepted *bool      `json:"accepted,omitempty"`
	Err      string     `json:"err,omitempty"`
	Started  *time.Time `json:"started,omitempty"`
}

func (e *Event) accepted() bool { return e.Accepted != nil && *e.Accepted }

// refused reports whether a write that was not accepted certainly did not
// apply: the store refused it (a fence error), or nothing was written (the
// run was abandoned). Any other error (a timeout, a lost connection) leaves
// it uncertain.
func (e *Event) refused() bool {
	return !e.accepted() && (e.Op == "abandon" || strings.HasPrefix(e.Err, "fence:"))
}

// readHistories reads every DIR/*.jsonl. A torn last line (a process killed
// in the middle of an append) is counted, not fatal; an unreadable line
// with more lines after it is an error: the events it held (an accepted
// final write, say) would be missing from every check, which would then
// pass for want of evidence.
func readHistories(dir string) ([]Event, int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, 0, err
	}
	var out []Event
	torn := 0
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, 0, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		line, bad := 0, 0
		for sc.Scan() {
			line++
			if bad != 0 {
				_ = f.Close()
				return nil, 0, fmt.Errorf("%s:%d: unreadable history line, not the last one of the file: the history is corrupt", name, bad)
			}
			var e Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Job == "" {
				bad = line
				continue
			}
			out = append(out, e)
		}
		_ = f.Close()
		if err := sc.Err(); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", name, err)
		}
		if bad != 0 {
			torn++
		}
	}
	return out, torn, nil
}

// CheckInput is everything the checker looks at.
type CheckInput struct {
	Mode string
	// Jobs are the jobs whose enqueue was acknowledged.
	Jobs map[string]*JobInfo
	// Final is every job in the store at the end.
	Final     map[string]*coordinator.Job
	Events    []Event
	Faults    []*Fault
	Instances []instance
	// Log is the store's history (shared mode); LogOK says it is complete.
	Log   []StoreEvent
	LogOK bool
	// SlotsLogged says that Log holds the global-limit slot keys (false
	// in runs saved before it did).
	SlotsLogged bool
	// End is when the run ended; runs with no outcome and no known
	// process end are taken to last until then.
	End time.Time
	// FinalAt is when the read of Final began: a periodic tick's job may
	// still be open then if its tick came at most tickGrace before.
	FinalAt time.Time
	// QuiesceEnd says why the quiesce period ended (quiesceStalled, ...;
	// "" if not known), after Quiesce without a job finishing or
	// QuiesceMax in all.
	QuiesceEnd          string
	Quiesce, QuiesceMax time.Duration
	// ExecLines are the lines of the exec runs' shared file, in file
	// order (execRunsFile).
	ExecLines []ExecLine
}

// Run is one claimed run of a job, as the histories show it.
type Run struct {
	Job     string    `json:"job"`
	Token   int64     `json:"token"`
	Worker  string    `json:"worker"`
	Slot    int       `json:"slot"`
	Attempt int       `json:"attempt"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	// Outcome is the recorded outcome, nil if the process died first.
	Outcome *Event  `json:"outcome,omitempty"`
	Events  []Event `json:"-"`
	starts  int
	// outcomes counts the run's outcome lines: one at most.
	outcomes int
}

// Violation is one broken promise.
type Violation struct {
	Kind   string `json:"kind"`
	Job    string `json:"job"`
	Detail string `json:"detail"`
}

// Stats summarise reclaim delays, in seconds.
type Stats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_s"`
	P99 float64 `json:"p99_s"`
	Max float64 `json:"max_s"`
}

// Overlap is a pair of runs of one job that overlapped in time.
type Overlap struct {
	Job      string    `json:"job"`
	Older    int64     `json:"older_token"`
	Newer    int64     `json:"newer_token"`
	OlderOn  int       `json:"older_slot"`
	NewerOn  int       `json:"newer_slot"`
	From, To time.Time `json:"-"`
}

// Result is what the checker found.
type Result struct {
	Jobs         int            `json:"jobs"`
	Acknowledged int            `json:"acknowledged"`
	Unacked      int            `json:"unacknowledged_found"`
	States       map[string]int `json:"final_states"`
	Runs         int            `json:"runs"`
	Lost         []string       `json:"lost"`
	// Undrained are jobs not final when the quiesce period reached
	// --quiesce-max while jobs still finished: a backlog, not jobs lost.
	Undrained  []string    `json:"undrained"`
	Violations []Violation `json:"violations"`
	// Warnings are broken promises that are not safety violations (a
	// graceful stop that interrupted its jobs, say).
	Warnings      []Violation      `json:"warnings"`
	DuplicateRuns int              `json:"duplicate_runs"`
	Overlaps      []Overlap        `json:"overlaps"`
	Uncertain     int              `json:"finals_by_uncertain_write"`
	ReaperFinals  int              `json:"finals_by_reaper"`
	QueueCancels  int              `json:"cancelled_while_queued"`
	Reclaim       Stats            `json:"reclaim"`
	ReclaimByKind map[string]Stats `json:"reclaim_by_kind"`
	LogChecked    bool             `json:"store_log_checked"`
	// Queue is what the run did with limitedQueue.
	Queue QueueStats `json:"queue_control"`
	// Ticks are the jobs of the periodic schedule tickName.
	Ticks TickStats `json:"periodic"`
	// AfterFinalRead counts the jobs not acknowledged, not in the final
	// state, whose every run started after the final read began and that
	// the store's history saw written only after it: jobs enqueued after
	// it (the periodic schedule's), not lost ones.
	AfterFinalRead int `json:"enqueued_after_final_read"`
	// UniqueJobs counts the jobs with a unique key (the workload's and the
	// ticks') whose lives the store's history was checked for overlap.
	UniqueJobs int `json:"unique_jobs_checked"`
	// Exec is what the exec kind's jobs did, from the shared file.
	Exec      ExecStats         `json:"exec"`
	RunsByJob map[string][]*Run `json:"-"`
}

// TickStats describe the periodic schedule tickName: its ticks (one job
// each, promised by ADR 0007: each tick enqueued once, and every tick
// within the catch-up window enqueued, across leader changes and
// restarts).
type TickStats struct {
	Name  string    `json:"name"`
	Ticks int       `json:"ticks"`
	First time.Time `json:"first,omitzero"`
	Last  time.Time `json:"last,omitzero"`
	// Twice counts the ticks with more than one job, Missed the ticks
	// between First and Last with none.
	Twice  int `json:"twice"`
	Missed int `json:"missed"`
	// Late counts tick jobs not final at the final read whose tick came
	// at most tickGrace before it.
	Late int `json:"late"`
}

// QueueStats describe limitedQueue in a run: how many of its jobs there
// were and, from the store's history, how close its running jobs came to
// the limit and how many pauses the claims were checked against.
type QueueStats struct {
	Name  string `json:"name"`
	Jobs  int    `json:"jobs"`
	Limit int    `json:"limit"`
	// MaxHeld is the most jobs of the queue that held a live ownership
	// key at once (store history only).
	MaxHeld int `json:"max_held"`
	// Pauses counts the pauses in the store's history, and
	// ClaimsChecked the queue's claims checked against them and the limit.
	Pauses        int `json:"pauses"`
	ClaimsChecked int `json:"claims_checked"`
}

// ViolatingJobs returns the distinct jobs with a violation or lost.
func (r *Result) ViolatingJobs() []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range r.Violations {
		if !seen[v.Job] {
			seen[v.Job] = true
			out = append(out, v.Job)
		}
	}
	for _, id := range r.Lost {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

type checker struct {
	in      *CheckInput
	res     *Result
	slotOf  map[string]int
	endOf   map[string]time.Time // worker -> end of its process
	byJob   map[string][]*Run
	logJob  map[string][]StoreEvent
	seenVio map[string]bool
	// execJob are the exec runs' lines, by job.
	execJob map[string][]ExecLine
}

func (c *checker) violate(kind, job, format string, args ...any) {
	v := Violation{Kind: kind, Job: job, Detail: fmt.Sprintf(format, args...)}
	key := v.Kind + "|" + v.Job + "|" + v.Detail
	if c.seenVio[key] {
		return
	}
	c.seenVio[key] = true
	c.res.Violations = append(c.res.Violations, v)
}

// Check runs every check over in.
func Check(in *CheckInput) *Result {
	c := &checker{in: in, res: &Result{States: map[string]int{}, ReclaimByKind: map[string]Stats{}},
		slotOf: map[string]int{}, endOf: map[string]time.Time{}, byJob: map[string][]*Run{},
		logJob: map[string][]StoreEvent{}, seenVio: map[string]bool{}, execJob: map[string][]ExecLine{}}
	for _, l := range in.ExecLines {
		c.execJob[l.Job] = append(c.execJob[l.Job], l)
	}
	for _, inst := range in.Instances {
		if inst.Worker == "" {
			continue
		}
		c.slotOf[inst.Worker] = inst.Slot
		if !inst.Ended.IsZero() {
			c.endOf[inst.Worker] = inst.Ended
		}
	}
	if in.LogOK {
		c.res.LogChecked = true
		for _, e := range in.Log {
			if e.Key != "qm" && e.Key != "qs" { // a queue's configuration and slots: checkQueue
				c.logJob[e.Job] = append(c.logJob[e.Job], e)
			}
		}
	}
	c.buildRuns()
	c.checkLost()
	for _, id := range c.jobIDs() {
		runs := c.byJob[id]
		c.checkFinal(id, runs)
		c.checkTokens(id, runs)
		c.checkStale(id, runs)
		c.checkCancels(id, runs)
		if in.LogOK {
			c.checkLog(id)
		}
	}
	c.checkQueue()
	c.checkTicks()
	c.checkUnique()
	c.checkExecRuns()
	c.reclaim()
	c.checkGraceful()
	sort.SliceStable(c.res.Violations, func(i, j int) bool {
		a, b := c.res.Violations[i], c.res.Violations[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Job < b.Job
	})
	c.res.RunsByJob = c.byJob
	return c.res
}

func (c *checker) jobIDs() []string {
	set := map[string]bool{}
	for id := range c.in.Jobs {
		set[id] = true
	}
	for id := range c.in.Final {
		set[id] = true
	}
	for id := range c.byJob {
		set[id] = true
	}
	// Jobs that only the store's history or the exec runs' file show (an
	// enqueue whose reply was lost): checked as the others, and lost if
	// they were in the store when the final read began.
	for id := range c.logJob {
		set[id] = true
	}
	for id := range c.execJob {
		set[id] = true
	}
	ids := make([]string, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (c *checker) slot(worker string) int {
	if s, ok := c.slotOf[worker]; ok {
		return s
	}
	return -1
}

// buildRuns groups history events into runs: (job, token, worker).
func (c *checker) buildRuns() {
	type key struct {
		job    string
		token  int64
		worker string
	}
	runs := map[key]*Run{}
	evs := append([]Event(nil), c.in.Events...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At.Before(evs[j].At) })
	for _, e := range evs {
		k := key{e.Job, e.Token, e.Worker}
		r := runs[k]
		if r == nil {
			r = &Run{Job: e.Job, Token: e.Token, Worker: e.Worker, Slot: c.slot(e.Worker), Attempt: e.Attempt, Start: e.At}
			runs[k] = r
			c.byJob[e.Job] = append(c.byJob[e.Job], r)
		}
		r.Events = append(r.Events, e)
		switch e.Ev {
		case "start":
			r.starts++
			r.Start = e.At
		case "outcome":
			ev := e
			r.outcomes++
			r.Outcome = &ev
			if e.Started != nil && r.starts == 0 {
				r.Start = *e.Started
			}
		}
	}
	for _, rs := range c.byJob {
		for _, r := range rs {
			switch {
			case r.Outcome != nil:
				r.End = r.Outcome.At
			case !c.endOf[r.Worker].IsZero():
				r.End = c.endOf[r.Worker]
			default:
				r.End = c.in.End
			}
			if r.End.Before(r.Start) {
				r.End = r.Start
			}
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].Token < rs[j].Token })
		c.res.Runs += len(rs)
	}
}

func (c *checker) checkLost() {
	r := c.res
	for _, id := range c.jobIDs() {
		info, f := c.in.Jobs[id], c.in.Final[id]
		r.Jobs++
		tick, periodic := tickOf(f)
		switch {
		case info != nil:
			r.Acknowledged++
		case f != nil && !periodic:
			r.Unacked++
		}
		switch {
		case periodic && !f.State.Final() && !c.in.FinalAt.IsZero() && c.in.FinalAt.Sub(tick) <= tickGrace:
			r.States[string(f.State)]++
			r.Ticks.Late++
		case f == nil && info != nil:
			r.Lost = append(r.Lost, id)
			c.violate("lost", id, "acknowledged job (enqueued %s) is not in the store", info.EnqueuedAt.Format(tsFormat))
		case f == nil:
			why := c.inStoreAtFinalRead(id)
			if why == "" {
				// A tick's job: the daemons go on enqueuing them until
				// they stop, after the final read.
				r.AfterFinalRead++
				break
			}
			r.Lost = append(r.Lost, id)
			c.violate("lost", id, "%s, but it is neither in the store nor among the acknowledged enqueues", why)
		case !f.State.Final() && c.in.QuiesceEnd == quiesceCapped:
			r.States[string(f.State)]++
			r.Undrained = append(r.Undrained, id)
			c.violate("undrained", id, "not final after the quiesce period (%s): state %s, attempt %d, owner %q, token %d",
				describeQuiesce(c.in.QuiesceEnd, c.in.Quiesce, c.in.QuiesceMax), f.State, f.Attempt, f.Owner, f.Token)
		case !f.State.Final():
			r.States[string(f.State)]++
			r.Lost = append(r.Lost, id)
			why := ""
			if c.in.QuiesceEnd != "" {
				why = " (" + describeQuiesce(c.in.QuiesceEnd, c.in.Quiesce, c.in.QuiesceMax) + ")"
			}
			c.violate("lost", id, "not final after the quiesce period%s: state %s, attempt %d, owner %q, token %d", why, f.State, f.Attempt, f.Owner, f.Token)
		default:
			r.States[string(f.State)]++
		}
	}
}

func (c *checker) maxAttempts(id string) int {
	if f := c.in.Final[id]; f != nil && f.MaxAttempts > 0 {
		return f.MaxAttempts
	}
	if info := c.in.Jobs[id]; info != nil && info.Spec.MaxAttempts > 0 {
		return info.Spec.MaxAttempts
	}
	return coordinator.DefaultMaxAttempts
}

// terminal reports whether an outcome, if applied, ends the job, and in
// which state.
func (c *checker) terminal(e *Event) (coordinator.State, bool) {
	switch e.Op {
	case "complete":
		return coordinator.StateCompleted, true
	case "cancel":
		return coordinator.StateCancelled, true
	case "fail":
		if e.Attempt >= c.maxAttempts(e.Job) {
			return coordinator.StateDiscarded, true
		}
	}
	return "", false
}

// checkFinal: at most one accepted final write per job, and the final
// record is the one it wrote (or one written by the reaper, by a cancel of
// a queued job, or by a write whose verdict is unknown).
func (c *checker) checkFinal(id string, runs []*Run) {
	var finals []*Run
	for _, r := range runs {
		if r.outcomes > 1 {
			// The run's earlier outcome lines are hidden from every
			// other check (only the last is kept): at most one outcome
			// per run (promise 9).
			var parts []string
			for _, e := range r.Events {
				if e.Ev == "outcome" {
					parts = append(parts, fmt.Sprintf("%s accepted=%v at %s", e.Op, e.accepted(), e.At.Format(tsFormat)))
				}
			}
			c.violate("two-outcomes", id, "run with token %d on %s recorded %d outcomes: %s", r.Token, r.Worker, r.outcomes, strings.Join(parts, "; "))
		}
		if r.Outcome != nil && r.Outcome.accepted() {
			if _, ok := c.terminal(r.Outcome); ok {
				finals = append(finals, r)
			}
		}
	}
	// After an accepted final write no run of the job may follow: a
	// greater token means the job was claimed again after it finished,
	// or the final write was accepted after the newer claim. Either is
	// a violation, and this one needs no store history (embedded mode).
	if len(finals) > 0 {
		first := finals[0]
		for _, r := range runs {
			if r.Token > first.Token {
				c.violate("run-after-final", id, "token %d ran on %s (from %s) although token %d's %s on %s was accepted at %s",
					r.Token, laneName(r.Slot), r.Start.Format(tsFormat), first.Token, first.Outcome.Op, laneName(first.Slot), first.Outcome.At.Format(tsFormat))
			}
		}
	}
	info := c.in.Jobs[id]
	cancelAsked := info != nil && len(info.Cancels) > 0
	if f := c.in.Final[id]; f != nil && f.State == coordinator.StateCancelled && !cancelAsked {
		// The workload's payloads always decode, so its handler never
		// cancels a job itself: only a cancel request ends one cancelled
		// (since ADR 0017 also a fail, snooze or release that found one).
		c.violate("unrequested-cancel", id, "the job ended cancelled (token %d, owner %q) but no cancel request was ever sent for it", f.Token, f.Owner)
	}
	if len(finals) > 1 {
		var parts []string
		for _, r := range finals {
			parts = append(parts, fmt.Sprintf("%s by token %d on %s at %s", r.Outcome.Op, r.Token, laneName(r.Slot), r.Outcome.At.Format(tsFormat)))
		}
		c.violate("two-finals", id, "%d accepted final writes: %s", len(finals), strings.Join(parts, "; "))
	}
	f := c.in.Final[id]
	if f == nil || !f.State.Final() {
		return
	}
	if len(finals) > 0 {
		r := finals[len(finals)-1]
		want, _ := c.terminal(r.Outcome)
		if int64(f.Token) != r.Token || f.Owner != r.Worker || f.State != want {
			c.violate("final-mismatch", id, "accepted %s by token %d (%s) but the final record is %s by token %d (%s)",
				r.Outcome.Op, r.Token, r.Worker, f.State, f.Token, f.Owner)
		}
		return
	}
	lastErr := ""
	if len(f.Errors) > 0 {
		lastErr = f.Errors[len(f.Errors)-1].Error
	}
	switch {
	case f.Token == 0:
		if f.State == coordinator.StateCancelled && cancelAsked {
			c.res.QueueCancels++
			return
		}
		c.violate("final-mismatch", id, "final state %s with no run's accepted final write and no cancel request", f.State)
	case strings.HasPrefix(lastErr, "run lost:") && (f.State == coordinator.StateCancelled || f.State == coordinator.StateDiscarded):
		// The reaper ended it: a cancel request (checked above) or too
		// many lost runs.
		c.res.ReaperFinals++
	case c.isExec(id):
		// The exec kind's runs are not in the histories: its final
		// record is checked against the shared file (checkExecRuns).
	default:
		for _, r := range runs {
			if r.Token != int64(f.Token) || r.Worker != f.Owner {
				continue
			}
			if r.Outcome == nil {
				c.res.Uncertain++ // a final write whose history line was lost
				return
			}
			if !r.Outcome.accepted() && !r.Outcome.refused() {
				// A write whose reply was lost: it may have applied, but
				// only as what that write could produce.
				if !mayProduce(r.Outcome.Op, f.State) {
					c.violate("final-mismatch", id, "final record %s by token %d (%s), but that run's only outcome was a %s whose verdict was unknown (err=%q), which cannot produce %s",
						f.State, f.Token, f.Owner, r.Outcome.Op, r.Outcome.Err, f.State)
					return
				}
				c.res.Uncertain++
				return
			}
			c.violate("final-mismatch", id, "final record %s by token %d (%s), but that run's outcome was %s, accepted=%v, err=%q",
				f.State, f.Token, f.Owner, r.Outcome.Op, r.Outcome.accepted(), r.Outcome.Err)
			return
		}
		c.violate("final-mismatch", id, "final record %s by token %d (%s), which no history shows running", f.State, f.Token, f.Owner)
	}
}

// mayProduce reports whether an outcome write of kind op, if applied,
// could leave the job in final state st. A fail, snooze or release that
// finds a cancel request pending writes the job cancelled (ADR 0017).
func mayProduce(op string, st coordinator.State) bool {
	switch op {
	case "complete":
		return st == coordinator.StateCompleted
	case "cancel":
		return st == coordinator.StateCancelled
	case "fail":
		return st == coordinator.StateDiscarded || st == coordinator.StateCancelled
	case "snooze", "release":
		return st == coordinator.StateCancelled
	}
	return true // an op this checker does not know: no claim either way
}

// checkTokens: a job's tokens strictly increase from start to start, and
// (with the store log) each, and each exec command's, is the revision of
// a claim of that job.
func (c *checker) checkTokens(id string, runs []*Run) {
	byStart := append([]*Run(nil), runs...)
	sort.SliceStable(byStart, func(i, j int) bool { return byStart[i].Start.Before(byStart[j].Start) })
	// Every earlier start is compared, not only the one before: a start
	// recorded late (and excused) between two others must not hide that
	// the later of them went down from the earlier.
	byToken := map[int64]*Run{}
	for i, r := range byStart {
		if r.starts > 1 {
			c.violate("token-reuse", id, "token %d started %d times on %s", r.Token, r.starts, r.Worker)
		}
		if prev := byToken[r.Token]; prev != nil {
			c.violate("token-reuse", id, "token %d used by two runs: on %s at %s and on %s at %s", r.Token,
				prev.Worker, prev.Start.Format(tsFormat), r.Worker, r.Start.Format(tsFormat))
		} else {
			byToken[r.Token] = r
		}
		for _, prev := range byStart[:i] {
			if r.Token < prev.Token && !c.pausedRecording(r.Slot, prev.Start, r.Start) {
				c.violate("token-order", id, "token went down: %d started on %s at %s after %d started on %s at %s",
					r.Token, laneName(r.Slot), r.Start.Format(tsFormat), prev.Token, laneName(prev.Slot), prev.Start.Format(tsFormat))
				break
			}
		}
	}
	if c.in.LogOK {
		claims := map[int64]bool{}
		for _, e := range c.logJob[id] {
			if e.Key == "j" && e.Rec != nil && e.Rec.State == coordinator.StateRunning && e.Rec.Token == 0 {
				claims[e.Rev] = true
			}
		}
		for _, r := range runs {
			if !claims[r.Token] {
				c.violate("token-unknown", id, "run on %s has token %d, which is not the revision of a claim of this job", r.Worker, r.Token)
			}
		}
		for _, l := range c.execJob[id] { // the exec kind's runs
			if !claims[l.Token] {
				c.violate("token-unknown", id, "the command whose first line is line %d of the exec runs' file has token %d, which is not the revision of a claim of this job", l.N, l.Token)
				claims[l.Token] = true // once
			}
		}
	}
}

// delayingFaults hold a daemon's replies from etcd (or the daemon itself)
// past its lease: a claim or write applied in etcd before the fault's end
// may be recorded in the daemon's history only after it.
var delayingFaults = map[string]bool{fPauseDaemon: true, fPartition: true, fPartitionReq: true, fPartitionReply: true,
	fLatency: true, fDropConns: true}

// pausedRecording reports whether slot's daemon was paused or cut off so
// that an event it recorded at `at` may have happened before `before`: the
// fault began before `before` and ended shortly before `at`.
func (c *checker) pausedRecording(slot int, before, at time.Time) bool {
	for _, f := range c.in.Faults {
		if delayingFaults[f.Kind] && f.Slot == slot && f.Start.Before(before) && !f.End.After(at) && at.Sub(f.End) < 2*time.Second {
			return true
		}
	}
	return false
}

// writes returns the run's accepted writes (checkpoints and outcomes).
func (r *Run) writes() []Event {
	var out []Event
	for _, e := range r.Events {
		if (e.Ev == "checkpoint" || e.Ev == "outcome") && e.accepted() {
			out = append(out, e)
		}
	}
	return out
}

// logRev finds the revision at which an accepted write of run r was
// applied, from the store log: 0 if it cannot be placed (a non-final
// outcome), -1 if it should be there and is not.
func (c *checker) logRev(r *Run, w Event) int64 {
	switch {
	case w.Ev == "checkpoint":
		for _, e := range c.logJob[r.Job] {
			if e.Key == "j" && e.Rec != nil && int64(e.Rec.Token) == r.Token && e.Rec.State == coordinator.StateRunning && checkpointToken(e.Rec.Checkpoint) == r.Token {
				return e.Rev
			}
		}
		return -1
	case w.Ev == "outcome":
		want, final := c.terminal(&w)
		if !final {
			return 0
		}
		for _, e := range c.logJob[r.Job] {
			if e.Key == "j" && e.Rec != nil && int64(e.Rec.Token) == r.Token && e.Rec.State == want {
				return e.Rev
			}
		}
		return -1
	}
	return 0
}

func checkpointToken(raw json.RawMessage) int64 {
	var cp struct {
		Token int64 `json:"token"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &cp) != nil {
		return 0
	}
	return cp.Token
}

// afterClaim returns the accepted writes of old that were applied after
// the claim of newer: placed exactly by the store log when there is one,
// else by time (recorded after the newer run's start, unless the old
// daemon was paused and recorded late).
func (c *checker) afterClaim(old, newer *Run) []string {
	var out []string
	for _, w := range old.writes() {
		what := w.Ev
		if w.Ev == "outcome" {
			what = w.Op
		}
		if c.in.LogOK {
			if rev := c.logRev(old, w); rev > newer.Token {
				out = append(out, fmt.Sprintf("%s by token %d applied at revision %d, after token %d was issued", what, old.Token, rev, newer.Token))
			}
			continue
		}
		if w.At.After(newer.Start) && !c.pausedRecording(old.Slot, newer.Start, w.At) {
			out = append(out, fmt.Sprintf("%s by token %d accepted at %s, after token %d started at %s", what, old.Token, w.At.Format(tsFormat), newer.Token, newer.Start.Format(tsFormat)))
		}
	}
	return out
}

// checkStale: no write accepted under a token after a newer token of the
// job was issued; runs that overlapped in time are counted, and are a
// violation if the older one's writes after the newer claim were accepted.
func (c *checker) checkStale(id string, runs []*Run) {
	if c.in.LogOK {
		for _, r := range runs {
			for _, w := range r.writes() {
				if c.logRev(r, w) == -1 {
					what := w.Ev
					if w.Ev == "outcome" {
						what = w.Op
					}
					c.violate("phantom-write", id, "%s by token %d (%s) at %s was accepted but is not in the store's history", what, r.Token, r.Worker, w.At.Format(tsFormat))
				}
			}
		}
	}
	for i, old := range runs {
		if i+1 < len(runs) {
			newer := runs[i+1] // the first newer claim
			if late := c.afterClaim(old, newer); len(late) > 0 {
				c.violate("stale-write", id, "%s", strings.Join(late, "; "))
			}
		}
		for _, newer := range runs[i+1:] {
			if old.End.After(newer.Start) && newer.Token > old.Token {
				c.res.DuplicateRuns++
				c.res.Overlaps = append(c.res.Overlaps, Overlap{Job: id, Older: old.Token, Newer: newer.Token, OlderOn: old.Slot, NewerOn: newer.Slot, From: newer.Start, To: old.End})
				if late := c.afterClaim(old, newer); len(late) > 0 {
					c.violate("overlap", id, "runs overlapped (token %d on %s until %s, token %d on %s from %s) and the older one's writes were accepted: %s",
						old.Token, laneName(old.Slot), old.End.Format(tsFormat), newer.Token, laneName(newer.Slot), newer.Start.Format(tsFormat), strings.Join(late, "; "))
				}
			}
		}
	}
}

// checkLog checks the store's own history of a job, revision by revision:
// a claim takes only an available job; nothing writes a finished job; every
// non-claim write carries the current claim's token (or none); and no write
// drops errors recorded before it (a write from a stale copy).
func (c *checker) checkLog(id string) {
	var prev *coordinator.Job
	var prevRev, claim int64
	evs := c.logJob[id]
	for _, e := range evs {
		if e.Key != "j" || e.Delete || e.Rec == nil {
			continue
		}
		rec := e.Rec
		isClaim := rec.State == coordinator.StateRunning && rec.Token == 0
		if prev != nil && prev.State == coordinator.StateRunning && !isClaim {
			// A write to a running job is the owner's, fenced on its
			// ownership key (promise 3), or the reaper's (it counts a
			// rescue), which needs that key gone (promise 7). Keys
			// written in the same transaction share its revision, so
			// only earlier revisions say what the write saw.
			o := lastBefore(evs, "o", e.Rev)
			owned := o != nil && !o.Delete && o.CreateRev == claim
			switch {
			case rec.Rescues > prev.Rescues && owned:
				c.violate("reap-while-owned", id, "revision %d reaped the job (now %s) while the ownership key of claim %d was still there", e.Rev, rec.State, claim)
			case rec.Rescues <= prev.Rescues && !owned:
				gone := "never written"
				if o != nil {
					gone = fmt.Sprintf("gone at revision %d", o.Rev)
				}
				c.violate("unfenced-write", id, "revision %d wrote the running job (now %s, token %d) although the ownership key of claim %d was %s", e.Rev, rec.State, rec.Token, claim, gone)
			}
		}
		if prev != nil && runnable(rec.State) {
			// ADR 0017: an outcome (or a reap) that would run the job
			// again applies only while no cancel request waits.
			if cr := lastBefore(evs, "c", e.Rev); cr != nil && !cr.Delete {
				c.violate("cancel-dropped", id, "revision %d made the job %s again while the cancel request of revision %d was pending", e.Rev, rec.State, cr.Rev)
			}
		}
		if prev != nil && prev.State.Final() {
			c.violate("write-after-final", id, "revision %d rewrote the record (now %s, token %d) after it was %s at revision %d", e.Rev, rec.State, rec.Token, prev.State, prevRev)
		}
		if isClaim {
			if prev == nil || prev.State != coordinator.StateAvailable {
				was := "absent"
				if prev != nil {
					was = string(prev.State)
				}
				c.violate("double-claim", id, "claim at revision %d of a job that was %s (revision %d)", e.Rev, was, prevRev)
			}
			claim = e.Rev
		} else if rec.Token != 0 && int64(rec.Token) != claim {
			c.violate("stale-write", id, "store history: revision %d wrote the record (%s) under token %d after token %d was issued", e.Rev, rec.State, rec.Token, claim)
		}
		if prev != nil && !errorsPrefix(prev.Errors, rec.Errors) {
			c.violate("stale-write", id, "store history: revision %d (%s, attempt %d) dropped errors recorded by revision %d: written from a stale copy", e.Rev, rec.State, rec.Attempt, prevRev)
		}
		prev, prevRev = rec, e.Rev
	}
	c.checkOrphans(id)
	// At the end, a job's keys must match its state: one index entry, of
	// its state's kind; no ownership key, running entry or cancel request
	// left once it is finished (a stale available entry could be claimed
	// again).
	live := map[string]bool{}
	for _, e := range c.logJob[id] {
		k := e.Key
		if e.Index != "" {
			k = e.Index
		}
		if e.Key != "j" {
			live[k] = !e.Delete
		}
	}
	f := c.in.Final[id]
	if f == nil || !f.State.Final() {
		return
	}
	var stale []string
	finished := 0
	for k, on := range live {
		switch {
		case !on:
		case strings.HasPrefix(k, "f/"):
			finished++
		default:
			stale = append(stale, k)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 || finished != 1 {
		c.violate("index-mismatch", id, "job is %s but its keys are %d finished index entries and %v", f.State, finished, stale)
	}
}

// runnable reports whether a job in state st will be claimed again.
func runnable(st coordinator.State) bool {
	return st == coordinator.StateAvailable || st == coordinator.StateRetryable || st == coordinator.StateScheduled
}

// lastBefore returns the last event of key kind key with a revision below
// rev, or nil.
func lastBefore(evs []StoreEvent, key string, rev int64) *StoreEvent {
	var last *StoreEvent
	for i := range evs {
		if evs[i].Key == key && evs[i].Rev < rev {
			last = &evs[i]
		}
	}
	return last
}

// checkCancels: an acknowledged cancel request of a running job is never
// dropped by an outcome or a reap that runs the job again (ADR 0017), and
// a job that a cancel found final (it cancelled the queued job, or the job
// had ended) is not run again. With a store history checkLog sees each
// write. Without one (embedded mode), by time: the request found the job
// running under some claim, or final, and from then on the job may only
// end (complete, discard, cancel), so no claim may follow; a run that
// starts well after the answer came back (cancelSlack, unless its daemon
// was paused or cut off) was claimed after the request landed.
func (c *checker) checkCancels(id string, runs []*Run) {
	info := c.in.Jobs[id]
	if c.in.LogOK || info == nil {
		return
	}
	for _, cr := range info.Cancels {
		final := coordinator.State(cr.Result).Final()
		if (cr.Result != "cancel-requested" && !final) || cr.Acked.IsZero() {
			continue
		}
		for _, r := range runs {
			if r.Start.Sub(cr.Acked) <= cancelSlack || c.pausedRecording(r.Slot, cr.Acked, r.Start) {
				continue
			}
			if final {
				c.violate("run-after-final", id, "a cancel answered at %s found the job %s, yet token %d started on %s at %s",
					cr.Acked.Format(tsFormat), cr.Result, r.Token, laneName(r.Slot), r.Start.Format(tsFormat))
				continue
			}
			c.violate("cancel-dropped", id, "cancel request acknowledged at %s (the job was running), yet token %d started on %s at %s",
				cr.Acked.Format(tsFormat), r.Token, laneName(r.Slot), r.Start.Format(tsFormat))
		}
	}
}

// cancelSlack bounds how late a handler's start is recorded after its
// claim when nothing holds its daemon up.
const cancelSlack = time.Second

func errorsPrefix(a, b []coordinator.AttemptError) bool {
	if len(a) > len(b) {
		return false
	}
	for i := range a {
		if a[i].Attempt != b[i].Attempt || a[i].Error != b[i].Error || !a[i].At.Equal(b[i].At) {
			return false
		}
	}
	return true
}

// reclaim measures, for each fault that makes a daemon lose its lease, the
// time from the fault to the next start of each job it was running and
// lost (for a quorum loss: from the restore).
func (c *checker) reclaim() {
	samples := map[string][]float64{}
	var all []float64
	for _, f := range c.in.Faults {
		if !leaseLossKinds[f.Kind] && f.Kind != fQuorumLoss && f.Kind != fKillEmbedded {
			continue
		}
		from := f.Start
		if f.Kind == fQuorumLoss {
			from = f.End
		}
		for _, runs := range c.byJob {
			for i, r := range runs {
				if f.Slot >= 0 && r.Slot != f.Slot {
					continue
				}
				if !r.Start.Before(f.Start) || r.End.Before(f.Start) {
					continue
				}
				if r.Outcome != nil && r.Outcome.accepted() {
					continue // finished despite the fault
				}
				if i+1 >= len(runs) {
					continue // no later run (cancelled by the reaper, say)
				}
				d := runs[i+1].Start.Sub(from).Seconds()
				if d < 0 {
					continue
				}
				samples[f.Kind] = append(samples[f.Kind], d)
				if f.Kind != fQuorumLoss {
					all = append(all, d)
				}
			}
		}
	}
	c.res.Reclaim = stats(all)
	for k, v := range samples {
		c.res.ReclaimByKind[k] = stats(v)
	}
}

func stats(v []float64) Stats {
	if len(v) == 0 {
		return Stats{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	q := func(p float64) float64 {
		i := int(p*float64(len(s)-1) + 0.5)
		return round3(s[i])
	}
	return Stats{N: len(s), P50: q(0.5), P99: q(0.99), Max: round3(s[len(s)-1])}
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

const tsFormat = "15:04:05.000"

func laneName(slot int) string {
	if slot < 0 {
		return "?"
	}
	return fmt.Sprintf("d%d", slot+1)
}

// checkGraceful warns about runs that a graceful stop (SIGTERM) abandoned:
// a daemon given --shutdown-timeout to drain should let its handlers finish
// or release their jobs, not drop them as lost runs (which count towards a
// job's rescues). A run lost because its session expired (the daemon
// fenced itself, before or during the stop) was not dropped by the stop,
// though its handler may return only after the signal.
func (c *checker) checkGraceful() {
	for _, inst := range c.in.Instances {
		if inst.Term.IsZero() || inst.Worker == "" {
			continue
		}
		end := inst.Ended
		if end.IsZero() {
			end = c.in.End
		}
		n := 0
		var first *Run
		for _, runs := range c.byJob {
			for _, r := range runs {
				o := r.Outcome
				if r.Worker != inst.Worker || o == nil || o.Op != "abandon" || o.At.Before(inst.Term) || o.At.After(end) ||
					strings.Contains(o.Err, coordinator.ErrSessionExpired.Error()) {
					continue
				}
				if first == nil {
					first = r
				}
				n++
			}
		}
		if n > 0 {
			c.res.Warnings = append(c.res.Warnings, Violation{Kind: "graceful-stop-abandoned", Job: first.Job,
				Detail: fmt.Sprintf("%s (worker %s) got SIGTERM at %s and abandoned %d running jobs at %s instead of draining or releasing them (e.g. token %d: %q)",
					laneName(inst.Slot), inst.Worker, inst.Term.Format(tsFormat), n, first.Outcome.At.Format(tsFormat), first.Token, first.Outcome.Err)})
		}
	}
}

// orphanAfter is how long a claim may hold a job without its handler
// starting before the checker warns: a claim whose daemon died is reaped
// within the TTL and a few seconds; one whose daemon lives on and never
// runs the job is stuck until that daemon's session ends.
const orphanAfter = 15 * time.Second

// checkOrphans warns about claims that held a job (ownership key alive)
// for long without any history showing the run start.
func (c *checker) checkOrphans(id string) {
	started := map[int64]bool{}
	for _, r := range c.byJob[id] {
		started[r.Token] = true
	}
	for _, l := range c.execJob[id] { // the exec kind's runs
		started[l.Token] = true
	}
	evs := c.logJob[id]
	for i, e := range evs {
		if e.Key != "o" || e.Delete || e.CreateRev != e.Rev || started[e.Rev] || e.Seen.IsZero() {
			continue
		}
		until := c.in.End
		for _, d := range evs[i+1:] {
			if d.Key == "o" {
				until = d.Seen
				break
			}
		}
		if held := until.Sub(e.Seen); held > orphanAfter {
			c.res.Warnings = append(c.res.Warnings, Violation{Kind: "orphaned-claim", Job: id,
				Detail: fmt.Sprintf("claim at revision %d (%s) held the job for %s without any run starting", e.Rev, e.Seen.Format(tsFormat), held.Round(100*time.Millisecond))})
		}
	}
}

// checkQueue checks queue control on limitedQueue in the store's history:
// no job of it is claimed while its stored configuration says paused (a
// claim compares the configuration it read, so once a pause is answered
// no claim gets through), and no more jobs of it than its limit hold a
// live ownership key at the end of any revision (a claim takes one of
// limit slot keys on its daemon's lease; an outcome deletes its slot with
// the ownership key, and a lease that ends deletes both). The limit is
// the one first stored: the harness never changes it, so a configuration
// written later with another (a pause or resume that dropped it) is a
// violation too, not a reason to stop checking. Where the log holds the
// slots, each revision's are compared with its claims exactly: every live
// claim made since the limit was set holds one slot, naming its job, and
// every slot names a live claim (slot-mismatch), so that a claim that
// took no slot, or an outcome that freed another job's, shows at once,
// not only when the queue is busy enough to go over its limit.
func (c *checker) checkQueue() {
	qs := &c.res.Queue
	qs.Name = limitedQueue
	for _, j := range c.in.Final {
		if j.Queue == limitedQueue {
			qs.Jobs++
		}
	}
	if !c.in.LogOK {
		return
	}
	queueOf := map[string]string{}
	var conf *coordinator.QueueConfig
	var limitRev int64            // revision the limit was first stored at
	held := map[string]int64{}    // job -> the revision its ownership key was created at
	slots := map[string]string{}  // slot key -> the job it names
	mismatch := map[string]bool{} // the slot mismatches of the revision before
	over := false
	evs := c.in.Log
	for i, e := range evs {
		switch e.Key {
		case "qm":
			if e.Job != limitedQueue {
				break
			}
			if conf != nil && !conf.Paused && e.Conf != nil && e.Conf.Paused {
				qs.Pauses++
			}
			conf = e.Conf
			switch {
			case limitRev == 0 && conf != nil && conf.Limit > 0:
				qs.Limit, limitRev = conf.Limit, e.Rev
			case limitRev != 0 && (conf == nil || conf.Limit != qs.Limit):
				now := 0
				if conf != nil {
					now = conf.Limit
				}
				c.violate("over-limit", limitedQueue, "revision %d stored limit %d for queue %s, set to %d at revision %d and never changed by the harness", e.Rev, now, limitedQueue, qs.Limit, limitRev)
			}
		case "qs":
			if e.Job != limitedQueue {
				break
			}
			if e.Delete {
				delete(slots, e.Index)
			} else {
				slots[e.Index] = e.Holder
			}
		case "j":
			if e.Rec == nil {
				break
			}
			queueOf[e.Job] = e.Rec.Queue
			if e.Rec.Queue != limitedQueue || e.Rec.State != coordinator.StateRunning || e.Rec.Token != 0 {
				break
			}
			qs.ClaimsChecked++
			if conf != nil && conf.Paused {
				c.violate("claim-while-paused", e.Job, "claim at revision %d of a job of queue %s, paused since %s", e.Rev, limitedQueue, conf.PausedAt)
			}
		case "o":
			if queueOf[e.Job] != limitedQueue {
				break
			}
			if e.Delete {
				delete(held, e.Job)
			} else {
				held[e.Job] = e.CreateRev
			}
		}
		if i+1 < len(evs) && evs[i+1].Rev == e.Rev {
			continue // the revision's other writes first
		}
		qs.MaxHeld = max(qs.MaxHeld, len(held))
		wasOver := over
		over = limitRev != 0 && len(held) > qs.Limit
		if over && !wasOver { // once per spell
			ids := slices.Sorted(maps.Keys(held))
			for _, id := range ids {
				c.violate("over-limit", id, "at revision %d, %d jobs of queue %s held an ownership key (limit %d): %s", e.Rev, len(held), limitedQueue, qs.Limit, strings.Join(ids, ", "))
			}
		}
		if c.in.SlotsLogged && limitRev != 0 {
			mismatch = c.checkSlots(e.Rev, limitRev, held, slots, mismatch)
		}
	}
}

// checkSlots compares limitedQueue's slots with its live claims at the end
// of revision rev: each claim made after the limit was set (at limitRev)
// holds exactly one slot, naming its job, and each slot names a live
// claim. A mismatch is reported when it appears, not again while it
// lasts; it returns the mismatches of rev.
func (c *checker) checkSlots(rev, limitRev int64, held map[string]int64, slots map[string]string, before map[string]bool) map[string]bool {
	bySlot := map[string][]string{} // job -> the slots naming it
	for k, job := range slots {
		bySlot[job] = append(bySlot[job], k)
	}
	now := map[string]bool{}
	report := func(job, what, format string, args ...any) {
		key := job + "|" + what
		now[key] = true
		if !before[key] {
			c.violate("slot-mismatch", job, format, args...)
		}
	}
	for _, job := range slices.Sorted(maps.Keys(held)) {
		if held[job] <= limitRev {
			continue // claimed before the limit was set: no slot (ADR 0005)
		}
		switch ks := bySlot[job]; len(ks) {
		case 1:
		case 0:
			report(job, "none", "at revision %d the job holds the claim of revision %d on queue %s but no slot of its limit", rev, held[job], limitedQueue)
		default:
			slices.Sort(ks)
			report(job, "several", "at revision %d the job's claim of revision %d holds %d slots of queue %s: %s", rev, held[job], len(ks), limitedQueue, strings.Join(ks, ", "))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(slots)) {
		if job := slots[k]; held[job] == 0 {
			report(job, "leak "+k, "at revision %d slot %s of queue %s names the job, which holds no live claim: a slot left behind", rev, k, limitedQueue)
		}
	}
	return now
}

// tickGrace bounds how long before the final read a tick's job may have
// been enqueued and still be open (it takes 20 ms of work).
const tickGrace = 10 * time.Second

// tickOf returns the tick of a job of the periodic schedule tickName (its
// unique key is periodic:NAME:TICK).
func tickOf(j *coordinator.Job) (time.Time, bool) {
	if j == nil {
		return time.Time{}, false
	}
	s, ok := strings.CutPrefix(j.UniqueKey, "periodic:"+tickName+":")
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, s)
	return t, err == nil
}

// checkTicks checks the periodic schedule tickName (@every 1s, declared on
// every daemon) from the jobs in the store at the end: no tick has two
// jobs, and no tick between the first and the last is missing (the run is
// far shorter than the catch-up window, so a tick that fell while no
// leader ran is enqueued late, not skipped).
func (c *checker) checkTicks() {
	ts := &c.res.Ticks
	ts.Name = tickName
	byTick := map[time.Time][]string{}
	for id, j := range c.in.Final {
		if t, ok := tickOf(j); ok {
			byTick[t] = append(byTick[t], id)
		}
	}
	ticks := slices.SortedFunc(maps.Keys(byTick), time.Time.Compare)
	// The store's history also shows tick jobs written after the final
	// read, until the daemons stopped: a tick has one job, ever (missed
	// ticks are still counted from the final state).
	if c.in.LogOK {
		for _, e := range c.in.Log {
			if t, ok := tickOf(e.Rec); ok && e.Key == "j" && !slices.Contains(byTick[t], e.Job) {
				byTick[t] = append(byTick[t], e.Job)
			}
		}
	}
	for _, t := range slices.SortedFunc(maps.Keys(byTick), time.Time.Compare) {
		if ids := byTick[t]; len(ids) > 1 {
			slices.Sort(ids)
			ts.Twice++
			for _, id := range ids[1:] {
				c.violate("tick-twice", id, "tick %s of schedule %s has %d jobs: %s", t.Format(time.RFC3339), tickName, len(ids), strings.Join(ids, ", "))
			}
		}
	}
	ts.Ticks = len(ticks)
	if len(ticks) == 0 {
		return
	}
	ts.First, ts.Last = ticks[0], ticks[len(ticks)-1]
	for i, t := range ticks[1:] {
		if gap := int(t.Sub(ticks[i])/tickEvery) - 1; gap > 0 {
			ts.Missed += gap
			c.violate("tick-missed", byTick[t][0], "%d ticks of schedule %s between %s and %s have no job, though within the catch-up window",
				gap, tickName, ticks[i].Format(time.RFC3339), t.Format(time.RFC3339))
		}
	}
}

// checkUnique checks unique keys in the store's history: while a job with
// a unique key lives (from its first write until a write makes it final),
// no other job with that key is written (an enqueue with a live job's key
// answers with that job). The workload's unique jobs share uniqueKeys
// keys; each tick's job has its own.
func (c *checker) checkUnique() {
	if !c.in.LogOK {
		return
	}
	live := map[string]string{} // unique key -> its live job
	seen := map[string]bool{}
	for _, e := range c.in.Log {
		if e.Key != "j" || e.Rec == nil || e.Rec.UniqueKey == "" {
			continue
		}
		k := e.Rec.UniqueKey
		if !seen[e.Job] {
			seen[e.Job] = true
			c.res.UniqueJobs++
		}
		other, held := live[k]
		switch {
		case e.Rec.State.Final():
			if other == e.Job {
				delete(live, k)
			}
		case !held:
			live[k] = e.Job
		case other != e.Job:
			c.violate("unique-twice", e.Job, "revision %d wrote the job (%s) with unique key %s while job %s with that key was live", e.Rev, e.Rec.State, k, other)
		}
	}
}

// inStoreAtFinalRead says what shows that job id, neither acknowledged nor
// in the final read, was in the store when the final read began, or "" if
// nothing does. Only the periodic schedule enqueues jobs after it began:
// the workload has stopped, and the quiesce period ended with every job in
// the store final (or the job would be in the final state, open). The
// store's reads are linearizable, so a job that the store's history saw
// written before the final read began was in the store when it was read,
// whenever it ran; so was a job whose exec command ran (only the workload
// enqueues the exec kind), and one that the histories show starting
// before the final read began (or at all, if when it began is not known).
func (c *checker) inStoreAtFinalRead(id string) string {
	for _, e := range c.logJob[id] {
		if e.Key == "j" && !e.Seen.IsZero() && e.Seen.Before(c.in.FinalAt) {
			return fmt.Sprintf("the store's history saw it written at revision %d (%s), before the final read began", e.Rev, e.Seen.Format(tsFormat))
		}
	}
	if ls := c.execJob[id]; len(ls) > 0 {
		return fmt.Sprintf("its command ran (line %d of the exec runs' file, token %d)", ls[0].N, ls[0].Token)
	}
	for _, r := range c.byJob[id] {
		if c.in.FinalAt.IsZero() || !r.Start.After(c.in.FinalAt) {
			return "job ran (histories show it)"
		}
	}
	return ""
}
