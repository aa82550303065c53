package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestMeterPlainOutput(t *testing.T) {
	var b bytes.Buffer
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &meter{w: &b, what: "enqueue", now: func() time.Time { return now }, start: now}
	m.update(100, 1000, "")
	now = now.Add(time.Second)
	m.update(200, 1000, "")
	if b.Len() != 0 {
		t.Fatalf("plain output within %s: %q", plainAfter, b.String())
	}
	now = now.Add(2 * time.Second)
	m.update(300, 1000, "")
	now = now.Add(time.Second)
	m.update(400, 1000, "") // within plainEvery of the last line
	now = now.Add(plainEvery)
	m.update(900, 1000, "")
	m.done(1000, 1000, "")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"enqueue: [#######-----------------] 300/1000  30% 100/s ETA 7s",
		"enqueue: [#####################---] 900/1000  90% 64.3/s ETA 2s",
		"enqueue: [########################] 1000/1000 100% 71.4/s in 14s",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("plain output:\n%s\nwant:\n%s", b.String(), strings.Join(want, "\n"))
	}

	// A last line that says what the last update said is not repeated.
	b.Reset()
	m = &meter{w: &b, what: "enqueue", now: func() time.Time { return now }, start: now}
	now = now.Add(3 * time.Second)
	m.update(1000, 1000, "")
	now = now.Add(100 * time.Millisecond)
	m.done(1000, 1000, "")
	if got := strings.Count(b.String(), "\n"); got != 1 {
		t.Errorf("final count printed %d times: %q", got, b.String())
	}

	// Short work prints nothing at all.
	b.Reset()
	m = &meter{w: &b, what: "enqueue", now: time.Now, start: time.Now()}
	m.update(5, 10, "")
	m.done(10, 10, "")
	if b.Len() != 0 {
		t.Errorf("short work printed %q", b.String())
	}
}

func TestMeterTerminalOutput(t *testing.T) {
	var b bytes.Buffer
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &meter{w: &b, tty: true, what: "waiting", now: func() time.Time { return now }, start: now}
	now = now.Add(2 * time.Second)
	m.update(10, 40, "running=3")
	m.update(10, 40, "running=3") // unchanged: not redrawn
	m.clear()
	want := "\r\033[Kwaiting [######------------------] 10/40  25% 5.0/s ETA 6s  running=3\r\033[K"
	if b.String() != want {
		t.Errorf("terminal output %q, want %q", b.String(), want)
	}
	if got := m.line(7, 0, 2*time.Second, ""); got != "waiting [7] 3.5/s" {
		t.Errorf("unknown total: %q", got)
	}
}
