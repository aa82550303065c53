package main

import (
	"io"
	"testing"
)

// reportCode runs report on in (as the end of a run does) and returns its
// exit code.
func reportCode(t *testing.T, cfg config, in *CheckInput, anomalies []string) int {
	t.Helper()
	rep := &Report{Mode: in.Mode, Out: t.TempDir(), Anomalies: anomalies}
	code, _ := report(cfg, in, rep, 2, t0, io.Discard)
	return code
}

// embeddedClean is cleanWorld as an embedded run (no store log to keep).
func embeddedClean() *CheckInput {
	in := cleanWorld().in
	in.Mode = "embedded"
	return in
}

func TestCleanRunReportPasses(t *testing.T) {
	if code := reportCode(t, config{}, embeddedClean(), nil); code != 0 {
		t.Fatalf("clean run: exit code %d, want 0", code)
	}
	shared := storeWorld().in
	shared.Faults = []*Fault{{Group: 1, Kind: fKillDaemon, Slot: 0, Start: at(1), End: at(2)}}
	if code := reportCode(t, config{}, shared, nil); code != 0 {
		t.Fatalf("clean shared run with its store log: exit code %d, want 0", code)
	}
}

// A shared run whose store log is incomplete (a compacted watch, one that
// could not catch up) skipped every store-history check: it must not pass.
func TestSharedRunWithoutStoreLogDoesNotPass(t *testing.T) {
	in := cleanWorld().in
	in.LogOK = false
	if code := reportCode(t, config{}, in, nil); code != 3 {
		t.Fatalf("shared run with an incomplete store log: exit code %d, want 3", code)
	}
}

// A run that completed no job, or injected no fault, tested nothing: it
// must not pass, whatever the checker found.
func TestVacuousRunDoesNotPass(t *testing.T) {
	noJobs := newWorld()
	noJobs.in.Faults = []*Fault{{Group: 1, Kind: fKillDaemon, Slot: 0, Start: at(1), End: at(2)}}
	if code := reportCode(t, config{}, noJobs.in, nil); code == 0 {
		t.Fatal("a run in which no job completed passed")
	}
	noFaults := embeddedClean()
	noFaults.Faults = nil
	if code := reportCode(t, config{}, noFaults, nil); code == 0 {
		t.Fatal("a run in which no fault was injected passed")
	}
	if code := reportCode(t, config{expectViolations: true}, noJobs.in, nil); code == 0 {
		t.Fatal("--expect-violations: a run in which no job completed passed")
	}
}

// A daemon or etcd member that exits without being told to (a crash) is a
// failure even when the supervisor restarted it and every job finished.
func TestUnexpectedProcessExitFails(t *testing.T) {
	anomalies := []string{"12:00:00.000 daemon d1 (pid 7, worker w1) exited unexpectedly: exit status 2"}
	if code := reportCode(t, config{}, embeddedClean(), anomalies); code == 0 {
		t.Fatal("a run with an unexpected process exit passed")
	}
}
