package etcdtest

import (
	"context"
	"testing"
	"time"
)

func TestScratchCluster(t *testing.T) {
	start := time.Now()
	c := StartCluster(t, 3)
	t.Logf("3 members ready in %v", time.Since(start))
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	w := cli.Watch(context.Background(), "x")
	_ = w
	l := c.Leader()
	start = time.Now()
	c.Kill(l)
	t.Logf("kill leader %d took %v", l, time.Since(start))
	start = time.Now()
	for {
		c2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		t0 := time.Now()
		_, err := cli.Put(c2, "a", "2")
		cancel2()
		t.Logf("put attempt: %v after %v", err, time.Since(t0))
		if err == nil {
			break
		}
	}
	t.Logf("put after kill took %v; new leader %d", time.Since(start), c.Leader())
	start = time.Now()
	c.Restart(l)
	t.Logf("restart took %v", time.Since(start))
	start = time.Now()
	s := Start(t)
	t.Logf("single ready in %v", time.Since(start))
	cli2 := s.Client(t)
	if _, err := cli2.Put(ctx, "a", "2"); err != nil {
		t.Fatal(err)
	}
	w2 := cli2.Watch(context.Background(), "x")
	_ = w2
	start = time.Now()
	s.Kill(0)
	t.Logf("single kill took %v", time.Since(start))
}
