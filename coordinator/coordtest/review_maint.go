package coordtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
)

// Tests from a review of periodic jobs, elections and maintenance
// (2026-12-03). Run adds them to the suite.
var maintReviewTests = []suiteTest{
	{"DefaultRetryDelayCappedWithJitter", testDefaultRetryCapped},
	{"PeriodicLongDowntimeSkipsWithoutWalkingEveryTick", testPeriodicLongDowntime},
	{"PeriodicEveryUnderOneSecondRefusedWithTimeZone", testPeriodicEveryZoned},
}

// testPeriodicEveryZoned: "@every 500ms" is refused (robfig/cron would
// round it up to 1s), but with a time zone in front ("CRON_TZ=Europe/Paris
// @every 500ms", "TZ=UTC @every 0s") it was accepted and run every second.
func testPeriodicEveryZoned(t *testing.T, h *harness) {
	for _, spec := range []string{"@every 500ms", "CRON_TZ=Europe/Paris @every 500ms", "TZ=UTC @every 0s", "CRON_TZ=UTC  @every -1s"} {
		_, err := coordinator.ParseSchedule(spec)
		if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "at least 1s") {
			t.Fatalf("ParseSchedule(%q) = %v; want ErrInvalid saying at least 1s", spec, err)
		}
		pj := coordinator.PeriodicJob{Name: "fast", Spec: spec, Job: coordinator.EnqueueParams{Kind: "tick"}}
		if err := h.c.ValidatePeriodic([]coordinator.PeriodicJob{pj}); !errors.Is(err, coordinator.ErrInvalid) {
			t.Fatalf("ValidatePeriodic(%q) = %v; want ErrInvalid", spec, err)
		}
	}
	for _, spec := range []string{"CRON_TZ=Europe/Paris @every 1s", "TZ=UTC @every 10m", "@every 90s"} {
		if _, err := coordinator.ParseSchedule(spec); err != nil {
			t.Fatalf("ParseSchedule(%q) = %v", spec, err)
		}
	}
}

// testPeriodicLongDowntime: after a long downtime the ticks older than the
// catch-up window are skipped and counted. They were walked one by one,
// billions of them for an every-second schedule down a century: the
// leader's periodic loop (every schedule) hung for minutes to hours. Short
// downtimes check the counts against the tick-by-tick walk.
func testPeriodicLongDowntime(t *testing.T, h *harness) {
	const century = 100 * 365 * 24 * time.Hour
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 500_000_000, time.UTC)
	for i, tc := range []struct {
		spec        string
		down        time.Duration
		wantSkipped int // -1: some
		catchUp     time.Duration
	}{
		{"@every 1s", 100 * time.Second, 97, 0},
		{"@every 1s", century, int(century/time.Second) - 3, 0},
		{"@every 7s", 100 * time.Second, 13, 0},
		{"@every 7s", century, int(century / (7 * time.Second)), 0},
		{"* * * * * *", 100 * time.Second, 97, 0},
		{"* * * * * *", century, -1, 0},
		// The window's start on a tick: that tick is due, not skipped.
		{"@every 1s", 100 * time.Second, 97, 2500 * time.Millisecond},
		{"@every 1s", century, int(century/time.Second) - 3, 2500 * time.Millisecond},
	} {
		if tc.catchUp == 0 {
			tc.catchUp = 3 * time.Second
		}
		clk, c := h.clockedAt(t0)
		pj := coordinator.PeriodicJob{Name: fmt.Sprintf("down%d", i), Spec: tc.spec, CatchUp: tc.catchUp, Job: coordinator.EnqueueParams{Kind: "tick"}}
		if _, err := c.EnqueueDueTicks(h.ctx(), pj); err != nil {
			t.Fatal(err)
		}
		clk.Advance(tc.down)
		ctx, cancel := context.WithCancel(h.ctx())
		st, err := c.EnqueueDueTicks(ctx, pj)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		now := clk.Now()
		wantLast := now.Truncate(time.Second)
		if tc.spec == "@every 7s" {
			// Ticks at t0's whole second plus multiples of 7s.
			wantLast = now.Add(-(now.Sub(t0.Truncate(time.Second)) % (7 * time.Second))).Truncate(time.Second)
		}
		wantEnq := 3
		if tc.spec == "@every 7s" {
			wantEnq = 1
			if now.Sub(wantLast) > 2500*time.Millisecond {
				wantEnq = 0
			}
		}
		if st.Enqueued != wantEnq || st.LastTick == nil || !st.LastTick.Equal(wantLast) {
			t.Fatalf("%s down %s: enqueued %d, last tick %v; want %d, %v", tc.spec, tc.down, st.Enqueued, st.LastTick, wantEnq, wantLast)
		}
		if tc.wantSkipped >= 0 && st.Skipped != tc.wantSkipped || tc.wantSkipped < 0 && st.Skipped <= 0 {
			t.Fatalf("%s down %s: skipped %d; want %d", tc.spec, tc.down, st.Skipped, tc.wantSkipped)
		}
	}
}

// testDefaultRetryCapped: the README promises the default backoff
// (attempt^4 s + up to 10% jitter) capped at 24 h. The jitter used to be
// added after the cap, so from attempt 17 (of the default 25) a job waited up to 26.4 h. The
// delays below the cap keep their jitter, and those at the cap still
// spread out.
func testDefaultRetryCapped(t *testing.T, _ *harness) {
	for _, attempt := range []int{17, 18, 24, 100, 1 << 20} {
		for range 20 {
			if d := coordinator.DefaultRetryPolicy(attempt, nil); d > coordinator.MaxRetryDelay || d < coordinator.MaxRetryDelay*9/10 {
				t.Fatalf("attempt %d: delay %s; want within 10%% below the %s cap", attempt, d, coordinator.MaxRetryDelay)
			}
		}
	}
	spread := map[time.Duration]bool{}
	for range 20 {
		spread[coordinator.DefaultRetryPolicy(100, nil)] = true
	}
	if len(spread) < 2 {
		t.Fatalf("20 delays at the cap are all %v: no jitter", spread)
	}
	for attempt, base := range map[int]time.Duration{1: time.Second, 2: 16 * time.Second, 5: 625 * time.Second} {
		if d := coordinator.DefaultRetryPolicy(attempt, nil); d < base || d >= base+base/10 {
			t.Fatalf("attempt %d: delay %s; want %s plus up to 10%%", attempt, d, base)
		}
	}
}
