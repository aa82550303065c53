package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/fence"
)

// A synthetic world: two daemons (w1 on d1, w2 on d2), jobs with ULID ids.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

const (
	jobA = "01JF0000000000000000000001"
	jobB = "01JF0000000000000000000002"
	jobC = "01JF0000000000000000000003"
	jobD = "01JF0000000000000000000005"
)

type world struct {
	in *CheckInput
}

func newWorld() *world {
	return &world{in: &CheckInput{
		Mode:  "shared",
		Jobs:  map[string]*JobInfo{},
		Final: map[string]*coordinator.Job{},
		Instances: []instance{
			{Slot: 0, Worker: "w1", PID: 1, Started: at(0)},
			{Slot: 1, Worker: "w2", PID: 2, Started: at(0)},
		},
		End: at(100),
	}}
}

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

func (w *world) enqueue(id string, s float64) {
	w.in.Jobs[id] = &JobInfo{ID: id, EnqueuedAt: at(s), Spec: jobSpec{MS: 1000, MaxAttempts: 25}}
}

func (w *world) final(id string, st coordinator.State, owner string, token int64) {
	fin := at(90)
	w.in.Final[id] = &coordinator.Job{ID: id, Kind: "history", Queue: "default", State: st, Owner: owner,
		Token: fence.Token(token), MaxAttempts: 25, FinalizedAt: &fin}
}

func (w *world) start(id, worker string, token int64, s float64) {
	w.in.Events = append(w.in.Events, Event{Ev: "start", Job: id, Attempt: 1, Token: token, Worker: worker, At: at(s)})
}

func (w *world) checkpoint(id, worker string, token int64, s float64, ok bool) {
	e := Event{Ev: "checkpoint", Job: id, Attempt: 1, Token: token, Worker: worker, At: at(s), Accepted: no()}
	if ok {
		e.Accepted = yes()
	} else {
		e.Err = "fence: checkpoint of job refused: ownership key is gone"
	}
	w.in.Events = append(w.in.Events, e)
}

func (w *world) outcome(id, worker string, token int64, s float64, op string, ok bool, errs string) {
	started := at(0)
	e := Event{Ev: "outcome", Job: id, Attempt: 1, Token: token, Worker: worker, At: at(s), Op: op, Accepted: no(), Err: errs, Started: &started}
	if ok {
		e.Accepted = yes()
	}
	w.in.Events = append(w.in.Events, e)
}

// cleanRun adds a complete, accepted run.
func (w *world) cleanRun(id, worker string, token int64, s float64) {
	w.start(id, worker, token, s)
	w.checkpoint(id, worker, token, s+0.5, true)
	w.outcome(id, worker, token, s+1, "complete", true, "")
}

func kinds(res *Result) map[string]int {
	m := map[string]int{}
	for _, v := range res.Violations {
		m[v.Kind]++
	}
	return m
}

func wantKind(t *testing.T, res *Result, kind string) {
	t.Helper()
	if kinds(res)[kind] == 0 {
		t.Fatalf("no %q violation reported; got %+v", kind, res.Violations)
	}
}

func wantClean(t *testing.T, res *Result) {
	t.Helper()
	if len(res.Violations) > 0 || len(res.Lost) > 0 {
		t.Fatalf("clean history reported violations: %+v, lost %v", res.Violations, res.Lost)
	}
}

// cleanWorld: a job that ran once; a job whose first run was lost with a
// paused daemon and ran again elsewhere (an overlap whose older writes were
// all refused); a job cancelled while queued.
func cleanWorld() *world {
	w := newWorld()
	w.enqueue(jobA, 0)
	w.cleanRun(jobA, "w1", 10, 1)
	w.final(jobA, coordinator.StateCompleted, "w1", 10)

	w.enqueue(jobB, 0)
	w.start(jobB, "w1", 11, 1)
	w.in.Faults = append(w.in.Faults, &Fault{Group: 1, Kind: fPauseDaemon, Slot: 0, Start: at(1.5), End: at(6)})
	w.start(jobB, "w2", 20, 4)
	w.checkpoint(jobB, "w1", 11, 6.1, false)
	w.outcome(jobB, "w1", 11, 6.2, "abandon", false, "fence: lease lost: session ended (coordinator: session expired)")
	w.checkpoint(jobB, "w2", 20, 4.5, true)
	w.outcome(jobB, "w2", 20, 5, "complete", true, "")
	w.final(jobB, coordinator.StateCompleted, "w2", 20)

	w.enqueue(jobC, 0)
	w.in.Jobs[jobC].Cancels = []CancelReq{{At: at(0.5), Result: "cancelled"}}
	w.final(jobC, coordinator.StateCancelled, "", 0)
	return w
}

func TestCleanHistoryPasses(t *testing.T) {
	res := Check(cleanWorld().in)
	wantClean(t, res)
	if res.Jobs != 3 || res.Runs != 3 || res.DuplicateRuns != 1 || res.QueueCancels != 1 {
		t.Fatalf("jobs %d runs %d duplicates %d queue cancels %d; want 3, 3, 1, 1", res.Jobs, res.Runs, res.DuplicateRuns, res.QueueCancels)
	}
	if res.Reclaim.N != 1 || res.Reclaim.P50 != 2.5 {
		t.Fatalf("reclaim %+v; want one sample of 2.5s (pause at 1.5s, next start at 4s)", res.Reclaim)
	}
}

func TestLostJobReported(t *testing.T) {
	w := cleanWorld()
	// An acknowledged job that never made it into the store...
	w.enqueue("01JF0000000000000000000009", 2)
	// ...and one left running after the quiesce period.
	w.enqueue("01JF000000000000000000000A", 2)
	w.start("01JF000000000000000000000A", "w1", 30, 3)
	w.final("01JF000000000000000000000A", coordinator.StateRunning, "w1", 30)
	w.in.Final["01JF000000000000000000000A"].FinalizedAt = nil
	res := Check(w.in)
	if len(res.Lost) != 2 {
		t.Fatalf("lost %v; want both jobs", res.Lost)
	}
	wantKind(t, res, "lost")
}

func TestTwoAcceptedFinalsReported(t *testing.T) {
	w := newWorld()
	w.enqueue(jobA, 0)
	w.cleanRun(jobA, "w1", 10, 1)
	w.cleanRun(jobA, "w2", 20, 5)
	w.final(jobA, coordinator.StateCompleted, "w2", 20)
	res := Check(w.in)
	wantKind(t, res, "two-finals")
}

func TestFinalRecordMismatchReported(t *testing.T) {
	w := newWorld()
	w.enqueue(jobA, 0)
	w.cleanRun(jobA, "w1", 10, 1)
	w.final(jobA, coordinator.StateCompleted, "w2", 20) // not the run that wrote it
	wantKind(t, Check(w.in), "final-mismatch")
}

