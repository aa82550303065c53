package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/coordinator"
)

// The exec kind: every daemon also runs jobs of kind execKind with
// --exec, whose command (execScript) works for the milliseconds of its
// payload and meanwhile appends lines "JOB TOKEN PHASE" to one file that
// all daemons share (execRunsFile in the history directory). Appends of
// small lines with O_APPEND from processes on one machine are atomic and
// totally ordered, so the file says, without clocks, whether two commands
// of one job ever ran at the same time: the design stops a run before its
// lease can expire (the daemon cancels its handler at its session's
// deadline; the exec guard kills a dead daemon's commands and stops a
// paused daemon's at that deadline), so the lines of two runs of a job
// must never interleave.
const (
	execKind     = "xrun"
	execRunsFile = "exec-runs.txt"
	execScriptF  = "xrun.sh"
)

// Phases of an exec run's lines: its first line, one every execStepMS
// while it works, and its last, written just before it exits 0.
const (
	execStart = "start"
	execWork  = "run"
	execEnd   = "end"
)

// execStepMS is the interval of an exec run's lines, in milliseconds: each
// step forks a sleep, and at 30 ms the forks of 48 commands at once took
// the two cores from the daemons (reclaims 10 times slower, runs 6 times
// their length); the overlaps the check is for last seconds.
const execStepMS = 200

// execScript is the command of execKind, a POSIX sh script: $1 is the
// shared file; the payload {"ms":N} comes on stdin.
var execScript = `# cluster-test's exec kind: works for the payload's "ms" milliseconds,
# appending "JOB TOKEN PHASE" to the shared file $1 at its start, every
# ` + strconv.Itoa(execStepMS) + ` ms while it works, and just before it exits 0.
f=$1
p=
IFS= read -r p
ms=${p#*\"ms\":}
ms=${ms%%[!0-9]*}
if [ -z "$ms" ]; then
	echo "xrun: no ms in the payload: $p" >&2
	exit 2
fi
me="$LEASEHOLD_JOB_ID $LEASEHOLD_TOKEN"
echo "$me start" >>"$f" || exit 1
left=$ms
while [ "$left" -gt 0 ]; do
	step=` + strconv.Itoa(execStepMS) + `
	if [ "$left" -lt "$step" ]; then step=$left; fi
	sleep "0.$(printf %03d "$step")" || exit 1
	left=$((left - step))
	echo "$me run" >>"$f" || exit 1
done
echo "$me end" >>"$f" || exit 1
exit 0
`

// writeExecScript writes execScript to dir and returns the --exec value
// that runs it, appending to runs.
func writeExecScript(dir, runs string) (string, error) {
	path := filepath.Join(dir, execScriptF)
	if err := os.WriteFile(path, []byte(execScript), 0o644); err != nil {
		return "", fmt.Errorf("writing the exec kind's script: %w", err)
	}
	return execKind + "=sh " + shQuote(path) + " " + shQuote(runs), nil
}

// shQuote quotes s for sh.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ExecLine is one line of the exec runs' shared file.
type ExecLine struct {
	// N is its line number, from 1.
	N     int
	Job   string
	Token int64
	Phase string
}

// readExecRuns reads the exec runs' shared file; a file that does not
// exist (a run saved before the exec kind) holds no lines. Every line is
// one whole append, so an unreadable one is an error, wherever it is.
func readExecRuns(path string) ([]ExecLine, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the exec runs: %w", err)
	}
	defer func() { _ = f.Close() }()
	return parseExecRuns(f, path)
}

