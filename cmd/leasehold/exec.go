package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/worker"
)

// Limits of --exec kinds.
const (
	// maxExecStdout bounds the stdout kept as a job's result.
	maxExecStdout = 64 << 10
	// execStderrTail is how much of the end of stderr is kept for the
	// error of a failed run.
	execStderrTail = 4 << 10
)

// execKillGrace is how long a cancelled command has between SIGTERM and
// SIGKILL. It stays below the worker's AbandonGrace, so a command that
// ignores SIGTERM is killed before its slot is taken from it.
var execKillGrace = 5 * time.Second

// execSpec is one --exec KIND=COMMAND.
type execSpec struct {
	kind    string
	command string
}

func parseExec(s string) (execSpec, error) {
	kind, command, ok := strings.Cut(s, "=")
	kind, command = strings.TrimSpace(kind), strings.TrimSpace(command)
	if !ok || kind == "" || command == "" {
		return execSpec{}, usagef("--exec %q: want KIND=COMMAND, e.g. --exec 'resize=./resize.sh'", s)
	}
	if err := coordinator.ValidateKind(kind); err != nil {
		return execSpec{}, usagef("--exec %q: %s", s, cleanCoordError(err))
	}
	return execSpec{kind: kind, command: command}, nil
}

// execHandler runs spec.command with sh -c for each job: the payload on
// stdin; LEASEHOLD_JOB_ID, LEASEHOLD_ATTEMPT, LEASEHOLD_TOKEN,
// LEASEHOLD_KIND and LEASEHOLD_IDEMPOTENCY_KEY in its
// environment. Exit status 0 completes the job with stdout as its result
// (as JSON if it is JSON, else as a JSON string); any other status fails
// the attempt with the end of stderr as the error. The command runs in its
// own process group; when the job's context ends (cancel, timeout,
// shutdown, lost lease) the group gets SIGTERM, then SIGKILL after
// execKillGrace.
func execHandler(spec execSpec, log *slog.Logger) worker.Handler {
	return func(ctx context.Context, j *worker.Job) error {
		cmd := exec.Command("sh", "-c", spec.command)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Stdin = bytes.NewReader(j.Payload)
		stdout := &capBuffer{max: maxExecStdout}
		stderr := &tailBuffer{max: execStderrTail}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		// Grandchildren that keep the pipes open do not hold the job
		// once the command itself has exited.
		cmd.WaitDelay = execKillGrace
		cmd.Env = append(os.Environ(),
			"LEASEHOLD_JOB_ID="+j.ID,
			"LEASEHOLD_ATTEMPT="+strconv.Itoa(j.Attempt),
			"LEASEHOLD_TOKEN="+j.Token.String(),
			"LEASEHOLD_KIND="+j.Kind,
			"LEASEHOLD_IDEMPOTENCY_KEY="+j.IdempotencyKey(),
		)
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("exec %s: cannot start %q: %w", spec.kind, spec.command, err)
		}
		pgid := cmd.Process.Pid
		exited := make(chan struct{})
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			select {
			case <-exited:
				return
			case <-ctx.Done():
			}
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			t := time.NewTimer(execKillGrace)
			defer t.Stop()
			select {
			case <-exited:
			case <-t.C:
				log.Warn("command ignored SIGTERM: killing its process group", slog.String("job", j.ID), slog.Int("pgid", pgid))
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		}()
		werr := cmd.Wait()
		close(exited)
		<-stopped

		if ctx.Err() != nil {
			return fmt.Errorf("exec %s: command stopped (%v): %s", spec.kind, context.Cause(ctx), describeExit(werr, stderr))
		}
		if werr != nil {
			return fmt.Errorf("exec %s: %s", spec.kind, describeExit(werr, stderr))
		}
		out := bytes.TrimSpace(stdout.buf.Bytes())
		switch {
		case len(out) == 0:
			return nil
		case stdout.truncated:
			log.Warn("command output over the limit: result truncated", slog.String("job", j.ID), slog.Int("limit", maxExecStdout))
			return j.SetResult(string(out) + " [truncated]")
		case json.Valid(out):
			return j.SetResult(json.RawMessage(out))
		default:
			return j.SetResult(string(out))
		}
	}
}

// describeExit says how a command ended, with the last lines of stderr.
func describeExit(err error, stderr *tailBuffer) string {
	var how string
	var ee *exec.ExitError
	switch {
	case err == nil:
		how = "exited with status 0"
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			how = "killed by signal " + ws.Signal().String()
		} else {
			how = fmt.Sprintf("exited with status %d", ee.ExitCode())
		}
	case errors.Is(err, exec.ErrWaitDelay):
		how = "exited, but its children kept its output open"
	default:
		how = err.Error()
	}
	if tail := lastLines(stderr.Bytes(), 3, 512); tail != "" {
		return how + ": " + tail
	}
	return how + " (no stderr output)"
}

// lastLines returns the last n non-empty lines of b joined by " | ", at
// most max bytes.
func lastLines(b []byte, n, max int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var keep []string
	for i := len(lines) - 1; i >= 0 && len(keep) < n; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			keep = append([]string{l}, keep...)
		}
	}
	s := strings.Join(keep, " | ")
	if len(s) > max {
		s = "..." + s[len(s)-max:]
	}
	return s
}

// capBuffer keeps the first max bytes written to it.
type capBuffer struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	room := b.max - b.buf.Len()
	if room < len(p) {
		b.truncated = true
		b.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	b.buf.Write(p)
	return len(p), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) Bytes() []byte { return b.buf }