func TestAcceptedStaleWriteReported(t *testing.T) {
	w := newWorld()
	w.enqueue(jobA, 0)
	w.start(jobA, "w1", 10, 1)
	w.start(jobA, "w2", 20, 4) // the job was claimed again
	w.checkpoint(jobA, "w1", 10, 6, true)
	w.outcome(jobA, "w1", 10, 6.5, "abandon", false, "fence: lease lost: session ended")
	w.checkpoint(jobA, "w2", 20, 4.5, true)
	w.outcome(jobA, "w2", 20, 5, "complete", true, "")
	w.final(jobA, coordinator.StateCompleted, "w2", 20)
	res := Check(w.in)
	wantKind(t, res, "stale-write")
	if !strings.Contains(res.Violations[0].Detail+res.Violations[len(res.Violations)-1].Detail, "token 10") {
		t.Fatalf("violation does not name the stale token: %+v", res.Violations)
	}
}

func TestOverlappingRunsWithAcceptedWritesReported(t *testing.T) {
	w := newWorld()
	w.enqueue(jobA, 0)
	w.start(jobA, "w1", 10, 1)
	w.start(jobA, "w2", 20, 3)
	w.checkpoint(jobA, "w2", 20, 3.5, true)
	w.outcome(jobA, "w1", 10, 4, "complete", true, "") // after the newer claim, accepted
	w.outcome(jobA, "w2", 20, 5, "complete", false, "fence: complete of job refused: ownership key is gone")
	w.final(jobA, coordinator.StateCompleted, "w1", 10)
	res := Check(w.in)
	wantKind(t, res, "overlap")
	if res.DuplicateRuns != 1 {
		t.Fatalf("duplicate runs %d; want 1", res.DuplicateRuns)
	}
}

func TestOverlapWithRefusedWritesIsNotAViolation(t *testing.T) {
	w := cleanWorld() // jobB overlaps, its older run's late writes all refused
	res := Check(w.in)
	wantClean(t, res)
	if res.DuplicateRuns != 1 {
		t.Fatalf("duplicate runs %d; want 1", res.DuplicateRuns)
	}
}

func TestTokenNotIncreasingReported(t *testing.T) {
	w := newWorld()
	w.enqueue(jobA, 0)
	w.start(jobA, "w1", 20, 1)
	w.outcome(jobA, "w1", 20, 2, "abandon", false, "fence: lease lost: session ended")
	w.cleanRun(jobA, "w2", 10, 5) // a later claim with a smaller token
	w.final(jobA, coordinator.StateCompleted, "w2", 10)
	wantKind(t, Check(w.in), "token-order")

	w = newWorld()
	w.enqueue(jobA, 0)
	w.start(jobA, "w1", 10, 1)
	w.outcome(jobA, "w1", 10, 2, "abandon", false, "fence: lease lost: session ended")
	w.cleanRun(jobA, "w2", 10, 5) // the same token twice
	w.final(jobA, coordinator.StateCompleted, "w2", 10)
	wantKind(t, Check(w.in), "token-reuse")
}

func TestStartRecordedLateAfterPartitionIsNotAViolation(t *testing.T) {
	w := newWorld()
	w.enqueue(jobA, 0)
	// w1's claim (token 10) was applied as its replies were cut off; the
	// reply came after the heal, after w2's run with token 20 began.
	w.in.Faults = append(w.in.Faults, &Fault{Group: 1, Kind: fPartitionReply, Slot: 0, Start: at(1), End: at(6)})
	w.cleanRun(jobA, "w2", 20, 4)
	w.start(jobA, "w1", 10, 6.01)
	w.outcome(jobA, "w1", 10, 6.02, "abandon", false, "fence: lease lost: session ended")
	w.final(jobA, coordinator.StateCompleted, "w2", 20)
	wantClean(t, Check(w.in))
	// Without the fault, the same history is a violation.
	w.in.Faults = nil
	wantKind(t, Check(w.in), "token-order")
}

func TestStartRecordedLateAfterPauseIsNotAViolation(t *testing.T) {
	w := newWorld()
	w.enqueue(jobA, 0)
	// w1 claimed token 10 just before it was paused, and recorded the
	// start only after SIGCONT, after w2's run with token 20 began.
	w.in.Faults = append(w.in.Faults, &Fault{Group: 1, Kind: fPauseDaemon, Slot: 0, Start: at(1), End: at(6)})
	w.cleanRun(jobA, "w2", 20, 4)
	w.start(jobA, "w1", 10, 6.01)
	w.outcome(jobA, "w1", 10, 6.02, "abandon", false, "fence: lease lost: session ended")
	w.final(jobA, coordinator.StateCompleted, "w2", 20)
	wantClean(t, Check(w.in))
}

func TestFinalsByReaperUncertainWriteAndQueueCancelPass(t *testing.T) {
	w := newWorld()
	// The reaper cancelled a job whose owner was lost with a pending
	// cancel request: the record keeps the lost run's owner and token.
	w.enqueue(jobA, 0)
	w.start(jobA, "w1", 10, 1)
	w.in.Jobs[jobA].Cancels = []CancelReq{{At: at(1.5), Result: "cancel-requested", Acked: at(1.6)}}
	w.final(jobA, coordinator.StateCancelled, "w1", 10)
	w.in.Final[jobA].Errors = []coordinator.AttemptError{{At: at(5), Attempt: 1, Error: "run lost: owner w1 (token 10) lost its lease"}}
	// A final write that timed out but was applied.
	w.enqueue(jobB, 0)
	w.start(jobB, "w2", 11, 1)
	w.outcome(jobB, "w2", 11, 2, "complete", false, "coordinator: complete job: context deadline exceeded")
	w.final(jobB, coordinator.StateCompleted, "w2", 11)
	// A daemon killed right after its final write, before recording it.
	w.enqueue(jobC, 0)
	w.start(jobC, "w1", 12, 1)
	w.final(jobC, coordinator.StateCompleted, "w1", 12)
	res := Check(w.in)
	wantClean(t, res)
	if res.ReaperFinals != 1 || res.Uncertain != 2 {
		t.Fatalf("reaper finals %d, uncertain %d; want 1, 2", res.ReaperFinals, res.Uncertain)
	}
	// A refused final write cannot have produced the final record.
	w = newWorld()
	w.enqueue(jobB, 0)
	w.start(jobB, "w2", 11, 1)
	w.outcome(jobB, "w2", 11, 2, "complete", false, "fence: complete of job refused: ownership key is gone")
	w.final(jobB, coordinator.StateCompleted, "w2", 11)
	wantKind(t, Check(w.in), "final-mismatch")
}

