package main

import (
	"os"
	"strings"
	"testing"
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
