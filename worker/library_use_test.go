package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/worker"
)

// TestNewRefusesLeaseTTLStartWouldRefuse: New refuses a lease TTL that is
// not whole seconds or is below coordinator.MinLeaseTTL, as Start would;
// New accepted them and only Start failed.
func TestNewRefusesLeaseTTLStartWouldRefuse(t *testing.T) {
	e := newEnv(t, nil)
	for _, ttl := range []time.Duration{time.Second, 1500 * time.Millisecond, 2500 * time.Millisecond, -time.Second} {
		_, err := worker.New(e.c, worker.Config{LeaseTTL: ttl})
		if !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "whole seconds") {
			t.Errorf("New(LeaseTTL %s) = %v, want ErrInvalid saying whole seconds", ttl, err)
		}
	}
	for _, ttl := range []time.Duration{0, coordinator.MinLeaseTTL, 3 * time.Second} {
		if _, err := worker.New(e.c, worker.Config{LeaseTTL: ttl}); err != nil {
			t.Errorf("New(LeaseTTL %s) = %v, want it accepted", ttl, err)
		}
	}
}

// recordingHandler keeps the messages logged through it.
type recordingHandler struct {
	mu   *sync.Mutex
	msgs *[]string
}

func (h recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	*h.msgs = append(*h.msgs, r.Level.String()+" "+r.Message)
	h.mu.Unlock()
	return nil
}
func (h recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordingHandler) WithGroup(string) slog.Handler      { return h }

func (h recordingHandler) matching(s string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, m := range *h.msgs {
		if strings.Contains(m, s) {
			out = append(out, m)
		}
	}
	return out
}

// TestStartSaysWhenNotMaintaining: a worker without Maintain says so at
// Start, once, at Info, with what it means; it said nothing, and a library
// user saw snoozed and retryable jobs stay so for ever.
func TestStartSaysWhenNotMaintaining(t *testing.T) {
	e := newEnv(t, nil)
	for _, maintain := range []bool{false, true} {
		h := recordingHandler{mu: new(sync.Mutex), msgs: new([]string)}
		e.worker(worker.Config{Maintain: maintain, Logger: slog.New(h)}, map[string]worker.Handler{
			"k": func(context.Context, *worker.Job) error { return nil },
		})
		got := h.matching("does not maintain")
		switch {
		case !maintain && (len(got) != 1 || !strings.HasPrefix(got[0], "INFO ") || !strings.Contains(got[0], "retryable")):
			t.Errorf("Start without Maintain logged %q, want one Info line saying what it means", got)
		case maintain && len(got) != 0:
			t.Errorf("Start with Maintain logged %q", got)
		}
	}
}

// TestStopAfterStoreClosed: a Stop that finds the store closed under a
// running handler cuts the drain at once and says the store was closed;
// it waited out its ctx (for ever with one that never ends, or until the
// session's validity deadline) and returned "drain: context deadline
// exceeded".
func TestStopAfterStoreClosed(t *testing.T) {
	e := newEnv(t, nil) // closes the store again at the end: harmless
	s, c := e.store, e.c
	started := make(chan struct{})
	causes := make(chan error, 1)
	outcomes := make(chan worker.Outcome, 1)
	w, err := worker.New(c, worker.Config{
		Logger:    slog.New(slog.DiscardHandler),
		OnOutcome: func(o worker.Outcome) { outcomes <- o },
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(ctx context.Context, j *worker.Job) error {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(context.Background()) }()
	watchdog := time.NewTimer(20 * time.Second)
	defer watchdog.Stop()
	select {
	case err := <-stopped:
		if !errors.Is(err, kv.ErrClosed) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("Stop = %v, want one line wrapping kv.ErrClosed", err)
		}
	case <-watchdog.C:
		t.Fatal("Stop waits for a handler although the store is closed") // leaves Stop behind
	}
	if cause := <-causes; !errors.Is(cause, worker.ErrShutdown) {
		t.Fatalf("handler's cause = %v, want ErrShutdown", cause)
	}
	if o := <-outcomes; o.Op != "release" || !errors.Is(o.Err, kv.ErrClosed) {
		t.Fatalf("outcome %s err %v, want a release refused by the closed store", o.Op, o.Err)
	}
}

// TestStopIdleAfterStoreClosed: Stop of an idle worker whose store was
// closed first says so too; it returned nil, hiding the wrong order.
func TestStopIdleAfterStoreClosed(t *testing.T) {
	e := newEnv(t, nil) // closes the store again at the end: harmless
	s, c := e.store, e.c
	w, err := worker.New(c, worker.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(context.Context, *worker.Job) error { return nil })
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.Stop(ctx); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("Stop = %v, want an error wrapping kv.ErrClosed", err)
	}
}