// storeWorld is jobA in the store log: enqueued (rev 5), claimed by w1
// (rev 10), reaped after w1 lost its lease (rev 14), claimed by w2 (rev
// 20), checkpointed and completed by w2.
func storeWorld() *world {
	w := newWorld()
	w.in.LogOK = true
	w.enqueue(jobA, 0)
	w.start(jobA, "w1", 10, 1)
	w.outcome(jobA, "w1", 10, 3, "abandon", false, "fence: lease lost: session ended")
	w.cleanRun(jobA, "w2", 20, 4)
	w.final(jobA, coordinator.StateCompleted, "w2", 20)
	rec := func(st coordinator.State, owner string, token int64, nerr int, cp string) *coordinator.Job {
		j := &coordinator.Job{ID: jobA, Kind: "history", Queue: "default", State: st, Owner: owner, Token: fence.Token(token), MaxAttempts: 25, Rescues: nerr}
		for i := range nerr {
			j.Errors = append(j.Errors, coordinator.AttemptError{At: at(float64(2 + i)), Attempt: 1, Error: "run lost: owner w1 (token 10) lost its lease"})
		}
		if cp != "" {
			j.Checkpoint = json.RawMessage(cp)
		}
		if st.Final() {
			f := at(5)
			j.FinalizedAt = &f
		}
		return j
	}
	w.in.Log = []StoreEvent{
		{Rev: 5, Key: "j", Job: jobA, Rec: rec(coordinator.StateAvailable, "", 0, 0, "")},
		{Rev: 10, Key: "j", Job: jobA, Rec: rec(coordinator.StateRunning, "w1", 0, 0, "")},
		{Rev: 10, Key: "o", Job: jobA, CreateRev: 10},
		{Rev: 13, Key: "o", Job: jobA, Delete: true},
		{Rev: 14, Key: "j", Job: jobA, Rec: rec(coordinator.StateAvailable, "", 0, 1, "")},
		{Rev: 20, Key: "j", Job: jobA, Rec: rec(coordinator.StateRunning, "w2", 0, 1, "")},
		{Rev: 20, Key: "o", Job: jobA, CreateRev: 20},
		{Rev: 21, Key: "j", Job: jobA, Rec: rec(coordinator.StateRunning, "w2", 20, 1, `{"half":true,"token":20}`)},
		{Rev: 24, Key: "r", Job: jobA, Delete: true},
		{Rev: 24, Key: "f", Job: jobA, Index: "f/00000000000000000005/" + jobA},
		{Rev: 24, Key: "o", Job: jobA, Delete: true},
		{Rev: 24, Key: "j", Job: jobA, Rec: rec(coordinator.StateCompleted, "w2", 20, 1, `{"half":true,"token":20}`)},
	}
	return w
}

func TestStoreLogCleanPasses(t *testing.T) {
	res := Check(storeWorld().in)
	wantClean(t, res)
	if !res.LogChecked {
		t.Fatal("store log not checked")
	}
}

func TestStoreLogStaleTokenWriteReported(t *testing.T) {
	// w1's checkpoint under token 10 applied at revision 22, after token 20
	// was issued, and recorded as accepted in its history.
	w := storeWorld()
	stale := *w.in.Log[7].Rec
	stale.Owner, stale.Token, stale.Checkpoint = "w1", 10, json.RawMessage(`{"half":true,"token":10}`)
	stale.Errors = nil
	w.in.Log = append(w.in.Log[:8:8], append([]StoreEvent{{Rev: 22, Key: "j", Job: jobA, Rec: &stale}}, w.in.Log[8:]...)...)
	w.checkpoint(jobA, "w1", 10, 2.9, true) // recorded before w2 started: time alone would not tell
	res := Check(w.in)
	wantKind(t, res, "stale-write")
	found := false
	for _, v := range res.Violations {
		found = found || strings.Contains(v.Detail, "applied at revision 22, after token 20")
	}
	if !found {
		t.Fatalf("the history write was not placed by the store log: %+v", res.Violations)
	}
}

func TestStoreLogLostUpdateReported(t *testing.T) {
	// A write from a stale copy (it lacks the reaper's "run lost" error)
	// with no token to give it away: a failed attempt made retryable.
	w := storeWorld()
	stale := *w.in.Log[7].Rec
	stale.State, stale.Owner, stale.Token, stale.Checkpoint = coordinator.StateRetryable, "", 0, nil
	stale.Errors = []coordinator.AttemptError{{At: at(9), Attempt: 1, Error: "planned failure 1 of 1"}}
	w.in.Log = append(w.in.Log[:8:8], append([]StoreEvent{{Rev: 22, Key: "j", Job: jobA, Rec: &stale}}, w.in.Log[8:]...)...)
	wantKind(t, Check(w.in), "stale-write")
}

func TestStoreLogDoubleClaimAndWriteAfterFinalReported(t *testing.T) {
	w := storeWorld()
	again := *w.in.Log[5].Rec // a claim of the running job
	w.in.Log = append(w.in.Log[:8:8], append([]StoreEvent{{Rev: 22, Key: "j", Job: jobA, Rec: &again}}, w.in.Log[8:]...)...)
	wantKind(t, Check(w.in), "double-claim")

	w = storeWorld()
	after := *w.in.Log[len(w.in.Log)-1].Rec // the final record
	after.State = coordinator.StateRunning
	w.in.Log = append(w.in.Log, StoreEvent{Rev: 30, Key: "j", Job: jobA, Rec: &after})
	wantKind(t, Check(w.in), "write-after-final")
}

func TestStoreLogPhantomAcceptReported(t *testing.T) {
	// A checkpoint the history says was accepted, which the store never saw.
	w := storeWorld()
	w.in.Log = append(w.in.Log[:7:7], w.in.Log[8:]...)
	wantKind(t, Check(w.in), "phantom-write")
}

func TestScheduleIsReproducible(t *testing.T) {
	a := schedule(42, "shared", 3, 2*time.Second, 0, 2)
	b := schedule(42, "shared", 3, 2*time.Second, 0, 2)
	c := schedule(43, "shared", 3, 2*time.Second, 0, 2)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	jc, _ := json.Marshal(c)
	if string(ja) != string(jb) || string(ja) == string(jc) {
		t.Fatal("the schedule is not a function of the seed")
	}
	count := map[string]int{}
	for _, p := range a {
		count[p.Kind]++
	}
	for _, k := range []string{fKillDaemon, fPauseDaemon, fPartition, fKillLeader, fKillFollower, fPauseMember, fQuorumLoss, fRollingRestart} {
		if count[k] < 2 {
			t.Errorf("short schedule has %d %s faults; want at least 2", count[k], k)
		}
	}
	if count[fPartitionReq] < 1 || count[fPartitionReply] < 1 {
		t.Errorf("short schedule lacks a one-way partition in each direction: %v", count)
	}
}

func TestStoreLogStaleIndexReported(t *testing.T) {
	w := storeWorld()
	w.in.Log = append(w.in.Log, StoreEvent{Rev: 25, Key: "q", Job: jobA, Index: "q/default/1/00000000000000000009/" + jobA})
	wantKind(t, Check(w.in), "index-mismatch")
}

