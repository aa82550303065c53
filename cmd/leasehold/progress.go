package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/apiserver"
)

// Progress of long work (enqueue --count, jobs wait, bench) goes to
// stderr. On a terminal it is one self-overwriting line with a bar, the
// rate and the time left; otherwise, plain lines, at most one every
// plainEvery and none for work that ends within plainAfter, so that short
// commands in scripts stay quiet.
const (
	plainAfter = 2 * time.Second
	plainEvery = 10 * time.Second
	barWidth   = 24
)

// meter shows the progress of counted work.
type meter struct {
	w     io.Writer
	tty   bool
	what  string
	now   func() time.Time
	start time.Time
	// plain output
	lastPlain time.Time
	plained   bool
	plainDone int // the count of the last plain line
	// terminal output
	shown bool
	last  string
}

// newMeter returns a meter of what writing to w (a terminal or not).
func newMeter(w io.Writer, what string) *meter {
	return &meter{w: w, tty: isTerminal(w), what: what, now: time.Now, start: time.Now()}
}

// reset starts measuring anew, for a new phase called what.
func (m *meter) reset(what string) {
	m.clear()
	m.what, m.start, m.lastPlain, m.plained = what, m.now(), time.Time{}, false
}

// update shows that done of total units are done (total <= 0: unknown),
// with an optional note.
func (m *meter) update(done, total int, note string) {
	now := m.now()
	el := now.Sub(m.start)
	line := m.line(done, total, el, note)
	if m.tty {
		if line == m.last {
			return
		}
		m.last, m.shown = line, true
		fmt.Fprintf(m.w, "\r\033[K%s", line)
		return
	}
	if el < plainAfter || (!m.lastPlain.IsZero() && now.Sub(m.lastPlain) < plainEvery) {
		return
	}
	m.lastPlain, m.plained, m.plainDone = now, true, done
	fmt.Fprintln(m.w, strings.Replace(line, " [", ": [", 1))
}

// done ends the meter: on a terminal it clears the line; in plain output,
// if progress lines were printed, it prints a last one, unless the last
// printed already had this count.
func (m *meter) done(done, total int, note string) {
	if m.tty {
		m.clear()
		return
	}
	if m.plained && done != m.plainDone {
		fmt.Fprintln(m.w, strings.Replace(m.line(done, total, m.now().Sub(m.start), note), " [", ": [", 1))
		m.plained = false
	}
}

// clear removes the terminal line, if shown.
func (m *meter) clear() {
	if m.tty && m.shown {
		fmt.Fprint(m.w, "\r\033[K")
		m.shown, m.last = false, ""
	}
}

// line renders one progress line.
func (m *meter) line(done, total int, el time.Duration, note string) string {
	var b strings.Builder
	b.WriteString(m.what)
	rate := 0.0
	if s := el.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	if total > 0 {
		frac := min(max(float64(done)/float64(total), 0), 1)
		fill := int(frac * barWidth)
		fmt.Fprintf(&b, " [%s%s] %d/%d %3.0f%%", strings.Repeat("#", fill), strings.Repeat("-", barWidth-fill), done, total, 100*frac)
	} else {
		fmt.Fprintf(&b, " [%d]", done)
	}
	fmt.Fprintf(&b, " %s/s", humanRate(rate))
	switch {
	case total > 0 && done >= total:
		fmt.Fprintf(&b, " in %s", apiserver.RoundDuration(el))
	case total > 0 && rate > 0:
		eta := time.Duration(float64(total-done) / rate * float64(time.Second))
		fmt.Fprintf(&b, " ETA %s", roundETA(eta))
	case total > 0:
		b.WriteString(" ETA ?")
	}
	if note != "" {
		b.WriteString("  " + note)
	}
	return b.String()
}

func humanRate(r float64) string {
	switch {
	case r >= 10000:
		return fmt.Sprintf("%.0fk", r/1000)
	case r >= 100:
		return fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%.1f", r)
}

func roundETA(d time.Duration) time.Duration {
	if d < time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(10 * time.Second)
}