// panicOf returns what f panicked with, or nil.
func panicOf(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

type twoOpts struct{}

func (twoOpts) Kind() string { return "two-opts" }

// TestHandleArgsRefusesSeveralKindOptions: more than one KindOptions is a
// programming error, and panics as a second handler for a kind does; only
// the first was used, the others silently dropped.
func TestHandleArgsRefusesSeveralKindOptions(t *testing.T) {
	e := newEnv(t, nil)
	w, err := worker.New(e.c, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := panicOf(func() {
		worker.HandleArgs(w, func(context.Context, *worker.Job, twoOpts) error { return nil },
			worker.KindOptions{Timeout: time.Second}, worker.KindOptions{MaxAttempts: 3})
	})
	if msg := fmt.Sprint(p); p == nil || !strings.Contains(msg, "two-opts") || !strings.Contains(msg, "at most one") {
		t.Fatalf("HandleArgs with two KindOptions: panic %v, want one naming the kind and saying at most one", p)
	}
	if kinds := w.Kinds(); len(kinds) != 0 {
		t.Fatalf("kinds %v registered by a refused HandleArgs", kinds)
	}
	// One is fine.
	worker.HandleArgs(w, func(context.Context, *worker.Job, twoOpts) error { return nil }, worker.KindOptions{MaxAttempts: 3})
}

type valueKind struct{ N int }

func (valueKind) Kind() string { return "value-kind" }

// TestMisuseSaysWhatToChange: HandleArgs given a pointer type whose Kind
// has a value receiver panics saying to use the value type (it panicked
// with the runtime's nil dereference), and New without a coordinator or a
// store is ErrInvalid (it was a nil dereference).
func TestMisuseSaysWhatToChange(t *testing.T) {
	e := newEnv(t, nil)
	w, err := worker.New(e.c, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := panicOf(func() { worker.HandleArgs(w, func(context.Context, *worker.Job, *valueKind) error { return nil }) })
	if msg := fmt.Sprint(p); p == nil || !strings.Contains(msg, "*worker_test.valueKind") || !strings.Contains(msg, "use a value type") {
		t.Fatalf("HandleArgs with a pointer type: panic %v, want one saying to use the value type", p)
	}
	if _, err := worker.New(nil, worker.Config{}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("worker.New(nil) = %v, want ErrInvalid", err)
	}
	if _, err := coordinator.New(nil, coordinator.Config{}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("coordinator.New(nil) = %v, want ErrInvalid", err)
	}
}

// TestWrappedJobCancelRecordsWholeError: a JobCancel that the handler
// wrapped, or joined with other errors, records the handler's whole error;
// only the error given to JobCancel was recorded, dropping the rest.
func TestWrappedJobCancelRecordsWholeError(t *testing.T) {
	e := newEnv(t, nil)
	e.worker(worker.Config{}, map[string]worker.Handler{
		"wrapped": func(context.Context, *worker.Job) error {
			return fmt.Errorf("charging card: %w", worker.JobCancel(errors.New("card expired")))
		},
		"joined": func(context.Context, *worker.Job) error {
			return errors.Join(errors.New("cleanup failed"), worker.JobCancel(errors.New("bad input")))
		},
		"plain": func(context.Context, *worker.Job) error { return worker.JobCancel(errors.New("no point")) },
	})
	for kind, want := range map[string][]string{
		"wrapped": {"charging card: ", "card expired"},
		"joined":  {"cleanup failed", "bad input"},
	} {
		j := e.wait(e.enqueue(coordinator.EnqueueParams{Kind: kind}))
		if j.State != coordinator.StateCancelled || len(j.Errors) != 1 {
			t.Fatalf("%s: job %s errors %+v, want cancelled with one error", kind, j.State, j.Errors)
		}
		for _, w := range want {
			if !strings.Contains(j.Errors[0].Error, w) {
				t.Errorf("%s: recorded %q, want it to say %q", kind, j.Errors[0].Error, w)
			}
		}
	}
	// JobCancel(err) itself records err's words alone, as before.
	if j := e.wait(e.enqueue(coordinator.EnqueueParams{Kind: "plain"})); len(j.Errors) != 1 || j.Errors[0].Error != "no point" {
		t.Fatalf("plain JobCancel recorded %+v, want just its error", j.Errors)
	}
}

// TestLastCheckpoint: the checkpoint of an earlier run is read back by a
// retry with LastCheckpoint; a job that never checkpointed has none (its
// raw field holds JSON null, as the package doc says).
func TestLastCheckpoint(t *testing.T) {
	e := newEnv(t, nil)
	type progress struct{ Step int }
	type seen struct {
		ok  bool
		err error
		got progress
		raw string
	}
	runs := make(chan seen, 2)
	e.worker(worker.Config{Maintain: true}, map[string]worker.Handler{
		"k": func(ctx context.Context, j *worker.Job) error {
			s := seen{got: progress{Step: -1}, raw: string(j.Job.Checkpoint)}
			s.ok, s.err = j.LastCheckpoint(&s.got)
			runs <- s
			if j.Attempt == 1 {
				if err := j.Checkpoint(ctx, progress{Step: 2}); err != nil {
					return err
				}
				return worker.JobRetryAt(time.Now(), errors.New("try again"))
			}
			return nil
		},
	})
	id := e.enqueue(coordinator.EnqueueParams{Kind: "k", MaxAttempts: 2})
	first, second := <-runs, <-runs
	if first.ok || first.err != nil || first.got.Step != -1 || first.raw != "null" {
		t.Errorf("first run: LastCheckpoint = %v, %v (v %+v, raw %q), want none, v untouched, raw null", first.ok, first.err, first.got, first.raw)
	}
	if !second.ok || second.err != nil || second.got.Step != 2 {
		t.Errorf("retry: LastCheckpoint = %v, %v (v %+v), want step 2", second.ok, second.err, second.got)
	}
	if j := e.wait(id); j.State != coordinator.StateCompleted {
		t.Fatalf("job %s %+v", j.State, j.Errors)
	}
	bad := &worker.Job{Job: coordinator.Job{ID: "x", Kind: "k", Checkpoint: []byte(`"text"`)}}
	var p progress
	if ok, err := bad.LastCheckpoint(&p); ok || err == nil {
		t.Errorf("LastCheckpoint of a checkpoint that does not decode = %v, %v, want an error", ok, err)
	}
}

// TestOutcomeGivesUpOnClosedStore: an outcome that the store refuses
// because it was closed is given up at once (no retry can succeed),
// saying so; it was retried until the session's validity deadline.
func TestOutcomeGivesUpOnClosedStore(t *testing.T) {
	e := newEnv(t, nil) // closes the store again at the end: harmless
	s, c := e.store, e.c
	started, release := make(chan struct{}), make(chan struct{})
	outcomes := make(chan worker.Outcome, 1)
	w, err := worker.New(c, worker.Config{
		LeaseTTL:  time.Minute, // the old retries ran until its validity deadline
		Logger:    slog.New(slog.DiscardHandler),
		OnOutcome: func(o worker.Outcome) { outcomes <- o },
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(ctx context.Context, j *worker.Job) error {
		close(started)
		<-release
		return nil
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	}()
	if _, err := c.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	close(release)
	watchdog := time.NewTimer(20 * time.Second)
	defer watchdog.Stop()
	select {
	case o := <-outcomes:
		if o.Op != "complete" || !errors.Is(o.Err, kv.ErrClosed) {
			t.Fatalf("outcome %s err %v, want a completion refused by the closed store", o.Op, o.Err)
		}
	case <-watchdog.C:
		t.Fatal("the outcome write is retried although the store is closed")
	}
}