// A run that a graceful stop abandoned draws a warning; a run lost to a
// self-fence before the SIGTERM, whose handler returned only after it,
// was not dropped by the stop: no warning.
func TestGracefulStopAbandonWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, err string
		warn      bool
	}{
		{"abandoned by the stop", "fence: lease lost: session ended (context canceled)", true},
		{"lost to a self-fence before it", "fence: lease lost: session ended (coordinator: session expired)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := cleanWorld()
			w.in.Instances[0].Term, w.in.Instances[0].Ended, w.in.Instances[0].How = at(10), at(10.1), "terminated"
			w.enqueue("01JF000000000000000000000B", 9)
			w.start("01JF000000000000000000000B", "w1", 40, 9.5)
			w.outcome("01JF000000000000000000000B", "w1", 40, 10.01, "abandon", false, tc.err)
			w.cleanRun("01JF000000000000000000000B", "w2", 41, 11)
			w.final("01JF000000000000000000000B", coordinator.StateCompleted, "w2", 41)
			res := Check(w.in)
			wantClean(t, res)
			if got := len(res.Warnings) == 1 && res.Warnings[0].Kind == "graceful-stop-abandoned"; got != tc.warn || (!tc.warn && len(res.Warnings) != 0) {
				t.Fatalf("warnings %+v; want a graceful-stop-abandoned warning: %v", res.Warnings, tc.warn)
			}
		})
	}
}

func TestOrphanedClaimWarns(t *testing.T) {
	w := storeWorld()
	for i := range w.in.Log {
		w.in.Log[i].Seen = at(float64(w.in.Log[i].Rev) / 10)
	}
	// A claim at revision 30 that nobody ran, held until the end.
	w.in.Log = append(w.in.Log, StoreEvent{Rev: 30, Key: "o", Job: jobA, CreateRev: 30, Seen: at(30)})
	res := Check(w.in)
	if len(res.Warnings) != 1 || res.Warnings[0].Kind != "orphaned-claim" {
		t.Fatalf("warnings %+v; want one orphaned-claim", res.Warnings)
	}
}

// --- Review of the checker against DESIGN.md: each test below feeds a
// history with one violation that an earlier checker let pass.

// last returns the last event added.
func (w *world) last() *Event { return &w.in.Events[len(w.in.Events)-1] }

func TestRunAfterAcceptedFinalReported(t *testing.T) {
	// Embedded mode (no store history): token 10's complete was accepted,
	// then the job was claimed again (token 11) and ran; the second run's
	// outcome was a retry, so there are not two accepted finals, and the
	// final record is token 10's.
	w := newWorld()
	w.in.Mode = "embedded"
	w.enqueue(jobA, 0)
	w.cleanRun(jobA, "w1", 10, 1)
	w.start(jobA, "w1", 11, 5)
	w.outcome(jobA, "w1", 11, 6, "fail", true, "")
	w.final(jobA, coordinator.StateCompleted, "w1", 10)
	wantKind(t, Check(w.in), "run-after-final")
	// A refused or abandoned later run is no excuse: it was claimed.
	w = newWorld()
	w.in.Mode = "embedded"
	w.enqueue(jobA, 0)
	w.cleanRun(jobA, "w1", 10, 1)
	w.start(jobA, "w2", 20, 5)
	w.outcome(jobA, "w2", 20, 6, "abandon", false, "fence: lease lost: session ended")
	w.final(jobA, coordinator.StateCompleted, "w1", 10)
	wantKind(t, Check(w.in), "run-after-final")
}

func TestTokenOrderComparesEveryEarlierStart(t *testing.T) {
	// w1's start of token 10 is recorded late (paused) and excused; w2's
	// later start of token 15 went down from its own earlier token 20,
	// which comparing neighbours only (15 > 10) missed.
	w := newWorld()
	w.enqueue(jobA, 0)
	w.in.Faults = append(w.in.Faults, &Fault{Group: 1, Kind: fPauseDaemon, Slot: 0, Start: at(0.5), End: at(6)})
	w.start(jobA, "w2", 20, 1)
	w.outcome(jobA, "w2", 20, 2, "abandon", false, "fence: lease lost: session ended")
	w.start(jobA, "w1", 10, 6.01)
	w.outcome(jobA, "w1", 10, 6.02, "abandon", false, "fence: lease lost: session ended")
	w.cleanRun(jobA, "w2", 15, 8)
	w.final(jobA, coordinator.StateCompleted, "w2", 15)
	wantKind(t, Check(w.in), "token-order")
}

func TestTokenReuseByNonAdjacentRunsReported(t *testing.T) {
	// Token 10 used by w1 and (recorded late, excused for order) by w2,
	// with token 20 between them in start order.
	w := newWorld()
	w.enqueue(jobA, 0)
	w.in.Faults = append(w.in.Faults, &Fault{Group: 1, Kind: fPartitionReply, Slot: 1, Start: at(2), End: at(6)})
	w.start(jobA, "w1", 10, 1)
	w.outcome(jobA, "w1", 10, 2, "abandon", false, "fence: lease lost: session ended")
	w.start(jobA, "w2", 20, 3)
	w.outcome(jobA, "w2", 20, 4, "abandon", false, "fence: lease lost: session ended")
	w.start(jobA, "w2", 10, 6.01)
	w.outcome(jobA, "w2", 10, 6.02, "abandon", false, "fence: lease lost: session ended")
	w.cleanRun(jobA, "w1", 30, 8)
	w.final(jobA, coordinator.StateCompleted, "w1", 30)
	wantKind(t, Check(w.in), "token-reuse")
}

func TestTwoOutcomesOfOneRunReported(t *testing.T) {
	// One run recorded an accepted cancel, then an accepted complete: the
	// checker kept only the last outcome, so the first was invisible.
	w := newWorld()
	w.enqueue(jobA, 0)
	w.start(jobA, "w1", 10, 1)
	w.outcome(jobA, "w1", 10, 2, "cancel", true, "")
	w.outcome(jobA, "w1", 10, 2.5, "complete", true, "")
	w.final(jobA, coordinator.StateCompleted, "w1", 10)
	wantKind(t, Check(w.in), "two-outcomes")
}

func TestUncertainWriteMustExplainTheFinalState(t *testing.T) {
	// A retry (attempt 1 of 25) whose reply was lost cannot have written
	// the job completed; nor can a snooze.
	for _, op := range []string{"fail", "snooze", "release"} {
		w := newWorld()
		w.enqueue(jobA, 0)
		w.start(jobA, "w1", 10, 1)
		w.outcome(jobA, "w1", 10, 2, op, false, "coordinator: "+op+" job: context deadline exceeded")
		w.final(jobA, coordinator.StateCompleted, "w1", 10)
		res := Check(w.in)
		wantKind(t, res, "final-mismatch")
		if res.Uncertain != 0 {
			t.Fatalf("%s: counted as a final by an uncertain write", op)
		}
	}
	// A complete whose reply was lost cannot have cancelled the job.
	w := newWorld()
	w.enqueue(jobA, 0)
	w.in.Jobs[jobA].Cancels = []CancelReq{{At: at(1.5), Result: "cancel-requested", Acked: at(1.6)}}
	w.start(jobA, "w1", 10, 1)
	w.outcome(jobA, "w1", 10, 2, "complete", false, "coordinator: complete job: context deadline exceeded")
	w.final(jobA, coordinator.StateCancelled, "w1", 10)
	wantKind(t, Check(w.in), "final-mismatch")
}

