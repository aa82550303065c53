package main

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
)

// A group the daemon sent SIGTERM with a long grace (a job's timeout or
// cancel, a leftover of a command that exited: execKillGrace) is still
// the session's: if the daemon is paused before it kills the group, the
// guard must kill it by the session's deadline plus the lost run's grace,
// as for any other group, not at the end of the daemon's long grace,
// which at a short TTL comes after the lease can expire and another
// daemon has taken the job. A deadline moved by a renewal after the
// SIGTERM still counts, and the guard adds no SIGTERM of its own.
func TestExecGuardKillsAStoppingGroupAtItsDeadline(t *testing.T) {
	const grace = 400 * time.Millisecond
	g := startGuardProc(t)

	stubborn := startGuardedCmd(t, true) // ignores the daemon's SIGTERM
	renewed := startGuardedCmd(t, true)
	now := bootTime()
	g.tell(t, "+%d %d %d", stubborn.pgid(), now+300*time.Millisecond, grace)
	g.tell(t, "+%d %d %d", renewed.pgid(), now+300*time.Millisecond, grace)
	for _, c := range []*guardedCmd{stubborn, renewed} {
		_ = syscall.Kill(-c.pgid(), syscall.SIGTERM)
		g.tell(t, "~%d %d", c.pgid(), time.Hour) // the daemon's own SIGKILL, had it not been paused
	}
	g.tell(t, "=%d %d", renewed.pgid(), now+time.Hour)

	if sig := stubborn.waitEnd(t, "a command the daemon sent SIGTERM with a long grace, then was paused past its session's deadline"); sig != syscall.SIGKILL {
		t.Errorf("ended by signal %v, want the guard's SIGKILL", sig)
	}
	if n := strings.Count(stubborn.read(), "term"); n != 1 {
		t.Errorf("the command got %d SIGTERMs, want the daemon's one alone", n)
	}
	// A later deadline than the first's kill: once the marker ended, the
	// renewed group would have been killed had its renewal not counted.
	marker := startGuardedCmd(t, false)
	g.tell(t, "+%d %d %d", marker.pgid(), bootTime(), grace)
	marker.waitEnd(t, "the marker command")
	if !renewed.running() {
		t.Errorf("a stopping command whose session was renewed was killed by the guard (marks %q)", renewed.read())
	}
}

// lineRecorder stands in for the exec guard's stdin, keeping its lines.
type lineRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *lineRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, strings.Split(strings.TrimSpace(string(p)), "\n")...)
	return len(p), nil
}

func (r *lineRecorder) has(line string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lines {
		if l == line {
			return true
		}
	}
	return false
}

// The daemon goes on telling the guard the deadline of a group it is
// stopping (with SIGTERM, and its own SIGKILL after a grace that may be
// longer than the session has left): the guard kills such a group at the
// deadline if the daemon is paused, so a renewal must reach it too.
func TestExecGroupsForwardTheDeadlineOfAStoppingGroup(t *testing.T) {
	rec := &lineRecorder{}
	s := &groupSet{groups: map[int]*execGroup{}}
	s.setGuard(rec, nil)
	var mu sync.Mutex
	d := bootTime() + time.Second
	deadline := func() (time.Duration, bool) {
		mu.Lock()
		defer mu.Unlock()
		return d, true
	}
	const pgid = 1 << 30 // never signalled: the set only tells the guard
	if !s.add(pgid, deadline, 200*time.Millisecond) {
		t.Fatal("add refused")
	}
	s.stopping(pgid, execKillGrace)
	mu.Lock()
	d += time.Hour
	want := fmt.Sprintf("=%d %d", pgid, d)
	mu.Unlock()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.forwardDeadlines(stop)
	}()
	defer func() { close(stop); <-done }()
	for end := time.Now().Add(spWait); !rec.has(want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the renewed deadline of a stopping group was not told to the guard within %v: %q", spWait, rec.lines)
		}
	}
}

// A renewal acknowledged just before the session's deadline D keeps the
// run the daemon's, and must reach the guard before it acts at D + G/2,
// G the lost run's grace: the deadlines are forwarded at least four
// times in G/2, at every TTL down to the minimum (where G/2 is 100 ms,
// and forwarding every 200 ms had the guard stop commands of runs still
// the daemon's).
func TestExecGroupsForwardWithinTheGuardsSlack(t *testing.T) {
	for _, ttl := range []time.Duration{coordinator.MinLeaseTTL, 3 * time.Second, 5 * time.Second, coordinator.DefaultLeaseTTL} {
		g := execLostGrace(ttl)
		s := &groupSet{groups: map[int]*execGroup{}}
		s.add(1<<30, func() (time.Duration, bool) { return time.Hour, true }, g)
		if every := s.tellEvery(); every > g/2/4 {
			t.Errorf("TTL %v: deadlines are told every %v, want at most a quarter of the guard's slack G/2 = %v", ttl, every, g/2)
		}
	}
}

// Numbers too large for the guard's arithmetic (a deadline plus its
// grace) are refused, not wrapped into the past.
func TestExecGuardRefusesHugeNumbers(t *testing.T) {
	g := guardedGroups{}
	g.apply("+123 9223372036854775807 9223372036854775807")
	g.apply("+124 1000 9223372036854775807")
	g.apply("+125")
	g.apply("~125 9223372036854775807")
	if at, ok := g.next(); ok && at < bootTime() {
		t.Errorf("the guard's next action is at %v, in the past, after lines with huge numbers: %+v", at, g)
	}
}
