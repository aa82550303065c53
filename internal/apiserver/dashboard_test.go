package apiserver

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/localstore"
)

func TestLatestJobs(t *testing.T) {
	log := testutil.QuietLogger(t)
	store, err := localstore.Open(t.TempDir(), localstore.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	clock := &stepClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	coord, err := coordinator.New(store, coordinator.Config{Logger: log, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []string
	enqueue := func(n int, gap time.Duration) {
		for range n {
			clock.now = clock.now.Add(gap)
			r, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "echo"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.Job.ID)
		}
	}
	check := func(what string, n int) {
		t.Helper()
		got, err := latestJobs(ctx, coord, n, clock.now)
		if err != nil {
			t.Fatal(err)
		}
		want := min(n, len(ids))
		if len(got) != want {
			t.Fatalf("%s: %d jobs, want %d", what, len(got), want)
		}
		for i, j := range got {
			if j.ID != ids[len(ids)-1-i] {
				t.Fatalf("%s: job %d is %s, want %s", what, i, j.ID, ids[len(ids)-1-i])
			}
		}
	}
	check("empty", 50)
	enqueue(10, 72*time.Hour) // sparse and old
	check("fewer than asked", 50)
	enqueue(30, time.Minute)
	check("widening window", 20)
	enqueue(300, 0) // one millisecond holds more than a page
	check("dense tail", 50)
	enqueue(400, time.Millisecond)
	check("bisected window", 50)
	check("bisected window, small page", 3)
}

// stepClock is a coordinator.Clock moved by hand.
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time                         { return c.now }
func (c *stepClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
