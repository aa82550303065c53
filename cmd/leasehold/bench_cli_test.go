package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// --latency-jobs 0 skips the latency phase (it ran 2,000 jobs, the
// default, before).
func TestBenchLatencyJobsZeroSkipsPhase(t *testing.T) {
	r := runCLI(t, nil, "", "bench", "--jobs", "50", "--concurrency", "4", "--latency-jobs", "0", "--json", "--data", t.TempDir())
	if r.code != 0 {
		t.Fatalf("bench: exit %d: %s", r.code, r.stderr)
	}
	var phases []string
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var res struct{ Phase string }
		if err := json.Unmarshal([]byte(l), &res); err != nil {
			t.Fatalf("bench --json line %q: %v", l, err)
		}
		phases = append(phases, res.Phase)
	}
	if strings.Join(phases, ",") != "insert,drain" {
		t.Fatalf("phases %v, want insert and drain only", phases)
	}
}
