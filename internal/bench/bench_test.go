package bench_test

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/bench"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Full runs of the bench from go test, for profiling with -cpuprofile:
//
//	go test ./internal/bench -run TestFull -full embedded -ceiling -cpuprofile cpu.out
var (
	full    = flag.String("full", "", "run the whole bench in this mode (embedded or shared) and print its JSON")
	ceiling = flag.Bool("ceiling", false, "with -full: also run the ceiling loop")
	jobs    = flag.Int("jobs", 0, "with -full: jobs of the insert and drain phases (default 20000)")
	latJobs = flag.Int("latency-jobs", 0, "with -full: jobs of the latency phase (default 2000)")
	slots   = flag.Int("concurrency", 0, "with -full: worker slots (default 64)")
	daemons = flag.Int("daemons", 0, "with -full shared: workers draining the queue, each with its own etcd client (default 1)")
)

func TestFull(t *testing.T) {
	if *full == "" {
		t.Skip("give -full embedded|shared to run the whole bench")
	}
	enc := json.NewEncoder(os.Stdout)
	err := bench.Run(context.Background(), bench.Config{
		Mode: *full, Ceiling: *ceiling, Jobs: *jobs, LatencyJobs: *latJobs, Concurrency: *slots, Daemons: *daemons,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, func(r bench.Result) {
		_ = enc.Encode(r)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRunSmall runs every phase with tiny numbers and checks that each is
// reported with sane fields. It asserts nothing about speed.
func TestRunSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	var got []bench.Result
	var progressed = map[string]bool{}
	cfg := bench.Config{
		Mode:        bench.ModeEmbedded,
		Data:        dir,
		Jobs:        200,
		Concurrency: 8,
		LatencyJobs: 50,
		LatencyRate: 1000,
		Ceiling:     true,
		Progress: func(phase string, done, total int) {
			if done < 0 || done > total {
				t.Errorf("progress %s: %d of %d", phase, done, total)
			}
			progressed[phase] = true
		},
	}
	if err := bench.Run(ctx, cfg, func(r bench.Result) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	want := []string{bench.PhaseCeiling, bench.PhaseInsert, bench.PhaseDrain, bench.PhaseLatency}
	if len(got) != len(want) {
		t.Fatalf("got %d results, want %d: %+v", len(got), len(want), got)
	}
	for i, r := range got {
		if r.Phase != want[i] {
			t.Errorf("result %d is phase %q, want %q", i, r.Phase, want[i])
		}
		if !progressed[r.Phase] {
			t.Errorf("no progress reported for phase %s", r.Phase)
		}
		wantJobs := map[string]int{bench.PhaseCeiling: 200, bench.PhaseInsert: 200, bench.PhaseDrain: 200, bench.PhaseLatency: 50}[r.Phase]
		if r.Mode != bench.ModeEmbedded || r.Jobs != wantJobs {
			t.Errorf("%s: mode %q jobs %d, want embedded and %d", r.Phase, r.Mode, r.Jobs, wantJobs)
		}
		if r.Seconds <= 0 || r.JobsPerSec <= 0 {
			t.Errorf("%s: seconds %v jobs/s %v, want both > 0", r.Phase, r.Seconds, r.JobsPerSec)
		}
		if !(0 < r.P50MS && r.P50MS <= r.P90MS && r.P90MS <= r.P99MS && r.P99MS <= r.MaxMS) {
			t.Errorf("%s: percentiles not ordered and positive: p50 %v p90 %v p99 %v max %v", r.Phase, r.P50MS, r.P90MS, r.P99MS, r.MaxMS)
		}
		if r.MaxRSSMB <= 0 || r.Concurrency <= 0 || r.CPUs <= 0 || r.GoVersion == "" || r.Date == "" || !strings.Contains(r.Store, dir) {
			t.Errorf("%s: missing fields: %+v", r.Phase, r)
		}
		cpu := r.Phase != bench.PhaseLatency && runtime.GOOS == "linux"
		if cpu != (r.CPUMicrosPerJob > 0 && r.CPUCores > 0) {
			t.Errorf("%s: CPU %v µs a job on %v cores: want both on ceiling, insert and drain only", r.Phase, r.CPUMicrosPerJob, r.CPUCores)
		}
		tenths := r.Phase == bench.PhaseInsert || r.Phase == bench.PhaseDrain
		if tenths != (r.FirstTenthJobsPerSec > 0 && r.LastTenthJobsPerSec > 0) {
			t.Errorf("%s: first/last tenth rates %v/%v: want both on insert and drain only", r.Phase, r.FirstTenthJobsPerSec, r.LastTenthJobsPerSec)
		}
		if r.Daemons != 0 {
			t.Errorf("%s: daemons %d for one daemon, want it left out", r.Phase, r.Daemons)
		}
		if (r.Phase == bench.PhaseDrain) != (r.CeilingRatio > 0) {
			t.Errorf("%s: ceiling ratio %v: want it on the drain result only", r.Phase, r.CeilingRatio)
		}
		if (r.Phase == bench.PhaseLatency) != (0 < r.EnqueueP50MS && r.EnqueueP50MS <= r.EnqueueP99MS) {
			t.Errorf("%s: enqueue call p50/p99 %v/%v: want them on the latency result only, positive and ordered", r.Phase, r.EnqueueP50MS, r.EnqueueP99MS)
		}
	}

	// The contract's field names.
	b, err := json.Marshal(got[2])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"mode", "phase", "jobs", "seconds", "jobs_per_sec", "p50_ms", "p90_ms", "p99_ms", "max_ms", "max_rss_mb", "concurrency", "go_version", "cpus", "date", "ceiling_ratio"} {
		if _, ok := m[k]; !ok {
			t.Errorf("drain JSON lacks %q: %s", k, b)
		}
	}

	// A reused directory: a second run uses a fresh namespace, and the
	// first one left nothing behind to confuse it.
	cfg.Ceiling, cfg.Progress = false, nil
	got = nil
	if err := bench.Run(ctx, cfg, func(r bench.Result) { got = append(got, r) }); err != nil {
		t.Fatalf("second run on the same directory: %v", err)
	}
	if len(got) != 3 {
		t.Fatalf("second run: got %d results, want 3", len(got))
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []bench.Config{
		{Mode: "cloud"},
		{Mode: bench.ModeEmbedded, Etcd: []string{"http://127.0.0.1:2379"}},
		{Mode: bench.ModeShared, Data: "x"},
		{Jobs: -1},
		{LatencyRate: -5},
		{Mode: bench.ModeEmbedded, Daemons: 2},
		{Daemons: -1},
	} {
		err := bench.Run(context.Background(), cfg, func(bench.Result) { t.Errorf("%+v: emitted a result", cfg) })
		if err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// TestRunSmallShared covers shared mode on an embedded etcd member that Run
// starts and stops, with two daemons.
func TestRunSmallShared(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd member")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var phases []string
	cfg := bench.Config{Mode: bench.ModeShared, Jobs: 100, Concurrency: 8, Daemons: 2, LatencyJobs: 20, LatencyRate: 1000, Ceiling: true}
	err := bench.Run(ctx, cfg, func(r bench.Result) {
		phases = append(phases, r.Phase)
		if r.Mode != bench.ModeShared || r.JobsPerSec <= 0 || r.P99MS <= 0 || !strings.HasPrefix(r.Store, "etcd (embedded member)") {
			t.Errorf("%s: %+v", r.Phase, r)
		}
		if workers := r.Phase == bench.PhaseDrain || r.Phase == bench.PhaseLatency; workers != (r.Daemons == 2) {
			t.Errorf("%s: daemons %d, want 2 on drain and latency only", r.Phase, r.Daemons)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(phases, ","); got != "ceiling,insert,drain,latency" {
		t.Errorf("phases %s", got)
	}
}

// TestMemoryBackedStoreSaid: on a memory-backed filesystem (tmpfs, as /tmp
// is on many distributions) fsync reaches no disk, so the numbers are not
// those of a durable store: every result says so.
func TestMemoryBackedStoreSaid(t *testing.T) {
	const shm = "/dev/shm"
	if _, err := os.Stat(shm); err != nil {
		t.Skip("no /dev/shm")
	}
	dir, err := os.MkdirTemp(shm, "leasehold-bench-test-")
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []bench.Result
	cfg := bench.Config{Mode: bench.ModeEmbedded, Data: dir, Jobs: 20, Concurrency: 4, LatencyJobs: 5, LatencyRate: 1000}
	if err := bench.Run(ctx, cfg, func(r bench.Result) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("no results")
	}
	for _, r := range got {
		if !strings.Contains(r.Store, dir) || !strings.Contains(r.Store, "memory-backed") {
			t.Errorf("%s: store %q does not say that %s is memory-backed", r.Phase, r.Store, dir)
		}
	}
}
