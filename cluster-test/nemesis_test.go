package main

import (
	"io"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A pause's or a partition's recorded end must not come after the moment
// it was lifted: the daemon may record a held-up event right then, and the
// checker excuses a late event only if it was recorded at or after the
// fault's end.
func TestFaultEndStampedBeforeItIsLifted(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	for _, kind := range []string{fPauseDaemon, fPartition, fPartitionReq, fPartitionReply, fLatency} {
		t.Run(kind, func(t *testing.T) {
			p, err := newProc("d1", sleep, filepath.Join(t.TempDir(), "d1.log"), []string{"60"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.kill(); _ = p.log.Close() })
			if err := p.start(nil); err != nil {
				t.Fatal(err)
			}
			var liftedAt time.Time
			old := liftedHook
			liftedHook = func() { liftedAt = time.Now() }
			t.Cleanup(func() { liftedHook = old })
			h := &harness{stdout: io.Discard, daemons: []*daemon{{slot: 0, name: "d1", proc: p}}}
			if err := h.runFault(t.Context(), 1, plan{Kind: kind, Slot: 0}); err != nil {
				t.Fatal(err)
			}
			if len(h.faults) != 1 || liftedAt.IsZero() {
				t.Fatalf("faults %d, lifted %v", len(h.faults), liftedAt)
			}
			if f := h.faults[0]; f.End.After(liftedAt) {
				t.Fatalf("%s recorded as ending at %s, after it was lifted at %s", kind, f.End.Format(time.RFC3339Nano), liftedAt.Format(time.RFC3339Nano))
			}
		})
	}
}
