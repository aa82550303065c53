package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/apiserver"
)

// TestPeriodicEveryFractionalSecondsRefused: --periodic with an @every that
// is not whole seconds (robfig/cron would run @every 1500ms every second) is
// a one-line usage error saying to use whole seconds, before the daemon
// writes anything.
func TestPeriodicEveryFractionalSecondsRefused(t *testing.T) {
	for _, v := range []string{"x|@every 1500ms|echo", `{"name":"x","spec":"@every 2.5s","kind":"echo"}`} {
		if _, err := parsePeriodic(v); err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "whole seconds") {
			t.Errorf("parsePeriodic(%q): %v, want a usage error saying to use whole seconds", v, err)
		}
	}
	dir := t.TempDir()
	r := runCLI(t, nil, "", "daemon", "--data", dir, "--listen", "127.0.0.1:0", "--periodic", "x|@every 1500ms|echo")
	checkOneLineError(t, "@every 1500ms", r, exitUsage, `use whole seconds, e.g. "@every 2s"`)
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("the refused daemon wrote %d entries in its data directory (%v)", len(ents), err)
	}
}

// TestPeriodicNotesOldLeaderThatListsNoSchedules: in a rolling upgrade a
// leader of a build from before 2026-12-05 09:23 registers without the names
// of its schedules, and runs them. periodic list said of a schedule that
// a new daemon declares, and that the old leader ticked on time, that it
// ran only while a daemon that declares it leads: it does not say that
// flatly then, but names both cases. A schedule that no leader runs now
// (overdue, or never run) still gets the plain note, as does one that a
// leader listing other schedules does not list.
func TestPeriodicNotesOldLeaderThatListsNoSchedules(t *testing.T) {
	now := time.Date(2026, 12, 5, 23, 54, 45, 0, time.UTC)
	// GET /v1/periodic as a new daemon answered it, with a daemon of a
	// build from 2026-12-04 leading: its registration has no "periodic".
	const body = `{"periodic":[
	{"name":"tick","spec":"@every 5s","kind":"echo","queue":"default","since":"2026-12-05T23:54:38Z","last_tick":"2026-12-05T23:54:43Z","enqueued":2,"next_at":"2026-12-05T23:54:48Z","catch_up_ms":3600000},
	{"name":"stale","spec":"@every 5s","kind":"echo","queue":"default","since":"2026-12-05T23:00:00Z","last_tick":"2026-12-05T23:10:00Z","enqueued":5,"next_at":"2026-12-05T23:10:05Z","catch_up_ms":3600000}],
	"leader":"vm-12867-92a1f478","declared":{"tick":["vm-12940-fa7dc9e7"],"stale":["vm-12940-fa7dc9e7"],"nightly":["vm-12940-fa7dc9e7"]}}`
	var res apiserver.PeriodicResponse
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatal(err)
	}
	notes := periodicNotes(res, now)
	plain := func(name string) string {
		return "schedule " + name + " is declared by vm-12940-fa7dc9e7 but not by the maintenance leader vm-12867-92a1f478: it runs only while"
	}
	want := []string{plain("nightly"), plain("stale"), "schedule tick is declared by vm-12940-fa7dc9e7; the maintenance leader vm-12867-92a1f478 lists no schedules: either it declares none"}
	if len(notes) != len(want) {
		t.Fatalf("notes %q, want %d", notes, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(notes[i], w) {
			t.Errorf("note %d: %q, want it to start %q", i, notes[i], w)
		}
	}
	if !strings.Contains(notes[2], "build is from before 2026-12-05 09:23") {
		t.Errorf("note %q does not name the older build", notes[2])
	}

	// A leader that lists a schedule lists all of its own: tick, which it
	// does not list, gets the plain note however recently it ticked.
	res.Declared["other"] = []string{res.Leader}
	notes = periodicNotes(res, now)
	if len(notes) != 3 || !strings.HasPrefix(notes[2], plain("tick")) {
		t.Errorf("leader listing a schedule: notes %q, want the plain note for tick last", notes)
	}
}