func TestCancelledWithoutARequestReported(t *testing.T) {
	// By the reaper ("run lost" error): cancels only for a request.
	w := newWorld()
	w.enqueue(jobA, 0)
	w.start(jobA, "w1", 10, 1)
	w.final(jobA, coordinator.StateCancelled, "w1", 10)
	w.in.Final[jobA].Errors = []coordinator.AttemptError{{At: at(5), Attempt: 1, Error: "run lost: owner w1 (token 10) lost its lease"}}
	res := Check(w.in)
	wantKind(t, res, "unrequested-cancel")
	// While queued, a job found in the store but never acknowledged (so
	// never the target of a cancel request).
	w = newWorld()
	w.in.Final[jobB] = &coordinator.Job{ID: jobB, Kind: "history", State: coordinator.StateCancelled, MaxAttempts: 25}
	wantKind(t, Check(w.in), "unrequested-cancel")
	// By a run that reported a cancel no one asked for.
	w = newWorld()
	w.enqueue(jobA, 0)
	w.start(jobA, "w1", 10, 1)
	w.outcome(jobA, "w1", 10, 2, "cancel", true, "")
	w.final(jobA, coordinator.StateCancelled, "w1", 10)
	wantKind(t, Check(w.in), "unrequested-cancel")
}

// cancelWorld (ADR 0017): jobA is running under token 10 on w1 when a
// cancel request lands (revision 12); its attempt fails, the store finds
// the request and writes the job cancelled (revision 15), keeping the
// attempt and its error, and the worker reports the outcome as "cancel".
func cancelWorld() *world {
	w := newWorld()
	w.in.LogOK = true
	w.enqueue(jobA, 0)
	w.in.Jobs[jobA].Spec.FailTimes = 1
	w.in.Jobs[jobA].Cancels = []CancelReq{{At: at(1.5), Result: "cancel-requested", Acked: at(1.6)}}
	w.start(jobA, "w1", 10, 1)
	w.checkpoint(jobA, "w1", 10, 1.2, true)
	w.outcome(jobA, "w1", 10, 2, "cancel", true, "")
	w.final(jobA, coordinator.StateCancelled, "w1", 10)
	failErr := []coordinator.AttemptError{{At: at(2), Attempt: 1, Error: "planned failure 1 of 1"}}
	w.in.Final[jobA].Attempt, w.in.Final[jobA].Errors = 1, failErr
	rec := func(st coordinator.State, owner string, token int64, errs []coordinator.AttemptError, cp string) *coordinator.Job {
		j := &coordinator.Job{ID: jobA, Kind: "history", Queue: "default", State: st, Owner: owner, Token: fence.Token(token), Attempt: 1, MaxAttempts: 25, Errors: errs}
		if cp != "" {
			j.Checkpoint = json.RawMessage(cp)
		}
		if st.Final() {
			f := at(2)
			j.FinalizedAt = &f
		}
		return j
	}
	w.in.Log = []StoreEvent{
		{Rev: 5, Key: "j", Job: jobA, Rec: rec(coordinator.StateAvailable, "", 0, nil, "")},
		{Rev: 10, Key: "j", Job: jobA, Rec: rec(coordinator.StateRunning, "w1", 0, nil, "")},
		{Rev: 10, Key: "o", Job: jobA, CreateRev: 10},
		{Rev: 11, Key: "j", Job: jobA, Rec: rec(coordinator.StateRunning, "w1", 10, nil, `{"half":true,"token":10}`)},
		{Rev: 12, Key: "c", Job: jobA, CreateRev: 12},
		{Rev: 15, Key: "r", Job: jobA, Delete: true},
		{Rev: 15, Key: "c", Job: jobA, Delete: true},
		{Rev: 15, Key: "f", Job: jobA, Index: "f/00000000000000000002/" + jobA},
		{Rev: 15, Key: "o", Job: jobA, Delete: true},
		{Rev: 15, Key: "j", Job: jobA, Rec: rec(coordinator.StateCancelled, "w1", 10, failErr, `{"half":true,"token":10}`)},
	}
	return w
}

func TestFailThatFindsACancelRequestPasses(t *testing.T) {
	w := cancelWorld()
	wantClean(t, Check(w.in))
	// The same without the store history (embedded mode).
	w.in.LogOK, w.in.Log = false, nil
	wantClean(t, Check(w.in))
	// A fail whose reply was lost, applied as that cancel: uncertain.
	w = cancelWorld()
	*w.last() = Event{Ev: "outcome", Job: jobA, Attempt: 1, Token: 10, Worker: "w1", At: at(2), Op: "fail", Accepted: no(), Err: "coordinator: fail job: context deadline exceeded"}
	res := Check(w.in)
	wantClean(t, res)
	if res.Uncertain != 1 {
		t.Fatalf("uncertain %d; want 1", res.Uncertain)
	}
}

func TestLogRetryOverPendingCancelReported(t *testing.T) {
	// The store history of the old behaviour: the failed attempt made the
	// job retryable although the cancel request of revision 12 waited
	// (and deleted it); it then ran again and completed.
	w := cancelWorld()
	failErr := w.in.Final[jobA].Errors
	w.in.Events = w.in.Events[:len(w.in.Events)-1]
	w.outcome(jobA, "w1", 10, 2, "fail", true, "planned failure 1 of 1")
	w.cleanRun(jobA, "w2", 20, 4)
	w.final(jobA, coordinator.StateCompleted, "w2", 20)
	w.in.Final[jobA].Errors = failErr
	retry := *w.in.Log[len(w.in.Log)-1].Rec
	retry.State, retry.Owner, retry.Token, retry.FinalizedAt = coordinator.StateRetryable, "", 0, nil
	due := retry
	due.State = coordinator.StateAvailable
	claim := retry
	claim.State, claim.Owner, claim.Attempt = coordinator.StateRunning, "w2", 2
	cp := claim
	cp.Token, cp.Checkpoint = 20, json.RawMessage(`{"half":true,"token":20}`)
	done := cp
	done.State = coordinator.StateCompleted
	fin := at(5)
	done.FinalizedAt = &fin
	w.in.Log = append(w.in.Log[:5:5],
		StoreEvent{Rev: 15, Key: "r", Job: jobA, Delete: true},
		StoreEvent{Rev: 15, Key: "c", Job: jobA, Delete: true},
		StoreEvent{Rev: 15, Key: "t", Job: jobA, Index: "t/x/" + jobA},
		StoreEvent{Rev: 15, Key: "o", Job: jobA, Delete: true},
		StoreEvent{Rev: 15, Key: "j", Job: jobA, Rec: &retry},
		StoreEvent{Rev: 18, Key: "t", Job: jobA, Index: "t/x/" + jobA, Delete: true},
		StoreEvent{Rev: 18, Key: "q", Job: jobA, Index: "q/x/" + jobA},
		StoreEvent{Rev: 18, Key: "j", Job: jobA, Rec: &due},
		StoreEvent{Rev: 20, Key: "q", Job: jobA, Index: "q/x/" + jobA, Delete: true},
		StoreEvent{Rev: 20, Key: "j", Job: jobA, Rec: &claim},
		StoreEvent{Rev: 20, Key: "o", Job: jobA, CreateRev: 20},
		StoreEvent{Rev: 21, Key: "j", Job: jobA, Rec: &cp},
		StoreEvent{Rev: 24, Key: "o", Job: jobA, Delete: true},
		StoreEvent{Rev: 24, Key: "f", Job: jobA, Index: "f/x/" + jobA},
		StoreEvent{Rev: 24, Key: "j", Job: jobA, Rec: &done},
	)
	res := Check(w.in)
	wantKind(t, res, "cancel-dropped")
	if len(res.Violations) != 1 {
		t.Fatalf("want only cancel-dropped; got %+v", res.Violations)
	}
	// Without the store history, by time: token 20 started 2.4 s after
	// the request was acknowledged.
	w.in.LogOK, w.in.Log = false, nil
	wantKind(t, Check(w.in), "cancel-dropped")
}

