package main

import (
	"context"
	"errors"
	"testing"
)

// gatedTarget answers queue requests when released, with an error if the
// request was cancelled meanwhile (a store that had it in flight); it
// serves nothing else.
type gatedTarget struct {
	target
	entered, release chan struct{}
}

func (g *gatedTarget) queue(ctx context.Context, q, op string, limit int) error {
	g.entered <- struct{}{}
	<-g.release
	if errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err() // cut off: whether it lands is unknown
	}
	return nil // a slow machine's timeout is not what is tested
}

// A pause in flight when the workload ends is let finish, not cut off: cut
// off, it could land after the resume that follows (which, finding the
// queue running, writes nothing) and leave the queue paused.
func TestQueueOpInFlightWhenTheWorkloadEndsIsLetFinish(t *testing.T) {
	g := &gatedTarget{entered: make(chan struct{}), release: make(chan struct{})}
	w := newWorkload(nil, g, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan bool)
	go func() { done <- w.queueOp(ctx, "pause") }()
	<-g.entered
	cancel() // the workload ends while the pause is in flight
	close(g.release)
	if !<-done {
		t.Fatal("the pause in flight was cut off when the workload ended")
	}
	if ops := w.queueOpsSnapshot(); len(ops) != 1 || ops[0].Op != "pause" || ops[0].Tries != 1 {
		t.Fatalf("queue ops %+v, want the one pause, in one try", ops)
	}
}
