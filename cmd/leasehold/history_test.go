package main

import (
	"errors"
	"os"
	"testing"
)

// An event that cannot be written stops the daemon rather than leaving a
// gap in the history the fault checker reads.
func TestHistoryWriteFailureIsFatal(t *testing.T) {
	var got error
	old := historyFailed
	historyFailed = func(err error) { got = err }
	t.Cleanup(func() { historyFailed = old })

	h, err := openHistory(t.TempDir(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	h.record(historyEvent{Ev: "start", Job: "j1"})
	if got != nil {
		t.Fatalf("a good write failed: %v", got)
	}
	_ = h.f.Close() // every later write fails
	h.record(historyEvent{Ev: "start", Job: "j2"})
	if !errors.Is(got, os.ErrClosed) {
		t.Fatalf("write to a closed history: %v, want the failure reported", got)
	}
}
