package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// failingWriter refuses every write, as a full disk or a closed stdout
// does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestOutputWriteFailureIsAFailure: a command whose stdout cannot be
// written exits 1 saying so, whatever it prints, as 'jobs list' and every
// --json output always did. Before, the one-line outputs (enqueue's id,
// the answers of cancel, retry, delete, queues pause, jobs wait) ignored
// the error and exited 0: 'leasehold enqueue ... > ids' on a full disk
// enqueued the job, lost its id and said it had succeeded.
func TestOutputWriteFailureIsAFailure(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	enqueue := func() string {
		t.Helper()
		code, out, errs := runInProcess("enqueue", "echo", "{}", "--delay", "1h", "--server", e.srv.URL)
		if code != 0 {
			t.Fatalf("enqueue: exit %d: %s", code, errs)
		}
		return strings.TrimSpace(out)
	}
	cancelled := enqueue()
	if code, _, errs := runInProcess("jobs", "cancel", cancelled, "--server", e.srv.URL); code != 0 {
		t.Fatalf("jobs cancel: exit %d: %s", code, errs)
	}
	toDelete := enqueue()
	if code, _, errs := runInProcess("jobs", "cancel", toDelete, "--server", e.srv.URL); code != 0 {
		t.Fatalf("jobs cancel: exit %d: %s", code, errs)
	}
	toCancel := enqueue()

	for _, args := range [][]string{
		{"enqueue", "echo", "{}"},
		{"jobs", "cancel", toCancel},
		{"jobs", "wait", cancelled},
		{"jobs", "retry", cancelled},
		{"jobs", "delete", toDelete},
		{"jobs", "cancel", "--all"}, // the retried job too
		{"jobs", "wait", "--all"},
		{"queues", "pause", "default", "--force"}, // no daemon serves it here
	} {
		var errs bytes.Buffer
		code := run(append(args, "--server", e.srv.URL), strings.NewReader(""), failingWriter{}, &errs)
		want := "leasehold: " + strings.Join(args[:2], " ")
		if args[0] == "enqueue" {
			want = "leasehold: enqueue"
		}
		want += ": write output: no space left on device\n"
		if code != exitFailure || errs.String() != want {
			t.Errorf("%s with stdout unwritable: exit %d, stderr %q; want exit %d and %q", strings.Join(args, " "), code, errs.String(), exitFailure, want)
		}
	}
}