func parseExecRuns(r io.Reader, name string) ([]ExecLine, error) {
	var out []ExecLine
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		f := strings.Fields(sc.Text())
		if len(f) != 3 || (f[2] != execStart && f[2] != execWork && f[2] != execEnd) {
			return nil, fmt.Errorf("%s:%d: unreadable exec run line %q: want JOB TOKEN start|run|end", name, n, sc.Text())
		}
		tok, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || tok <= 0 {
			return nil, fmt.Errorf("%s:%d: unreadable exec run line %q: the token is not a positive number", name, n, sc.Text())
		}
		out = append(out, ExecLine{N: n, Job: f[0], Token: tok, Phase: f[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// ExecStats describe the exec kind's jobs and their runs in the shared
// file.
type ExecStats struct {
	Kind string `json:"kind"`
	// Jobs counts the jobs of the kind; Completed those that ended
	// completed.
	Jobs      int `json:"jobs"`
	Completed int `json:"completed"`
	// Lines counts the file's lines, Runs the runs (distinct job and
	// token) they show, and Rerun the jobs with more than one run.
	Lines int `json:"lines"`
	Runs  int `json:"runs"`
	Rerun int `json:"jobs_run_more_than_once"`
	// Overlaps counts the pairs of runs of one job whose lines
	// interleave.
	Overlaps int `json:"overlaps"`
}

// isExec reports whether job id is of execKind: a job that neither the
// final read nor the acknowledged enqueues show is if its command ran.
func (c *checker) isExec(id string) bool {
	if f := c.in.Final[id]; f != nil {
		return f.Kind == execKind
	}
	if info := c.in.Jobs[id]; info != nil {
		return info.Spec.Kind == execKind
	}
	return len(c.execJob[id]) > 0
}

// execSegment is a stretch of consecutive lines of one run of a job (in
// the job's own lines).
type execSegment struct {
	token    int64
	from, to int // line numbers
	lines    int
	phases   []string
}

// execSegments splits a job's lines, in file order, into stretches of one
// token each.
func execSegments(lines []ExecLine) []execSegment {
	var out []execSegment
	for _, l := range lines {
		if n := len(out); n > 0 && out[n-1].token == l.Token {
			s := &out[n-1]
			s.to, s.lines = l.N, s.lines+1
			if !slices.Contains(s.phases, l.Phase) {
				s.phases = append(s.phases, l.Phase)
			}
			continue
		}
		out = append(out, execSegment{token: l.Token, from: l.N, to: l.N, lines: 1, phases: []string{l.Phase}})
	}
	return out
}

// checkExecRuns checks the exec runs' shared file: the lines of one job's
// runs never interleave (once a line of a later run, another token,
// appears, no line of an earlier one follows), and every job of the kind
// that completed has the last line of its completing token's command.
func (c *checker) checkExecRuns() {
	es := &c.res.Exec
	es.Kind, es.Lines = execKind, len(c.in.ExecLines)
	for _, id := range c.jobIDs() {
		if !c.isExec(id) {
			continue
		}
		es.Jobs++
		lines := c.execJob[id]
		c.checkExecInterleave(id, lines)
		f := c.in.Final[id]
		if f == nil || f.State != coordinator.StateCompleted {
			continue
		}
		es.Completed++
		ended := false
		for _, l := range lines {
			if l.Token == int64(f.Token) && l.Phase == execEnd {
				ended = true
				break
			}
		}
		if !ended {
			c.violate("exec-not-run", id, "completed by token %d (%s), but the shared file has no %q line of that token: its command did not run to its end (the job's lines: %s)",
				f.Token, f.Owner, execEnd, describeSegments(execSegments(lines)))
		}
	}
}

// checkExecInterleave checks one job's lines, in file order, for runs
// that interleave: runs are ordered by their first line, and a line of a
// run after the first line of a later one is an overlap (reported once
// per pair, at the first such line). Two start lines of one token are
// two commands of one run, whose lines cannot be told apart: token-reuse.
func (c *checker) checkExecInterleave(id string, lines []ExecLine) {
	es := &c.res.Exec
	first := map[int64]int{} // token -> its first line
	var order []int64        // tokens by first line
	reported := map[[2]int64]bool{}
	started := map[int64]int{} // token -> its start line
	for _, l := range lines {
		if l.Phase == execStart {
			// One run is one command: its token never starts two.
			if n, ok := started[l.Token]; ok {
				c.violate("token-reuse", id, "token %d's command started twice, at lines %d and %d of the exec runs' file: one claim ran two commands (the job's lines: %s)",
					l.Token, n, l.N, describeSegments(execSegments(lines)))
			} else {
				started[l.Token] = l.N
			}
		}
		if _, ok := first[l.Token]; !ok {
			first[l.Token] = l.N
			order = append(order, l.Token)
			continue
		}
		// Every run that began after this one did, and before this line,
		// was running at the same time as it.
		i := slices.Index(order, l.Token)
		for _, later := range order[i+1:] {
			pair := [2]int64{l.Token, later}
			if reported[pair] {
				continue
			}
			reported[pair] = true
			es.Overlaps++
			c.violate("exec-runs-overlap", id, "token %d's command wrote line %d (%s) after token %d's command began at line %d, token %d having begun at line %d: two commands of the job ran at the same time (the job's lines: %s)",
				l.Token, l.N, l.Phase, later, first[later], l.Token, first[l.Token], describeSegments(execSegments(lines)))
		}
	}
	es.Runs += len(order)
	if len(order) > 1 {
		es.Rerun++
	}
}

// maxSegments bounds the stretches of lines a violation lists (the
// timeline lists them all).
const maxSegments = 6

// describeSegments says which lines each run wrote, in file order.
func describeSegments(segs []execSegment) string {
	if len(segs) == 0 {
		return "none"
	}
	var parts []string
	for i, s := range segs {
		if i == maxSegments {
			parts = append(parts, fmt.Sprintf("and %d more stretches", len(segs)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("token %d at %s (%d: %s)", s.token, lineRange(s.from, s.to), s.lines, strings.Join(s.phases, ",")))
	}
	return strings.Join(parts, "; ")
}

func lineRange(from, to int) string {
	if from == to {
		return fmt.Sprintf("line %d", from)
	}
	return fmt.Sprintf("lines %d-%d", from, to)
}
