package coordinator

import (
	"testing"
	"time"
)

// Across a year of daylight-saving changes in zones that move by an
// hour, by half an hour, and at midnight, every tick of a zoned spec is
// later than the time asked from, and is either a wall-clock time the spec
// matches or the instant of a change that skipped such times; and a daily
// spec ticks once per local date.
func TestZonedScheduleTicksMatchTheSpec(t *testing.T) {
	zones := []string{"Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Asia/Tehran", "Pacific/Chatham"}
	specs := []string{"45 1 * * *", "15 2 * * *", "0 0 * * *", "30 23 * * *", "*/30 * * * *", "0 9 * * 1-5", "15 2 1 * *"}
	daily := map[string]bool{"45 1 * * *": true, "15 2 * * *": true, "0 0 * * *": true, "30 23 * * *": true}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(1, 0, 0)
	for _, zone := range zones {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Skipf("time zone data: %v", err)
		}
		for _, spec := range specs {
			sched, err := ParseSchedule("CRON_TZ=" + zone + " " + spec)
			if err != nil {
				t.Fatal(err)
			}
			z, ok := sched.(zonedSchedule)
			if !ok {
				t.Fatalf("%s %s: %T, want a zonedSchedule", zone, spec, sched)
			}
			days := map[string]int{}
			for at := from; at.Before(to); {
				n := z.Next(at)
				if !n.After(at) {
					t.Fatalf("%s %s: Next(%v) = %v, not later", zone, spec, at, n)
				}
				if !z.matches(n) && !isZoneChange(n, loc) {
					t.Fatalf("%s %s: Next(%v) = %v (%s), which the spec does not match and is no zone change", zone, spec, at, n, n.In(loc).Format("2006-01-02 15:04 -0700"))
				}
				if daily[spec] {
					d := n.In(loc).Format("2006-01-02")
					if days[d]++; days[d] > 1 {
						t.Fatalf("%s %s: two ticks on %s, the second at %v", zone, spec, d, n.In(loc).Format("15:04 -0700"))
					}
				}
				at = n
			}
		}
	}
}

// isZoneChange reports whether t is the instant loc's offset changes.
func isZoneChange(t time.Time, loc *time.Location) bool {
	start, _ := t.In(loc).ZoneBounds()
	return start.Equal(t)
}

// A daily zoned spec ticks on every local date, not only at most once:
// across the changes of two years in zones that move by an hour, by half
// an hour, at midnight and late in the evening, each date has exactly one
// tick. A tick at a change that skipped the spec's time counts for the
// date of the time skipped (the change read with the offset before it).
// robfig/cron, stepping hours in the zone, steps over matching times near
// a change of half an hour; a match read with one span's offset counts
// only inside that span (firstInOffsets): read past the span's end, a
// daily 00:00 at Lord Howe skipped the day after the clocks went forward,
// and a daily 03:00 the day of the change, and no other test failed.
func TestZonedDailySpecTicksEveryDay(t *testing.T) {
	zones := []string{"Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Asia/Tehran", "Pacific/Chatham", "America/Havana", "America/Nuuk"}
	specs := []string{"0 0 * * *", "30 0 * * *", "45 1 * * *", "0 2 * * *", "15 2 * * *", "0 3 * * *", "30 23 * * *"}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(2, 0, 0)
	for _, zone := range zones {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Skipf("time zone data: %v", err)
		}
		for _, spec := range specs {
			sched, err := ParseSchedule("CRON_TZ=" + zone + " " + spec)
			if err != nil {
				t.Fatal(err)
			}
			z := sched.(zonedSchedule)
			days := map[string]int{}
			for at := from; at.Before(to); {
				n := z.Next(at)
				if !n.After(at) {
					t.Fatalf("%s %s: Next(%v) = %v, not later", zone, spec, at, n)
				}
				day := n.In(loc)
				if !z.matches(n) && isZoneChange(n, loc) {
					_, before := n.Add(-time.Nanosecond).In(loc).Zone()
					day = n.In(time.FixedZone("", before))
				}
				days[day.Format(time.DateOnly)]++
				at = n
			}
			// The first and last dates are partly outside [from, to).
			for d := from.In(loc).AddDate(0, 0, 1); d.Before(to.AddDate(0, 0, -1)); d = d.AddDate(0, 0, 1) {
				if n := days[d.Format(time.DateOnly)]; n != 1 {
					t.Errorf("%s %s: %d ticks on %s, want 1", zone, spec, n, d.Format(time.DateOnly))
				}
			}
		}
	}
}
