package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os/signal"
	"syscall"

	"github.com/leasehold/leasehold/internal/bench"
	"github.com/spf13/cobra"
)

type benchOpts struct {
	mode        string
	data        string
	etcd        []string
	jobs        int
	concurrency int
	daemons     int
	latencyJobs int
	latencyRate float64
	ceiling     bool
	json        bool
}

func newBenchCmd(g *globalOpts) *cobra.Command {
	o := &benchOpts{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure enqueue and drain throughput and pickup latency",
		Long: `Run the standard workload in this process, durably, and report each phase:
  insert   N no-op jobs, enqueued 1,000 per call, no worker running
  drain    a worker with --concurrency slots runs them all (shared mode:
           --daemons workers, each with its own client and slots)
  latency  --latency-jobs jobs enqueued one per call at --latency-rate per
           second; latency is enqueue call start to handler start
           (--latency-jobs 0: no latency phase)
With --ceiling it first runs the raw store loop (synced Pebble puts, or
batched etcd claims) so throughput can be read against the store's ceiling.
Embedded mode uses a temporary directory unless --data is given (not one a
daemon is using); shared mode starts one embedded etcd member unless --etcd
is given. Insert and drain also report the rates of their first and last
tenth of the jobs. --json prints one JSON object per phase.`,
		Example: `  leasehold bench
  leasehold bench --mode shared --ceiling --json
  leasehold bench --etcd http://127.0.0.1:2379 --jobs 100000
  leasehold bench --mode shared --daemons 4
  leasehold bench --jobs 1000000 --latency-jobs 0`,
		Args: argsBetween(0, 0, "[--mode embedded|shared] [--data DIR | --etcd URL,...] [--jobs N] [--concurrency C] [--daemons D] [--json]"),
		RunE: action(func(cmd *cobra.Command, _ []string) error { return runBench(cmd, g, o) }),
	}
	f := cmd.Flags()
	f.StringVar(&o.mode, "mode", "", "embedded or shared (default: shared with --etcd, else embedded)")
	f.StringVar(&o.data, "data", "", "embedded store directory (default: a temporary one)")
	noEnv(cmd, "data") // LEASEHOLD_DATA is the daemon's store
	f.StringSliceVar(&o.etcd, "etcd", nil, "etcd endpoints (default in shared mode: an embedded member)")
	f.IntVar(&o.jobs, "jobs", bench.DefaultJobs, "jobs of the insert and drain phases")
	f.IntVar(&o.concurrency, "concurrency", bench.DefaultConcurrency, "worker slots (of each daemon)")
	f.IntVar(&o.daemons, "daemons", 1, "workers draining the queue, each with its own etcd client (shared mode)")
	f.IntVar(&o.latencyJobs, "latency-jobs", bench.DefaultLatencyJobs, "jobs of the latency phase")
	f.Float64Var(&o.latencyRate, "latency-rate", bench.DefaultLatencyRate, "enqueue rate of the latency phase, jobs per second")
	f.BoolVar(&o.ceiling, "ceiling", false, "also measure the raw store loop")
	f.BoolVar(&o.json, "json", false, "print one JSON object per phase")
	return cmd
}

func runBench(cmd *cobra.Command, g *globalOpts, o *benchOpts) error {
	switch {
	case o.jobs < 1:
		return usagef("--jobs %d: want 1 or more", o.jobs)
	case o.concurrency < 1 || o.concurrency > maxConcurrency:
		return usagef("--concurrency %d: want 1 to %d", o.concurrency, maxConcurrency)
	case o.daemons < 1:
		return usagef("--daemons %d: want 1 or more", o.daemons)
	case o.daemons > 1 && (o.mode == bench.ModeEmbedded || o.mode == "" && len(o.etcd) == 0):
		return usagef("--daemons %d: several daemons need shared mode (add --mode shared)", o.daemons)
	case o.latencyJobs < 0:
		return usagef("--latency-jobs %d is negative: want a number of jobs, or 0 to skip the latency phase", o.latencyJobs)
	case !(o.latencyRate > 0) || math.IsInf(o.latencyRate, 1):
		return usagef("--latency-rate %g: want a positive rate, in jobs per second", o.latencyRate)
	case o.mode != "" && o.mode != bench.ModeEmbedded && o.mode != bench.ModeShared:
		return usagef("--mode %q: want embedded or shared", o.mode)
	case o.data != "" && (o.mode == bench.ModeShared || o.mode == "" && len(o.etcd) > 0):
		return usagef("%s is the embedded store's directory; shared mode runs on etcd (--etcd endpoints, or none to start an embedded member): drop it", flagLabel(cmd, "data"))
	}
	if err := checkEtcdEndpoints(o.etcd); err != nil {
		return err
	}
	log, err := newLogger(&globalOpts{logFormat: g.logFormat, logLevel: "warn"}, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
	p := newMeter(errw, "")
	cfg := bench.Config{
		Mode: o.mode, Data: o.data, Etcd: o.etcd, Jobs: o.jobs, Concurrency: o.concurrency, Daemons: o.daemons,
		LatencyJobs: cmp.Or(o.latencyJobs, -1), LatencyRate: o.latencyRate, Ceiling: o.ceiling, Logger: log,
		Progress: func(phase string, done, total int) {
			if phase != p.what {
				p.reset(phase)
			}
			p.update(done, total, "")
		},
	}
	if !o.json {
		fmt.Fprintf(out, "%-9s %-8s %8s %9s %12s %8s %8s %8s %8s %8s\n", "mode", "phase", "jobs", "seconds", "jobs/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "rss MB")
	}
	err = bench.Run(ctx, cfg, func(r bench.Result) {
		p.clear()
		if o.json {
			b, _ := json.Marshal(r)
			fmt.Fprintln(out, string(b))
			return
		}
		line := fmt.Sprintf("%-9s %-8s %8d %9.2f %12.0f %8.2f %8.2f %8.2f %8.2f %8.1f", r.Mode, r.Phase, r.Jobs, r.Seconds, r.JobsPerSec, r.P50MS, r.P90MS, r.P99MS, r.MaxMS, r.MaxRSSMB)
		if r.Daemons > 1 {
			line += fmt.Sprintf("  (%d daemons)", r.Daemons)
		}
		if r.CeilingRatio > 0 {
			line += fmt.Sprintf("  (%.1f%% of the store ceiling)", 100*r.CeilingRatio)
		}
		if r.FirstTenthJobsPerSec > 0 {
			line += fmt.Sprintf("  (first/last tenth %.0f/%.0f jobs/s)", r.FirstTenthJobsPerSec, r.LastTenthJobsPerSec)
		}
		if r.CPUMicrosPerJob > 0 {
			line += fmt.Sprintf("  (CPU %.0f µs a job, %.2f cores)", r.CPUMicrosPerJob, r.CPUCores)
		}
		if r.EnqueueP99MS > 0 {
			line += fmt.Sprintf("  (enqueue call p50/p99 %.2f/%.2f ms)", r.EnqueueP50MS, r.EnqueueP99MS)
		}
		fmt.Fprintln(out, line)
	})
	p.clear()
	if err != nil {
		if ctx.Err() != nil {
			return failf("interrupted")
		}
		if lerr, ok := lockedf(err); ok {
			return lerr
		}
		return failf("%v", err)
	}
	return nil
}
