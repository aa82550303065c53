package workertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

type email struct {
	To string `json:"to"`
}

// Each way a handler can end is recorded as a worker records it: Work
// returns the write made and the job as the store then holds it.
func TestWorkRecordsEachOutcome(t *testing.T) {
	tw := workertest.New(t, workertest.Config{})
	tw.Worker().Handle("send", worker.Typed(func(ctx context.Context, j *worker.Job, e email) error {
		switch e.To {
		case "ok":
			if err := j.Checkpoint(ctx, map[string]int{"sent": 1}); err != nil {
				return err
			}
			return j.SetResult("sent to " + e.To)
		case "fail":
			return errors.New("smtp: 451 try later")
		case "snooze":
			return worker.JobSnooze(time.Hour)
		case "cancel":
			return worker.JobCancel(errors.New("address unknown"))
		case "panic":
			panic("boom")
		}
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		to, op string
		state  coordinator.State
		check  func(t *testing.T, j *coordinator.Job)
	}{
		{"ok", "complete", coordinator.StateCompleted, func(t *testing.T, j *coordinator.Job) {
			if string(j.Result) != `"sent to ok"` || !strings.Contains(string(j.Checkpoint), `"sent":1`) {
				t.Errorf("result %s, checkpoint %s; want the handler's", j.Result, j.Checkpoint)
			}
		}},
		{"fail", "fail", coordinator.StateRetryable, func(t *testing.T, j *coordinator.Job) {
			if len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "smtp: 451") || j.Attempt != 1 {
				t.Errorf("errors %+v, attempt %d; want the handler's error, attempt 1", j.Errors, j.Attempt)
			}
		}},
		{"snooze", "snooze", coordinator.StateScheduled, func(t *testing.T, j *coordinator.Job) {
			if time.Until(j.ScheduledAt) < 50*time.Minute {
				t.Errorf("scheduled at %s; want an hour from now", j.ScheduledAt)
			}
		}},
		{"cancel", "cancel", coordinator.StateCancelled, nil},
		{"panic", "fail", coordinator.StateRetryable, func(t *testing.T, j *coordinator.Job) {
			if len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "boom") {
				t.Errorf("errors %+v; want the panic", j.Errors)
			}
		}},
	} {
		t.Run(tc.to, func(t *testing.T) {
			res, err := tw.Work(ctx, coordinator.EnqueueParams{Kind: "send", Payload: json.RawMessage(`{"to":"` + tc.to + `"}`)})
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome.Op != tc.op || res.Outcome.Err != nil || res.Job.State != tc.state {
				t.Fatalf("op %q (err %v), state %s; want %q, %s", res.Outcome.Op, res.Outcome.Err, res.Job.State, tc.op, tc.state)
			}
			if tc.check != nil {
				tc.check(t, res.Job)
			}
		})
	}
}