func TestLogUnfencedWriteReported(t *testing.T) {
	// w1's checkpoint under token 10 applied at revision 13, after its
	// ownership key expired (revision 12) but before the reaper moved the
	// job: the record's token is still the current claim's, so only the
	// ownership key tells that the write was not fenced (promise 3).
	w := storeWorld()
	cp := *w.in.Log[1].Rec
	cp.Token, cp.Checkpoint = 10, json.RawMessage(`{"half":true,"token":10}`)
	w.in.Log[3].Rev = 12
	w.in.Log = append(w.in.Log[:4:4], append([]StoreEvent{{Rev: 13, Key: "j", Job: jobA, Rec: &cp}}, w.in.Log[4:]...)...)
	w.checkpoint(jobA, "w1", 10, 2.5, true)
	res := Check(w.in)
	wantKind(t, res, "unfenced-write")
}

func TestLogReapWhileOwnedReported(t *testing.T) {
	// The reaper re-queued the job (revision 14) while w1's ownership key
	// was still there; it expired only at revision 16 (promise 7).
	w := storeWorld()
	w.in.Log[3].Rev = 16
	w.in.Log[3], w.in.Log[4] = w.in.Log[4], w.in.Log[3]
	wantKind(t, Check(w.in), "reap-while-owned")
}

func TestHistoryCorruptInTheMiddleIsAnError(t *testing.T) {
	dir := t.TempDir()
	good := `{"ev":"start","job":"` + jobA + `","attempt":1,"token":10,"worker":"w1","at":"2026-01-02T03:04:05Z"}`
	// A torn last line is counted...
	if err := os.WriteFile(filepath.Join(dir, "w1.jsonl"), []byte(good+"\n"+`{"ev":"outc`), 0o644); err != nil {
		t.Fatal(err)
	}
	evs, torn, err := readHistories(dir)
	if err != nil || torn != 1 || len(evs) != 1 {
		t.Fatalf("torn last line: %d events, %d torn, %v; want 1, 1, nil", len(evs), torn, err)
	}
	// ...an unreadable line with more after it hides what it held.
	if err := os.WriteFile(filepath.Join(dir, "w1.jsonl"), []byte(good+"\n"+`{"ev":"outc`+"\n"+good+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readHistories(dir); err == nil || !strings.Contains(err.Error(), "w1.jsonl:2") {
		t.Fatalf("corrupt middle line: err %v; want an error naming w1.jsonl:2", err)
	}
}

// queueWorld: limitedQueue limited to 2 at revision 2; jobs A, B and C of
// it enqueued; A and B claimed, A completed, then C claimed; the queue
// paused at revision 10 and resumed at 12, with no claim between.
func queueWorld() *world {
	w := newWorld()
	w.in.LogOK = true
	rec := func(id string, st coordinator.State) *coordinator.Job {
		return &coordinator.Job{ID: id, Kind: "history", Queue: limitedQueue, State: st, MaxAttempts: 25}
	}
	conf := func(paused bool) *coordinator.QueueConfig {
		c := &coordinator.QueueConfig{Name: limitedQueue, Limit: queueLimit, Paused: paused}
		if paused {
			p := at(10)
			c.PausedAt = &p
		}
		return c
	}
	w.in.Log = []StoreEvent{
		{Rev: 2, Key: "qm", Job: limitedQueue, Conf: conf(false)},
		{Rev: 3, Key: "j", Job: jobA, Rec: rec(jobA, coordinator.StateAvailable)},
		{Rev: 4, Key: "j", Job: jobB, Rec: rec(jobB, coordinator.StateAvailable)},
		{Rev: 5, Key: "j", Job: jobC, Rec: rec(jobC, coordinator.StateAvailable)},
		{Rev: 6, Key: "j", Job: jobA, Rec: rec(jobA, coordinator.StateRunning)},
		{Rev: 6, Key: "o", Job: jobA, CreateRev: 6},
		{Rev: 7, Key: "j", Job: jobB, Rec: rec(jobB, coordinator.StateRunning)},
		{Rev: 7, Key: "o", Job: jobB, CreateRev: 7},
		{Rev: 8, Key: "o", Job: jobA, Delete: true},
		{Rev: 8, Key: "j", Job: jobA, Rec: rec(jobA, coordinator.StateCompleted)},
		{Rev: 9, Key: "j", Job: jobC, Rec: rec(jobC, coordinator.StateRunning)},
		{Rev: 9, Key: "o", Job: jobC, CreateRev: 9},
		{Rev: 10, Key: "qm", Job: limitedQueue, Conf: conf(true)},
		{Rev: 12, Key: "qm", Job: limitedQueue, Conf: conf(false)},
	}
	return w
}

func TestQueueControlCleanPasses(t *testing.T) {
	res := Check(queueWorld().in)
	wantClean(t, res)
	if q := res.Queue; q.MaxHeld != 2 || q.Limit != queueLimit || q.Pauses != 1 || q.ClaimsChecked != 3 {
		t.Fatalf("queue figures %+v, want max held 2, limit %d, 1 pause, 3 claims checked", q, queueLimit)
	}
}

func TestQueueOverLimitReported(t *testing.T) {
	w := queueWorld()
	// C's claim lands before A's outcome frees A's slot.
	w.in.Log[8].Rev, w.in.Log[9].Rev = 9, 9
	w.in.Log[10].Rev, w.in.Log[11].Rev = 8, 8
	slices.SortStableFunc(w.in.Log, func(a, b StoreEvent) int { return cmp.Compare(a.Rev, b.Rev) })
	res := Check(w.in)
	wantKind(t, res, "over-limit")
	if n := kinds(res)["over-limit"]; n != 3 {
		t.Fatalf("%d over-limit violations, want one for each of the 3 holders, once: %+v", n, res.Violations)
	}
}

func TestQueueClaimWhilePausedReported(t *testing.T) {
	w := queueWorld()
	// C is claimed after the pause of revision 10 and before the resume.
	w.in.Log[10].Rev, w.in.Log[11].Rev = 11, 11
	slices.SortStableFunc(w.in.Log, func(a, b StoreEvent) int { return cmp.Compare(a.Rev, b.Rev) })
	wantKind(t, Check(w.in), "claim-while-paused")
}

// withSlots adds queueWorld's global-limit slots to its store history: A
// takes slot 0 and B slot 1; A's outcome frees slot 0, which C takes.
func withSlots(w *world) *world {
	slot := func(rev int64, n int, job string) StoreEvent {
		return StoreEvent{Rev: rev, Key: "qs", Job: limitedQueue, Index: fmt.Sprintf("qm/s/%s/%d", limitedQueue, n), Holder: job, Delete: job == ""}
	}
	w.in.SlotsLogged = true
	w.in.Log = append(w.in.Log, slot(6, 0, jobA), slot(7, 1, jobB), slot(8, 0, ""), slot(9, 0, jobC))
	slices.SortStableFunc(w.in.Log, func(a, b StoreEvent) int { return cmp.Compare(a.Rev, b.Rev) })
	return w
}

func TestQueueSlotsMatchingClaimsPass(t *testing.T) {
	wantClean(t, Check(withSlots(queueWorld()).in))
}

// A claim that takes no slot, or an outcome that frees another job's, is
// reported at once, though no more jobs than the limit hold a claim.
func TestQueueSlotMismatchReported(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(e *StoreEvent) bool // false: drop the event
		wants int
	}{
		{"claim-without-slot", func(e *StoreEvent) bool { return !(e.Key == "qs" && e.Holder == jobC) }, 1},
		{"outcome-frees-another-slot", func(e *StoreEvent) bool {
			if e.Key == "qs" && (e.Delete || e.Holder == jobC) {
				e.Index = fmt.Sprintf("qm/s/%s/1", limitedQueue) // B's
			}
			return true
		}, 2}, // B holds none; A's slot is left behind
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := withSlots(queueWorld())
			var log []StoreEvent
			for _, e := range w.in.Log {
				if tc.edit(&e) {
					log = append(log, e)
				}
			}
			w.in.Log = log
			res := Check(w.in)
			if n := kinds(res)["slot-mismatch"]; n != tc.wants || len(res.Violations) != n {
				t.Fatalf("%d slot-mismatch violations, want %d (each once), and nothing else: %+v", n, tc.wants, res.Violations)
			}
		})
	}
}

