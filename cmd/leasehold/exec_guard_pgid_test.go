package main

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// The guard signals a group only while the process with the group's id is
// the leader it was told of, or none: a pid reused by a process that
// started later may lead another group of that id.
func TestExecGuardSignalsOnlyItsOwnLeader(t *testing.T) {
	if leaderStart(os.Getpid()) == "" {
		t.Skip("no /proc")
	}
	start := func() *exec.Cmd {
		c := exec.Command("sleep", "1000")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL); _ = c.Wait() })
		return c
	}
	ended := func(c *exec.Cmd) bool {
		ws, _ := c.Process.Wait()
		return ws != nil && ws.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
	}

	other := start()
	pgid := other.Process.Pid
	stranger := &guardedGroup{leader: leaderStart(pgid) + "1"} // as if told of an earlier leader of that id
	if stranger.signal(pgid, syscall.SIGKILL) {
		t.Fatal("the guard signalled a group whose leader started at another time than the one it was told of")
	}
	if err := syscall.Kill(pgid, 0); err != nil {
		t.Fatalf("the other group's leader is gone: %v", err)
	}

	own := &guardedGroup{leader: leaderStart(pgid)}
	if !own.signal(pgid, syscall.SIGKILL) || !ended(other) {
		t.Fatal("the guard did not signal the group whose leader it was told of")
	}
	if s := leaderStart(pgid); s != "" {
		t.Fatalf("leader's start %q once it was reaped, want none", s)
	}
	// No process with that pid: the group's leftovers, if any, are still
	// the job's, and are signalled.
	if !own.signal(pgid, syscall.SIGKILL) {
		t.Error("the guard did not signal a group whose leader is gone")
	}
}
