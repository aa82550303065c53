package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/internal/testutil"
)

// guardProbe stands in for the exec guard's stdin. At each "-PGID" it
// notes whether the group's id was already free, its leader reaped: from
// then on the id can be another process's, and a guard (or killAll) that
// still lists it would SIGKILL a stranger's process group.
type guardProbe struct {
	mu      sync.Mutex
	added   []int
	removed []int
	freed   []int // groups reported ended only once their id was free
}

func (g *guardProbe) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0][0] == '=' || f[0][0] == '~' {
			continue // deadlines and stops: not what the probe looks at
		}
		pgid, err := strconv.Atoi(f[0][1:])
		if err != nil {
			return 0, fmt.Errorf("guard probe: bad line %q", line)
		}
		switch line[0] {
		case '+':
			g.added = append(g.added, pgid)
		case '-':
			g.removed = append(g.removed, pgid)
			// The leader, reaped or not, is the only process that can
			// hold this pid: /proc/PID goes when it is reaped.
			if _, err := os.Stat("/proc/" + strconv.Itoa(pgid)); err != nil {
				g.freed = append(g.freed, pgid)
			}
		}
	}
	return len(p), nil
}

// The guard must hear that a command's group has ended while its id is
// still the job's (the shell not yet reaped): a daemon killed after the
// shell is reaped but before "-PGID" is written would otherwise leave a
// guard that SIGKILLs whatever process group gets that id next.
func TestExecGuardToldBeforeGroupIDFreed(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	probe := &guardProbe{}
	execGroups.setGuard(probe, testutil.QuietLogger(t))
	t.Cleanup(func() { execGroups.setGuard(nil, nil) })
	spec, err := parseExec(`t=echo '{"ok":true}'`)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // a failure is certain, not a race: once is enough
		if err := execHandler(spec, testutil.QuietLogger(t))(context.Background(), execJob(`{}`)); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	probe.mu.Lock()
	defer probe.mu.Unlock()
	if len(probe.added) != 3 || len(probe.removed) != 3 {
		t.Fatalf("guard heard +%v -%v, want three groups added and removed", probe.added, probe.removed)
	}
	if len(probe.freed) > 0 {
		t.Errorf("groups %v were reported ended to the guard after their leader was reaped: their ids could already be another's", probe.freed)
	}
}

// A command must not run before the guard has been told of its group: a
// daemon killed in between would leave it running, unseen by the guard.
// Without a gate the shell often gets there first (one run in a dozen on
// a loaded machine), so this looks at a hundred runs.
func TestExecGuardToldBeforeCommandRuns(t *testing.T) {
	probe := &guardProbe{}
	execGroups.setGuard(probe, testutil.QuietLogger(t))
	t.Cleanup(func() { execGroups.setGuard(nil, nil) })
	early := 0
	for range 100 {
		l := newLifeLine(t)
		spec, err := parseExec(fmt.Sprintf(`t=exec 3>%s; echo >&3`, l.path))
		if err != nil {
			t.Fatal(err)
		}
		probe.mu.Lock()
		before := len(probe.added)
		probe.mu.Unlock()
		errc := make(chan error, 1)
		go func() { errc <- execHandler(spec, testutil.QuietLogger(t))(context.Background(), execJob(`{}`)) }()
		<-l.started
		probe.mu.Lock()
		if len(probe.added) == before {
			early++
		}
		probe.mu.Unlock()
		if err := <-errc; err != nil {
			t.Fatalf("command failed: %v", err)
		}
	}
	if early > 0 {
		t.Errorf("%d of 100 commands ran before the guard was told of their group", early)
	}
}

// A shell whose daemon died before telling the guard of its group (the
// gate's write end closed unwritten) runs nothing of its command.
func TestExecGateClosedRunsNothing(t *testing.T) {
	dir := t.TempDir()
	marker := dir + "/ran"
	gate, opener, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", execGate, "touch "+marker)
	cmd.ExtraFiles = []*os.File{gate}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = gate.Close()
	_ = opener.Close()
	err = cmd.Wait()
	if _, serr := os.Stat(marker); serr == nil {
		t.Errorf("the command ran with its gate closed unopened (shell: %v)", err)
	}
	if err == nil {
		t.Error("the shell exited 0 with its gate closed unopened")
	}
}