// A configuration that loses the limit the harness set (a pause and a
// resume that dropped it, say) is reported, and the limit is still
// checked after it.
func TestQueueLimitDroppedReported(t *testing.T) {
	w := queueWorld()
	w.in.Log[12].Conf.Limit = 0 // the pause of revision 10
	w.in.Log[13].Conf.Limit = 0 // the resume of revision 12
	// B, C and D hold claims at once after it.
	w.in.Log = append(w.in.Log,
		StoreEvent{Rev: 13, Key: "j", Job: jobD, Rec: &coordinator.Job{ID: jobD, Kind: "history", Queue: limitedQueue, State: coordinator.StateRunning, MaxAttempts: 25}},
		StoreEvent{Rev: 13, Key: "o", Job: jobD, CreateRev: 13})
	res := Check(w.in)
	if k := kinds(res); k["over-limit"] != 2+3 {
		t.Fatalf("over-limit %d, want 2 for the configurations and 3 for the holders: %+v", k["over-limit"], res.Violations)
	}
}

// tickWorld: ticks of schedule tickName at 10, 11 and 12 s, each one job,
// completed; the final read began at 20 s.
func tickWorld() *world {
	w := newWorld()
	w.in.FinalAt = at(20)
	for i, id := range []string{jobA, jobB, jobC} {
		w.tick(id, float64(10+i), coordinator.StateCompleted)
	}
	return w
}

// tick adds the job of the tick at s s, completed by one clean run on w1
// or left in state st.
func (w *world) tick(id string, s float64, st coordinator.State) {
	token := int64(100 + s)
	if st == coordinator.StateCompleted {
		w.cleanRun(id, "w1", token, s)
		w.final(id, st, "w1", token)
	} else {
		w.final(id, st, "", 0)
		w.in.Final[id].FinalizedAt = nil
	}
	w.in.Final[id].UniqueKey = "periodic:" + tickName + ":" + at(s).Format(time.RFC3339)
}

func TestTicksCleanPass(t *testing.T) {
	w := tickWorld()
	// A tick shortly before the final read may still wait: not lost.
	w.tick("01JF0000000000000000000004", 13, coordinator.StateAvailable)
	res := Check(w.in)
	wantClean(t, res)
	if ts := res.Ticks; ts.Ticks != 4 || ts.Late != 1 || res.Unacked != 0 || !ts.First.Equal(at(10)) {
		t.Fatalf("tick figures %+v (unacknowledged %d), want 4 ticks from 10 s, 1 late, none counted unacknowledged", ts, res.Unacked)
	}
}

// A second job of tick 11 s is tick-twice; a tick at 15 s after 12 s
// misses two (13 s and 14 s).
func TestTickTwiceAndMissedReported(t *testing.T) {
	for _, c := range []struct {
		kind          string
		at            float64
		twice, missed int
	}{{"tick-twice", 11, 1, 0}, {"tick-missed", 15, 0, 2}} {
		w := tickWorld()
		w.tick("01JF0000000000000000000004", c.at, coordinator.StateCompleted)
		res := Check(w.in)
		wantKind(t, res, c.kind)
		if res.Ticks.Twice != c.twice || res.Ticks.Missed != c.missed {
			t.Errorf("%s: twice %d, missed %d; want %d and %d", c.kind, res.Ticks.Twice, res.Ticks.Missed, c.twice, c.missed)
		}
	}
}

// A tick's second job written after the final read (a stale leader, say)
// shows in the store's history.
func TestTickTwiceAfterTheFinalReadReported(t *testing.T) {
	w := tickWorld()
	w.in.LogOK = true
	rec := *w.in.Final[jobB]
	rec.ID, rec.State = "01JF0000000000000000000004", coordinator.StateAvailable
	w.in.Log = []StoreEvent{{Rev: 30, Key: "j", Job: rec.ID, Rec: &rec, Seen: at(21)}}
	res := Check(w.in)
	if n := kinds(res)["tick-twice"]; n != 1 || res.Ticks.Twice != 1 {
		t.Fatalf("tick-twice %d, twice %d; want 1 and 1: %+v", n, res.Ticks.Twice, res.Violations)
	}
}

func TestTickOpenLongBeforeTheFinalReadLost(t *testing.T) {
	w := tickWorld()
	w.in.FinalAt = at(30)
	w.tick("01JF0000000000000000000004", 13, coordinator.StateAvailable)
	wantKind(t, Check(w.in), "lost")
}

// uniqueWorld: jobs A and B with unique key uk-1 in the store's history,
// B enqueued after A completed.
func uniqueWorld() *world {
	w := newWorld()
	w.in.LogOK = true
	rec := func(id string, st coordinator.State) *coordinator.Job {
		return &coordinator.Job{ID: id, Kind: "history", Queue: "default", State: st, MaxAttempts: 25, UniqueKey: "uk-1"}
	}
	w.in.Log = []StoreEvent{
		{Rev: 3, Key: "j", Job: jobA, Rec: rec(jobA, coordinator.StateAvailable)},
		{Rev: 5, Key: "j", Job: jobA, Rec: rec(jobA, coordinator.StateRunning)},
		{Rev: 7, Key: "j", Job: jobA, Rec: rec(jobA, coordinator.StateCompleted)},
		{Rev: 8, Key: "j", Job: jobB, Rec: rec(jobB, coordinator.StateAvailable)},
	}
	return w
}