// A job that would not run now is refused at once, saying why, instead
// of a wait that only the test's deadline ends.
func TestWorkRefusesJobsThatWouldNotRun(t *testing.T) {
	tw := workertest.New(t, workertest.Config{})
	tw.Worker().Handle("send", func(context.Context, *worker.Job) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A live job holding the unique key "k": delayed, so it stays.
	if _, err := tw.Coordinator().Enqueue(ctx, coordinator.EnqueueParams{Kind: "send", UniqueKey: "k", ScheduledAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    coordinator.EnqueueParams
		want string
	}{
		{"no handler", coordinator.EnqueueParams{Kind: "other"}, `no handler for kind "other"`},
		{"delayed", coordinator.EnqueueParams{Kind: "send", ScheduledAt: time.Now().Add(time.Hour)}, "is scheduled until"},
		{"duplicate", coordinator.EnqueueParams{Kind: "send", UniqueKey: "k"}, `a live job with unique key "k" exists`},
		{"queue not served", coordinator.EnqueueParams{Kind: "send", Queue: "elsewhere"}, `in queue "elsewhere", which the worker does not serve`},
	} {
		res, err := tw.Work(ctx, tc.p)
		if !errors.Is(err, workertest.ErrWontRun) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Work = %+v, %v; want ErrWontRun saying %q", tc.name, res, err, tc.want)
		}
	}
}

// signup is code under test that enqueues a job of its own.
func signup(ctx context.Context, c *coordinator.Coordinator, addr string) error {
	_, err := c.Enqueue(ctx, coordinator.EnqueueParams{Kind: "send", Payload: json.RawMessage(`{"to":"` + addr + `"}`)})
	return err
}

// A job the code under test enqueued is found with RequireEnqueued and its
// run waited for with Wait; on etcd as on Pebble.
func TestRequireEnqueuedThenWait(t *testing.T) {
	for _, mode := range []string{"embedded", "shared"} {
		t.Run(mode, func(t *testing.T) {
			cfg := workertest.Config{}
			if mode == "shared" {
				cfg.Store = etcdkv.New(etcdtest.Start(t).Client(t), etcdkv.Options{})
				cfg.Coordinator.Namespace = "test"
			}
			tw := workertest.New(t, cfg)
			sent := make(chan string, 1)
			tw.Worker().Handle("send", worker.Typed(func(_ context.Context, _ *worker.Job, e email) error {
				sent <- e.To
				return nil
			}))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := signup(ctx, tw.Coordinator(), "new@example.com"); err != nil {
				t.Fatal(err)
			}
			j := workertest.RequireEnqueued(t, tw.Coordinator(), "send", func(j *coordinator.Job) bool {
				return strings.Contains(string(j.Payload), "new@example.com")
			})
			res, err := tw.Wait(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if res.Job.State != coordinator.StateCompleted || <-sent != "new@example.com" {
				t.Fatalf("job %s ended %s; want completed, sent to new@example.com", j.ID, res.Job.State)
			}
		})
	}
}

// fatalTB records a Fatalf and ends its goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// RequireEnqueued fails the test when no job of the kind matches.
func TestRequireEnqueuedFailsWithoutAMatch(t *testing.T) {
	tw := workertest.New(t, workertest.Config{})
	tw.Worker().Handle("send", func(context.Context, *worker.Job) error { return nil })
	if err := signup(context.Background(), tw.Coordinator(), "a@example.com"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind  string
		match func(*coordinator.Job) bool
	}{
		{"other", nil},
		{"send", func(j *coordinator.Job) bool { return strings.Contains(string(j.Payload), "b@example.com") }},
	} {
		f := &fatalTB{TB: t}
		done := make(chan *coordinator.Job)
		go func() {
			defer close(done)
			done <- workertest.RequireEnqueued(f, tw.Coordinator(), tc.kind, tc.match)
		}()
		if j, ok := <-done; ok || !strings.Contains(f.msg, "no job of kind") {
			t.Errorf("kind %s: RequireEnqueued returned %v, failed with %q; want it to fail", tc.kind, j, f.msg)
		}
	}
}

// logTB records what a test worker logs through t.Log and t.Output.
type logTB struct {
	testing.TB
	mu   sync.Mutex
	logs []string
	out  strings.Builder
}

func (l *logTB) Log(args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.logs = append(l.logs, fmt.Sprint(args...))
}

func (l *logTB) Output() io.Writer { return lockedWriter{l} }

type lockedWriter struct{ l *logTB }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	return w.l.out.Write(p)
}

// The worker's warnings reach the test's output one line each: not through
// t.Log, which ended each with a blank line and placed it at slog's own
// source line (handler.go) rather than anywhere in the test.
func TestWarningsAreTestOutputLines(t *testing.T) {
	l := &logTB{TB: t}
	tw := workertest.New(l, workertest.Config{})
	tw.Worker().Handle("fails", func(context.Context, *worker.Job) error { return errors.New("boom") })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := tw.Work(ctx, coordinator.EnqueueParams{Kind: "fails", MaxAttempts: 1}); err != nil { // discarded: a warning
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.logs {
		if strings.HasSuffix(s, "\n") {
			t.Errorf("a log line through t.Log ends in a newline (a blank line in the test's log): %q", s)
		}
	}
	if !strings.Contains(l.out.String(), `msg="attempt failed"`) || !strings.HasSuffix(l.out.String(), "\n") {
		t.Errorf("the failed attempt's warning is not a line of the test's output: %q", l.out.String())
	}
}
