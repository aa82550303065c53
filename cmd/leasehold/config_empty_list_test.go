package main

import (
	"strings"
	"testing"
)

// TestConfigEmptyListRefused: 'queues: []' in a config file says the
// daemon serves no queue; it was read as unset, and the daemon served the
// default queue, while --queues ” is refused. An empty list for a setting
// whose default is not empty is refused by the daemon (exit 2, one line,
// before it opens its store) and by config check (with its line); an
// empty list of exec entries or schedules still means none. The daemon
// gets a --data that is a file, so that one that takes the file stops at
// opening its store (exit 1) instead of starting.
func TestConfigEmptyListRefused(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "config.yaml", "log-level: info\nqueues: []\n")
	notDir := writeFile(t, dir, "not-a-dir", "")
	d := runCLI(t, nil, "", "daemon", "--config", p, "--data", notDir, "--listen", "127.0.0.1:0")
	checkOneLineError(t, "daemon", d, 2, "line 2: queues: is an empty list: give at least one value")
	code, out, _ := runInProcess("config", "check", p)
	if code != 2 || !strings.Contains(out, p+": line 2: queues: is an empty list") {
		t.Errorf("config check: exit %d:\n%s", code, out)
	}
	ok := writeFile(t, dir, "none.yaml", "exec: []\nperiodic: []\n")
	if code, out, _ := runInProcess("config", "check", ok); code != 0 {
		t.Errorf("config check of empty exec and periodic lists: exit %d:\n%s", code, out)
	}
}
