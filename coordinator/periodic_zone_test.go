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
