package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/fence"
)

// execWorld is a world with one job of execKind, jobA, and the shared
// file's lines given as text.
func execWorld(t *testing.T, file string) *world {
	t.Helper()
	w := newWorld()
	w.in.Jobs[jobA] = &JobInfo{ID: jobA, EnqueuedAt: at(1), Spec: jobSpec{Kind: execKind, MS: 1000, MaxAttempts: 25}}
	lines, err := parseExecRuns(strings.NewReader(file), execRunsFile)
	if err != nil {
		t.Fatal(err)
	}
	w.in.ExecLines = lines
	return w
}

func (w *world) execFinal(id string, st coordinator.State, owner string, token int64) {
	w.final(id, st, owner, token)
	w.in.Final[id].Kind = execKind
}

func execViolations(res *Result, kind string) []Violation {
	var out []Violation
	for _, v := range res.Violations {
		if v.Kind == kind {
			out = append(out, v)
		}
	}
	return out
}

// Two runs of a job one after the other (the first stopped, the second
// run to its end and completed) are clean; the exec kind's jobs have no
// history events, and their final record is not held against them.
func TestExecRunsOneAfterTheOtherPass(t *testing.T) {
	w := execWorld(t, jobA+" 10 start\n"+jobB+" 11 start\n"+jobA+" 10 run\n"+jobA+" 20 start\n"+jobB+" 11 end\n"+jobA+" 20 run\n"+jobA+" 20 end\n")
	w.in.Jobs[jobB] = &JobInfo{ID: jobB, EnqueuedAt: at(1), Spec: jobSpec{Kind: execKind, MS: 100, MaxAttempts: 25}}
	w.execFinal(jobA, coordinator.StateCompleted, "w2", 20)
	w.execFinal(jobB, coordinator.StateCompleted, "w1", 11)
	res := Check(w.in)
	if len(res.Violations) != 0 {
		t.Fatalf("violations %+v, want none", res.Violations)
	}
	want := ExecStats{Kind: execKind, Jobs: 2, Completed: 2, Lines: 7, Runs: 3, Rerun: 1}
	if res.Exec != want {
		t.Fatalf("exec stats %+v, want %+v", res.Exec, want)
	}
}

// A line of an earlier run after a later run's first line is an overlap,
// reported with both tokens and the line numbers, and in the timeline.
func TestExecRunsInterleavedReported(t *testing.T) {
	w := execWorld(t, jobA+" 10 start\n"+jobA+" 10 run\n"+jobA+" 20 start\n"+jobA+" 10 run\n"+jobA+" 20 run\n"+jobA+" 10 run\n"+jobA+" 20 end\n")
	w.execFinal(jobA, coordinator.StateCompleted, "w2", 20)
	res := Check(w.in)
	vs := execViolations(res, "exec-runs-overlap")
	if len(vs) != 1 || len(res.Violations) != 1 {
		t.Fatalf("violations %+v, want one exec-runs-overlap", res.Violations)
	}
	for _, s := range []string{"token 10's command wrote line 4", "after token 20's command began at line 3", "token 10 having begun at line 1"} {
		if !strings.Contains(vs[0].Detail, s) {
			t.Fatalf("detail %q does not say %q", vs[0].Detail, s)
		}
	}
	if res.Exec.Overlaps != 1 || countViolations(res) != 1 {
		t.Fatalf("exec stats %+v, %d violations counted; want 1 overlap, 1 violation", res.Exec, countViolations(res))
	}
	var b strings.Builder
	timeline(&b, w.in, res, jobA)
	for _, s := range []string{"kind=xrun", "lines 1-2      token=10 2 lines: start,run", "line 3         token=20 1 lines: start", "VIOLATION exec-runs-overlap"} {
		if !strings.Contains(b.String(), s) {
			t.Fatalf("timeline does not show %q:\n%s", s, b.String())
		}
	}
}