func TestUniqueKeyLivesApartPass(t *testing.T) {
	res := Check(uniqueWorld().in)
	if n := kinds(res)["unique-twice"]; n != 0 || res.UniqueJobs != 2 {
		t.Fatalf("unique-twice %d, unique jobs checked %d; want 0 and 2: %+v", n, res.UniqueJobs, res.Violations)
	}
}

func TestUniqueKeyTwiceReported(t *testing.T) {
	w := uniqueWorld()
	// B is written while A runs.
	w.in.Log[3].Rev = 6
	slices.SortStableFunc(w.in.Log, func(a, b StoreEvent) int { return cmp.Compare(a.Rev, b.Rev) })
	wantKind(t, Check(w.in), "unique-twice")
}

// A job that only the histories show, whose runs all started after the
// final read began, was enqueued after it (a tick): not lost. One that
// started before it is.
func TestJobEnqueuedAfterTheFinalReadNotLost(t *testing.T) {
	w := newWorld()
	w.in.FinalAt = at(50)
	w.cleanRun(jobA, "w1", 10, 51)
	res := Check(w.in)
	wantClean(t, res)
	if res.AfterFinalRead != 1 {
		t.Fatalf("enqueued after the final read: %d, want 1", res.AfterFinalRead)
	}
	w.cleanRun(jobB, "w1", 11, 49)
	wantKind(t, Check(w.in), "lost")
}

// A job that the store's history saw written before the final read began
// was in the store then: missing from the final read, it is lost, though
// it first ran after.
func TestJobWrittenBeforeTheFinalReadLostThoughItRanAfter(t *testing.T) {
	w := newWorld()
	w.in.LogOK = true
	w.in.FinalAt = at(50)
	w.cleanRun(jobA, "w1", 10, 51)
	rec := &coordinator.Job{ID: jobA, Kind: "history", Queue: "default", State: coordinator.StateAvailable, MaxAttempts: 25}
	w.in.Log = []StoreEvent{{Rev: 3, Key: "j", Job: jobA, Rec: rec, Seen: at(49)}}
	res := Check(w.in)
	if !slices.Contains(res.Lost, jobA) || res.AfterFinalRead != 0 {
		t.Fatalf("lost %v, enqueued after the final read %d; want %s lost", res.Lost, res.AfterFinalRead, jobA)
	}
	// Seen after the final read began: enqueued after it.
	w.in.Log[0].Seen = at(50.5)
	if res := Check(w.in); len(res.Lost) != 0 || res.AfterFinalRead != 1 {
		t.Fatalf("lost %v, enqueued after the final read %d; want none lost, 1", res.Lost, res.AfterFinalRead)
	}
}

// Embedded mode (no store history): a cancel answered with a final state
// (the job was queued and the cancel finished it, or it had finished
// before) leaves nothing to run. A run that starts well after that answer
// claimed a finished job, though it wrote the only accepted final write
// and the final record is its own. One that started before the answer
// (it completed before the cancel read the job) is fine.
func TestRunAfterACancelAnsweredFinalReported(t *testing.T) {
	for _, answer := range []string{"cancelled", "completed"} {
		w := newWorld()
		w.in.Mode = "embedded"
		w.enqueue(jobA, 0)
		w.in.Jobs[jobA].Cancels = []CancelReq{{At: at(1.5), Result: answer, Acked: at(1.6)}}
		w.cleanRun(jobA, "w1", 10, 5)
		w.final(jobA, coordinator.StateCompleted, "w1", 10)
		res := Check(w.in)
		if n := kinds(res)["run-after-final"]; n != 1 || len(res.Violations) != 1 {
			t.Fatalf("answer %s: violations %+v; want one run-after-final", answer, res.Violations)
		}
	}
	w := newWorld()
	w.in.Mode = "embedded"
	w.enqueue(jobA, 0)
	w.cleanRun(jobA, "w1", 10, 1)
	w.in.Jobs[jobA].Cancels = []CancelReq{{At: at(2.5), Result: "completed", Acked: at(2.6)}}
	w.final(jobA, coordinator.StateCompleted, "w1", 10)
	wantClean(t, Check(w.in))
}

// A job that only the store's history shows (its enqueue's reply was
// lost, so it is not acknowledged, and it never ran), written before the
// final read began, was in the store then: missing from the final read,
// it is lost. Written after it (a tick), it is not; the store history's
// checks still look at it.
func TestJobOnlyInTheStoreHistoryChecked(t *testing.T) {
	w := newWorld()
	w.in.LogOK = true
	w.in.FinalAt = at(50)
	rec := &coordinator.Job{ID: jobA, Kind: "history", Queue: "default", State: coordinator.StateAvailable, MaxAttempts: 25}
	w.in.Log = []StoreEvent{{Rev: 3, Key: "j", Job: jobA, Rec: rec, Seen: at(49)}}
	res := Check(w.in)
	if !slices.Contains(res.Lost, jobA) || kinds(res)["lost"] != 1 || res.Jobs != 1 {
		t.Fatalf("lost %v, violations %+v, jobs %d; want %s lost", res.Lost, res.Violations, res.Jobs, jobA)
	}
	if d := res.Violations[0].Detail; !strings.Contains(d, "revision 3") {
		t.Fatalf("detail %q does not name the revision the store's history saw it at", d)
	}
	w.in.Log[0].Seen = at(50.5)
	claimed := *rec
	claimed.State = coordinator.StateRunning
	w.in.Log = append(w.in.Log, StoreEvent{Rev: 4, Key: "j", Job: jobA, Rec: &claimed, Seen: at(50.6)},
		StoreEvent{Rev: 5, Key: "j", Job: jobA, Rec: &claimed, Seen: at(50.7)})
	res = Check(w.in)
	if len(res.Lost) != 0 || res.AfterFinalRead != 1 || kinds(res)["double-claim"] != 1 || len(res.Violations) != 1 {
		t.Fatalf("lost %v, enqueued after the final read %d, violations %+v; want none lost, 1, one double-claim", res.Lost, res.AfterFinalRead, res.Violations)
	}
}

// A job of the exec kind that only the shared file shows (not
// acknowledged, not in the final read: embedded mode has no store
// history) ran, so it was in the store: it is lost, and its lines are
// checked as every exec job's are.
func TestExecJobOnlyInTheSharedFileChecked(t *testing.T) {
	w := execWorld(t, jobB+" 10 start\n"+jobB+" 20 start\n"+jobB+" 10 run\n")
	w.in.Mode = "embedded"
	w.in.Jobs = map[string]*JobInfo{}
	res := Check(w.in)
	if !slices.Contains(res.Lost, jobB) || kinds(res)["lost"] != 1 || kinds(res)["exec-runs-overlap"] != 1 || res.Exec.Jobs != 1 {
		t.Fatalf("lost %v, violations %+v, exec %+v; want %s lost and its overlap reported", res.Lost, res.Violations, res.Exec, jobB)
	}
}
