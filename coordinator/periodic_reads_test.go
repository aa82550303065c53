package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// stepClock is a Clock that a test drives one timer at a time: each After
// call is handed to the test on afters, which moves the time and fires it.
type stepClock struct {
	mu     sync.Mutex
	now    time.Time
	afters chan stepTimer
}

type stepTimer struct {
	d  time.Duration
	ch chan time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.afters <- stepTimer{d: d, ch: ch}
	return ch
}

// fire moves the clock to the timer's deadline and fires it.
func (c *stepClock) fire(t stepTimer) {
	c.mu.Lock()
	c.now = c.now.Add(t.d)
	now := c.now
	c.mu.Unlock()
	t.ch <- now
}

// TestPeriodicPassReadsOnlyDueSchedules: beside a schedule that ticks
// every second, a thousand hourly ones are not read at every pass. Each
// pass read every schedule's state, and passes come as often as the most
// frequent schedule ticks: on etcd, a daemon and its member then spent a
// fifth of a core each on them.
func TestPeriodicPassReadsOnlyDueSchedules(t *testing.T) {
	cs := &countingStore{Store: tempLocalstore(t)}
	clock := &stepClock{now: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC), afters: make(chan stepTimer)}
	c, err := New(cs, Config{Logger: slog.New(slog.DiscardHandler), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	const hourly, seconds = 100, 30
	pjs := []PeriodicJob{{Name: "fast", Spec: "@every 1s", Job: EnqueueParams{Kind: "fast"}}}
	for i := range hourly {
		pjs = append(pjs, PeriodicJob{Name: fmt.Sprintf("hourly-%d", i), Spec: "@every 1h", Job: EnqueueParams{Kind: "slow"}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.RunPeriodic(ctx, pjs) }()
	defer func() {
		cancel()
		for {
			select {
			case <-done:
				return
			case tm := <-clock.afters:
				tm.ch <- clock.Now()
			}
		}
	}()
	clock.fire(<-clock.afters) // the first pass registered every schedule
	before := cs.reads.Load()
	for elapsed := time.Duration(0); elapsed < seconds*time.Second; {
		tm := <-clock.afters
		elapsed += tm.d
		clock.fire(tm)
	}
	<-clock.afters // the pass at the last second is done
	// The fast schedule's read and tick each second; not every schedule.
	if n := cs.reads.Load() - before; n > 5*seconds {
		t.Fatalf("%d store requests over %d one-second passes beside %d hourly schedules: want at most %d", n, seconds, hourly, 5*seconds)
	}
	st, err := c.ListPeriodic(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Name == "fast" && (s.LastTick == nil || !s.LastTick.Equal(clock.Now())) {
			t.Fatalf("the fast schedule's last tick is %v, want %v", s.LastTick, clock.Now())
		}
	}
}
