package main

import (
	"strings"
	"testing"
)

// A queue whose only jobs are scheduled (or retryable) is not known to the
// daemon's check, which sees served queues and available jobs: pausing it
// is refused, and the refusal must not say the queue has no jobs, but how
// to pause it anyway.
func TestQueuesPauseScheduledOnlyQueue(t *testing.T) {
	d := startDaemon(t, t.TempDir())
	srv := d.server
	okCLI(t, "enqueue", "echo", `{}`, "--queue", "pdf", "--delay", "1h", "--server", srv)
	r := runCLI(t, nil, "", "queues", "pause", "pdf", "--server", srv)
	checkOneLineError(t, "pause a queue with only scheduled jobs", r, exitUsage, "pass --force")
	if strings.Contains(r.stderr, "it has no jobs") || !strings.Contains(r.stderr, "scheduled") {
		t.Errorf("the refusal does not say that scheduled jobs are not counted and what to do: %q", r.stderr)
	}
	if out := okCLI(t, "queues", "pause", "pdf", "--force", "--server", srv); !strings.Contains(out, "queue pdf paused") {
		t.Errorf("queues pause --force: %q", out)
	}
}