// Three runs: a line of the first after the third began overlaps both
// later ones; the second's line after the third began overlaps the third.
func TestExecRunsEveryOverlappingPairReported(t *testing.T) {
	w := execWorld(t, jobA+" 10 start\n"+jobA+" 20 start\n"+jobA+" 30 start\n"+jobA+" 10 run\n"+jobA+" 20 run\n"+jobA+" 30 end\n")
	w.execFinal(jobA, coordinator.StateCompleted, "w1", 30)
	res := Check(w.in)
	if vs := execViolations(res, "exec-runs-overlap"); len(vs) != 3 || res.Exec.Overlaps != 3 {
		t.Fatalf("violations %+v, want 3 overlapping pairs (10-20, 10-30, 20-30)", res.Violations)
	}
}

// A completed job of the kind must show its completing token's command
// run to its end.
func TestExecCompletedWithoutItsCommandReported(t *testing.T) {
	for name, file := range map[string]string{
		"no lines":          "",
		"another token":     jobA + " 10 start\n" + jobA + " 10 end\n",
		"not to its end":    jobA + " 20 start\n" + jobA + " 20 run\n",
		"another job's end": jobA + " 20 start\n" + jobB + " 20 end\n",
	} {
		t.Run(name, func(t *testing.T) {
			w := execWorld(t, file)
			w.execFinal(jobA, coordinator.StateCompleted, "w2", 20)
			res := Check(w.in)
			if vs := execViolations(res, "exec-not-run"); len(vs) != 1 || !strings.Contains(vs[0].Detail, "completed by token 20") {
				t.Fatalf("violations %+v, want one exec-not-run of token 20", res.Violations)
			}
		})
	}
}

// A job of the kind cancelled while its command ran needs no end line.
func TestExecCancelledMidRunPasses(t *testing.T) {
	w := execWorld(t, jobA+" 10 start\n"+jobA+" 10 run\n")
	w.in.Jobs[jobA].Cancels = []CancelReq{{At: at(2), Result: "cancel-requested", Acked: at(2)}}
	w.execFinal(jobA, coordinator.StateCancelled, "w1", 10)
	if res := Check(w.in); len(res.Violations) != 0 {
		t.Fatalf("violations %+v, want none", res.Violations)
	}
}

// A history job's final record is still held against its histories.
func TestHistoryJobWithoutRunsStillReported(t *testing.T) {
	w := execWorld(t, "")
	w.enqueue(jobB, 1)
	w.final(jobB, coordinator.StateCompleted, "w1", 5)
	w.in.Final[jobA] = &coordinator.Job{ID: jobA, Kind: execKind, State: coordinator.StateAvailable}
	res := Check(w.in)
	if vs := execViolations(res, "final-mismatch"); len(vs) != 1 || vs[0].Job != jobB {
		t.Fatalf("violations %+v, want one final-mismatch of the history job", res.Violations)
	}
}

func TestExecRunsFileUnreadableLineIsAnError(t *testing.T) {
	for _, bad := range []string{"JOB 10\n", "JOB ten start\n", "JOB 10 begin\n", "JOB 0 start\n", "JOB 10 start extra\n"} {
		if _, err := parseExecRuns(strings.NewReader(jobA+" 1 start\n"+bad), "f"); err == nil || !strings.Contains(err.Error(), "f:2:") {
			t.Errorf("%q: err %v, want one naming line 2", bad, err)
		}
	}
	lines, err := readExecRuns(filepath.Join(t.TempDir(), "absent"))
	if err != nil || lines != nil {
		t.Fatalf("absent file: %v, %v; want no lines, no error", lines, err)
	}
}

