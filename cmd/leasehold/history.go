package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/worker"
)

// History recording, for the fault tests (cluster-test and the process
// tests): with --history-dir DIR the daemon runs one more kind, "history",
// and appends every execution event of every job to DIR/WORKER.jsonl, one
// JSON object per line, fsynced before the handler goes on. The checker
// reads these files next to the store's final state.
//
//	{"ev":"start","job":ID,"attempt":N,"token":T,"worker":W,"at":TIME}
//	{"ev":"checkpoint","job":ID,"attempt":N,"token":T,"worker":W,"at":TIME,"accepted":BOOL,"err":"..."}
//	{"ev":"outcome","job":ID,"attempt":N,"token":T,"worker":W,"at":TIME,"op":"complete|fail|...","accepted":BOOL,"err":"...","started":TIME}
//
// The history kind's payload is {"ms":N,"fail_times":K}: it sleeps N/2 ms,
// checkpoints, sleeps N/2 ms more, and fails its first K attempts.
type historyEvent struct {
	Ev       string      `json:"ev"`
	Job      string      `json:"job"`
	Attempt  int         `json:"attempt"`
	Token    fence.Token `json:"token"`
	Worker   string      `json:"worker"`
	At       time.Time   `json:"at"`
	Op       string      `json:"op,omitempty"`
	Accepted *bool       `json:"accepted,omitempty"`
	Err      string      `json:"err,omitempty"`
	Started  *time.Time  `json:"started,omitempty"`
}

type historyArgs struct {
	MS        int `json:"ms"`
	FailTimes int `json:"fail_times"`
}

// historyLog is one daemon's append-only history file.
type historyLog struct {
	mu     sync.Mutex
	f      *os.File
	worker string
}

func openHistory(dir, workerID string) (*historyLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, failf("--history-dir %s: %v", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, workerID+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, failf("--history-dir %s: %v", dir, err)
	}
	return &historyLog{f: f, worker: workerID}, nil
}

// historyFailed ends the process when an event cannot be recorded: the
// history is the fault checker's evidence, and one with a gap would make
// it report violations that did not happen, or miss ones that did.
var historyFailed = func(err error) {
	fmt.Fprintf(os.Stderr, "leasehold: --history-dir: %v: the history would be incomplete; stopping\n", err)
	os.Exit(exitFailure)
}

// record appends ev and syncs it to disk before returning.
func (h *historyLog) record(ev historyEvent) {
	ev.Worker = h.worker
	if ev.At.IsZero() {
		ev.At = time.Now().UTC()
	}
	b, _ := json.Marshal(ev)
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.f.Write(append(b, '\n')); err != nil {
		historyFailed(fmt.Errorf("cannot record a %s event of job %s: %w", ev.Ev, ev.Job, err))
		return
	}
	if err := h.f.Sync(); err != nil {
		historyFailed(fmt.Errorf("cannot sync %s: %w", h.f.Name(), err))
	}
}

func (h *historyLog) close() error { return h.f.Close() }

func accepted(err error) *bool { ok := err == nil; return &ok }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// handler is the history kind's handler.
func (h *historyLog) handler(ctx context.Context, j *worker.Job) error {
	var a historyArgs
	if err := j.Decode(&a); err != nil {
		return worker.JobCancel(err)
	}
	h.record(historyEvent{Ev: "start", Job: j.ID, Attempt: j.Attempt, Token: j.Token})
	half := time.Duration(a.MS) * time.Millisecond / 2
	sleep := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(half):
			return nil
		}
	}
	if err := sleep(); err != nil {
		return err
	}
	// The checkpoint is written even if the context ended meanwhile (a
	// handler that ignores its context), so that the history shows whether
	// the store refused it.
	err := j.Checkpoint(context.WithoutCancel(ctx), map[string]any{"half": true, "token": j.Token})
	h.record(historyEvent{Ev: "checkpoint", Job: j.ID, Attempt: j.Attempt, Token: j.Token, Accepted: accepted(err), Err: errString(err)})
	if err != nil {
		return err
	}
	if err := sleep(); err != nil {
		return err
	}
	if j.Attempt <= a.FailTimes {
		return fmt.Errorf("planned failure %d of %d", j.Attempt, a.FailTimes)
	}
	return j.SetResult(map[string]any{"token": j.Token, "worker": h.worker})
}

// onOutcome records how each run ended (worker.Config.OnOutcome).
func (h *historyLog) onOutcome(o worker.Outcome) {
	if o.Job.Kind != "history" {
		return
	}
	started := o.Started.UTC()
	ok := o.Err == nil
	if errors.Is(o.Err, fence.ErrLeaseLost) || o.Op == "abandon" {
		ok = false
	}
	h.record(historyEvent{Ev: "outcome", Job: o.Job.ID, Attempt: o.Job.Attempt, Token: o.Token, Op: o.Op,
		Accepted: &ok, Err: errString(o.Err), Started: &started})
}

func historyKind(h *historyLog) kindSpec {
	return kindSpec{handler: h.handler, validate: func(p json.RawMessage) error {
		var a historyArgs
		return decodeStrict(p, &a)
	}}
}