// The command the daemons run: it reads its milliseconds from the
// payload, works that long, and appends its lines, first and last
// included, to the shared file.
func TestExecScriptWritesItsLines(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs it's in", execRunsFile) // a quote in the path
	if err := os.MkdirAll(filepath.Dir(runs), 0o755); err != nil {
		t.Fatal(err)
	}
	arg, err := writeExecScript(dir, runs)
	if err != nil {
		t.Fatal(err)
	}
	kind, command, _ := strings.Cut(arg, "=")
	if kind != execKind {
		t.Fatalf("--exec %q: kind %q, want %q", arg, kind, execKind)
	}
	for _, tok := range []string{"7", "8"} {
		cmd := exec.Command("sh", "-c", command)
		cmd.Stdin = strings.NewReader(`{"ms":200}`) // as the daemon gives it: no newline
		cmd.Env = append(os.Environ(), "LEASEHOLD_JOB_ID="+jobA, "LEASEHOLD_TOKEN="+tok, "LEASEHOLD_ATTEMPT=1")
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", command, err, out)
		}
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Fatalf("the command took %s, want at least its payload's 200ms", d)
		}
	}
	lines, err := readExecRuns(runs)
	if err != nil {
		t.Fatal(err)
	}
	segs := execSegments(lines)
	if len(segs) != 2 || segs[0].token != 7 || segs[1].token != 8 {
		t.Fatalf("segments %+v, want token 7's lines, then token 8's", segs)
	}
	for _, s := range segs {
		if n := s.to - s.from + 1; n != s.lines || s.lines < 200/execStepMS+2 {
			t.Fatalf("segment %+v: want at least %d consecutive lines", s, 200/execStepMS+2)
		}
	}
	if first, last := lines[0], lines[segs[0].to-1]; first.Phase != execStart || last.Phase != execEnd || first.Job != jobA {
		t.Fatalf("token 7's lines go from %+v to %+v, want %s's start to its end", first, last, jobA)
	}

	cmd := exec.Command("sh", "-c", command)
	cmd.Stdin = strings.NewReader(`{"fail_times":1}`)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "no ms in the payload") {
		t.Fatalf("a payload without ms: %v %s, want a failure that says so", err, out)
	}
}

func TestExecSegmentsListedUpToALimit(t *testing.T) {
	var b strings.Builder
	for i := range 10 {
		fmt.Fprintf(&b, "%s %d run\n", jobA, 10+i%2*10)
	}
	w := execWorld(t, b.String())
	segs := execSegments(w.in.ExecLines)
	if len(segs) != 10 {
		t.Fatalf("%d stretches, want 10", len(segs))
	}
	if d := describeSegments(segs); strings.Count(d, "token ") != maxSegments || !strings.HasSuffix(d, "and 4 more stretches") {
		t.Fatalf("described as %q, want %d stretches and 4 more", d, maxSegments)
	}
}

// Two commands under one token (one claim ran its command twice) do not
// interleave by token, yet one run is one command: token-reuse, as for a
// history job's run that started twice. With the store's history, a
// command's token must be the revision of a claim of its job.
func TestExecTokenStartedTwiceOrUnknownReported(t *testing.T) {
	w := execWorld(t, jobA+" 10 start\n"+jobA+" 10 run\n"+jobA+" 10 start\n"+jobA+" 10 run\n"+jobA+" 10 end\n")
	w.execFinal(jobA, coordinator.StateCompleted, "w1", 10)
	res := Check(w.in)
	if vs := execViolations(res, "token-reuse"); len(vs) != 1 || len(res.Violations) != 1 || !strings.Contains(vs[0].Detail, "lines 1 and 3") {
		t.Fatalf("violations %+v, want one token-reuse naming lines 1 and 3", res.Violations)
	}

	w = execWorld(t, jobA+" 10 start\n"+jobA+" 10 end\n"+jobA+" 12 start\n"+jobA+" 12 end\n")
	w.execFinal(jobA, coordinator.StateCompleted, "w1", 12)
	w.in.LogOK = true
	rec := func(st coordinator.State, token int64) *coordinator.Job {
		return &coordinator.Job{ID: jobA, Kind: execKind, Queue: "default", State: st, Owner: "w1", Token: fence.Token(token), MaxAttempts: 25}
	}
	w.in.Log = []StoreEvent{
		{Rev: 5, Key: "j", Job: jobA, Rec: rec(coordinator.StateAvailable, 0)},
		{Rev: 10, Key: "j", Job: jobA, Rec: rec(coordinator.StateRunning, 0)},
		{Rev: 10, Key: "o", Job: jobA, CreateRev: 10},
		{Rev: 11, Key: "o", Job: jobA, Delete: true},
		{Rev: 11, Key: "f", Job: jobA, Index: "f/1/" + jobA},
		{Rev: 11, Key: "j", Job: jobA, Rec: rec(coordinator.StateCompleted, 10)},
	}
	w.in.Final[jobA].Token = 10
	res = Check(w.in)
	if vs := execViolations(res, "token-unknown"); len(vs) != 1 || !strings.Contains(vs[0].Detail, "token 12") {
		t.Fatalf("violations %+v, want one token-unknown of token 12", res.Violations)
	}
}
