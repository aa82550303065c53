// Command cluster-test is leasehold's multi-process fault test: it starts a
// 3-member etcd cluster and several daemons as separate processes (each
// daemon reaching etcd through its own fault proxy), runs a workload of
// recorded jobs while a nemesis kills, pauses and partitions daemons and
// kills etcd members, then checks the daemons' execution histories and the
// store's own history and final state against the safety contract: nothing
// lost, one accepted final write per job, no write accepted under a stale
// token. In embedded mode it SIGKILLs one daemon on a Pebble directory
// repeatedly instead.
//
//	go run ./cluster-test --short                 # CI form, about 2-3 minutes
//	go run ./cluster-test --duration 10m --seed 7 # a soak run; a seed reproduces the fault schedule
//	go run ./cluster-test --mode embedded --short
//	go run ./cluster-test --short --binary /tmp/leasehold-nofence --expect-violations
//
// It prints its one-line summary last, writes report.json, timeline.svg and
// (if any) violations.txt to --out, and exits 1 on any violation or lost
// job (3 if the harness itself failed).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/term"
)

type config struct {
	mode             string
	daemons          int
	seed             uint64
	short            bool
	duration         time.Duration
	out              string
	binary           string
	tags             string
	concurrency      int
	rate             float64
	leaseTTL         time.Duration
	shutdownTimeout  time.Duration
	quiesce          time.Duration
	quiesceMax       time.Duration
	expectViolations bool
	keepData         bool
	maxTimelines     int
	recheck          string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("cluster-test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var seed int64
	fs.StringVar(&cfg.mode, "mode", "shared", "shared (3 etcd members, --daemons daemons) or embedded (one daemon on a Pebble directory)")
	fs.IntVar(&cfg.daemons, "daemons", 3, "daemons in shared mode")
	fs.Int64Var(&seed, "seed", 0, "seed of the fault schedule and workload (0: random, printed)")
	fs.BoolVar(&cfg.short, "short", false, "the CI form: about 2-3 minutes, every fault kind twice")
	fs.DurationVar(&cfg.duration, "duration", 0, "time under faults (default 5m; --short: two rounds of every fault kind)")
	fs.StringVar(&cfg.out, "out", "", "directory for report.json, timeline.svg, violations.txt, logs and histories (default: a new temporary directory)")
	fs.StringVar(&cfg.binary, "binary", "", "a prebuilt leasehold binary (default: build ./cmd/leasehold)")
	fs.StringVar(&cfg.tags, "tags", "", "build tags for the binary the harness builds (e.g. leasehold_nofence)")
	fs.IntVar(&cfg.concurrency, "concurrency", 0, "slots per daemon (default 16; in embedded mode 32: the one daemon carries the whole workload)")
	fs.Float64Var(&cfg.rate, "rate", 12, "jobs enqueued per second")
	fs.DurationVar(&cfg.leaseTTL, "lease-ttl", 2*time.Second, "daemon session lease TTL (whole seconds)")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 3*time.Second, "daemon drain time on SIGTERM")
	fs.DurationVar(&cfg.quiesce, "quiesce", 60*time.Second, "after the faults, how long no job may finish before unfinished ones count as lost")
	fs.DurationVar(&cfg.quiesceMax, "quiesce-max", 10*time.Minute, "after the faults, how long a backlog still draining may take in all before what is left counts as undrained")
	fs.BoolVar(&cfg.expectViolations, "expect-violations", false, "invert the verdict: exit 0 only if violations were found (for a deliberately broken --binary)")
	fs.BoolVar(&cfg.keepData, "keep-data", false, "keep the etcd and Pebble data directories")
	fs.IntVar(&cfg.maxTimelines, "max-timelines", 10, "violating jobs whose timeline is printed (all go to violations.txt)")
	fs.StringVar(&cfg.recheck, "recheck", "", "run only the checker again on the --out directory of an earlier run")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case cfg.mode != "shared" && cfg.mode != "embedded":
		return cfg, fmt.Errorf("--mode %q: want shared or embedded", cfg.mode)
	case cfg.daemons < 1 || cfg.daemons > 16:
		return cfg, fmt.Errorf("--daemons %d: want 1 to 16", cfg.daemons)
	case coordinator.ValidateLeaseTTL(cfg.leaseTTL) != nil:
		return cfg, fmt.Errorf("--lease-ttl %s: want whole seconds, at least %s", cfg.leaseTTL, coordinator.MinLeaseTTL)
	case cfg.rate <= 0 || cfg.concurrency < 0:
		return cfg, fmt.Errorf("--rate and --concurrency must be positive")
	case cfg.quiesce <= 0 || cfg.quiesceMax < cfg.quiesce:
		return cfg, fmt.Errorf("--quiesce %s, --quiesce-max %s: want --quiesce positive and --quiesce-max at least as long", cfg.quiesce, cfg.quiesceMax)
	}
	if cfg.mode == "embedded" {
		cfg.daemons = 1
	}
	if cfg.concurrency == 0 {
		// The default workload's jobs hold about 15 slots at a time
		// (the xrun kind's long runs half of them): 16 a daemon leave
		// room among three daemons, not in one.
		cfg.concurrency = 16
		if cfg.mode == "embedded" {
			cfg.concurrency = 32
		}
	}
	if seed == 0 {
		seed = rand.Int64N(1<<31) + 1
	}
	cfg.seed = uint64(seed)
	if cfg.duration == 0 && !cfg.short {
		cfg.duration = 5 * time.Minute
	}
	return cfg, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "cluster-test:", err)
		os.Exit(2)
	}
	if cfg.recheck != "" {
		code, err := recheck(cfg, os.Stdout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cluster-test:", err)
		}
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, _ := run(ctx, cfg, os.Stdout)
	stop()
	os.Exit(code)
}

// harness is one run.
type harness struct {
	cfg       config
	stdout    io.Writer
	tty       bool
	out       string
	dataDir   string
	histDir   string
	logDir    string
	binary    string
	namespace string

	members []*member
	daemons []*daemon
	cli     *clientv3.Client

	faultMu    sync.Mutex // held by a running fault
	faultsDone atomic.Int64
	planned    atomic.Int64 // faults the nemesis will run (for the progress line)
	current    atomic.Value // string: the fault in progress
	phase      atomic.Value // string

	mu        sync.Mutex
	faults    []*Fault
	instances []*instance
	anomalies []string

	printMu  sync.Mutex
	lastProg string
}

func (h *harness) logf(format string, args ...any) {
	h.printMu.Lock()
	defer h.printMu.Unlock()
	if h.tty && h.lastProg != "" {
		fmt.Fprint(h.stdout, "\r\033[K")
	}
	fmt.Fprintf(h.stdout, "%s "+format+"\n", append([]any{time.Now().Format(tsFormat)}, args...)...)
	if h.tty && h.lastProg != "" {
		fmt.Fprint(h.stdout, h.lastProg)
	}
}

func (h *harness) anomaly(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	h.mu.Lock()
	h.anomalies = append(h.anomalies, time.Now().Format(tsFormat)+" "+s)
	h.mu.Unlock()
	h.logf("ANOMALY: %s", s)
}

func (h *harness) setCurrent(s string) { h.current.Store(s) }

// progress shows a progress line with rate and ETA on a terminal, plain
// lines every 15 s otherwise.
func (h *harness) progress(ctx context.Context, w *workload, start time.Time, est time.Duration) {
	every := 15 * time.Second
	if h.tty {
		every = time.Second
	}
	for {
		select {
		case <-ctx.Done():
			if h.tty {
				h.printMu.Lock()
				fmt.Fprint(h.stdout, "\r\033[K")
				h.lastProg = ""
				h.printMu.Unlock()
			}
			return
		case <-time.After(every):
		}
		el := time.Since(start)
		n := 0
		if w != nil {
			n = w.count()
		}
		phase, _ := h.phase.Load().(string)
		cur, _ := h.current.Load().(string)
		s := progressLine(el, est, phase, n, h.faultsDone.Load(), h.planned.Load(), cur)
		if h.tty {
			h.printMu.Lock()
			h.lastProg = "\r\033[K" + s
			fmt.Fprint(h.stdout, h.lastProg)
			h.printMu.Unlock()
		} else {
			h.logf("%s", s)
		}
	}
}

// progressLine is one progress line: el into a run estimated to take est,
// in phase, n jobs acknowledged, done of planned faults (planned 0: not
// known), cur the fault or state of the moment.
func progressLine(el, est time.Duration, phase string, n int, done, planned int64, cur string) string {
	eta := "ETA " + max(est-el, 0).Round(time.Second).String()
	if el > est {
		// A quiesce that outlasts the estimate (a backlog drains, or
		// jobs are stuck) ends by --quiesce-max at the latest.
		eta = "past the estimate"
	}
	faults := fmt.Sprint(done)
	if planned > 0 {
		faults += fmt.Sprintf("/%d", planned)
	}
	return fmt.Sprintf("[%s] %s: %d jobs (%.1f/s), faults %s%s, %s", el.Round(time.Second), phase, n,
		float64(n)/max(el.Seconds(), 1), faults, noteSuffix(cur), eta)
}

// moduleRoot finds the directory of the leasehold module.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the leasehold module: run from the repository, or pass --binary")
	}
	return filepath.Dir(mod), nil
}

func (h *harness) buildBinary() error {
	if h.cfg.binary != "" {
		abs, err := filepath.Abs(h.cfg.binary)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("--binary: %w", err)
		}
		h.binary = abs
		return nil
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	h.binary = filepath.Join(h.dataDir, "leasehold")
	args := []string{"build", "-o", h.binary}
	if h.cfg.tags != "" {
		args = append(args, "-tags", h.cfg.tags)
	}
	args = append(args, "./cmd/leasehold")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/leasehold: %v\n%s", err, out)
	}
	return nil
}

// run runs the whole test and returns the exit code and the summary line.
func run(ctx context.Context, cfg config, stdout io.Writer) (int, string) {
	wall := time.Now()
	h := &harness{cfg: cfg, stdout: stdout, namespace: fmt.Sprintf("ct%d", cfg.seed)}
	if f, ok := stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		h.tty = true
	}
	h.phase.Store("setup")
	fail := func(err error) (int, string) {
		h.logf("cluster-test: harness failure: %v", err)
		killAllStarted()
		s := fmt.Sprintf("cluster-test: harness failure: %v", err)
		fmt.Fprintln(stdout, s)
		return 3, s
	}
	out := cfg.out
	if out == "" {
		d, err := os.MkdirTemp("", "cluster-test-")
		if err != nil {
			return fail(err)
		}
		out = d
	}
	h.out, _ = filepath.Abs(out)
	h.logDir, h.histDir = filepath.Join(h.out, "logs"), filepath.Join(h.out, "history")
	for _, d := range []string{h.logDir, h.histDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(err)
		}
	}
	if entries, _ := os.ReadDir(h.histDir); len(entries) > 0 {
		return fail(fmt.Errorf("%s already holds histories: use an empty --out", h.histDir))
	}
	dd, err := os.MkdirTemp("", "cluster-test-data-")
	if err != nil {
		return fail(err)
	}
	h.dataDir = dd
	if !cfg.keepData {
		defer removeAllQuiet(dd)
	}
	defer killAllStarted()

	kindOf := map[bool]string{true: "short", false: cfg.duration.String()}
	h.logf("cluster-test: mode %s, %d daemon(s), seed %d, %s run; output in %s", cfg.mode, cfg.daemons, cfg.seed, kindOf[cfg.short], h.out)
	if err := h.buildBinary(); err != nil {
		return fail(err)
	}

	// The fault plan, from the seed alone.
	minRounds, budget := 0, cfg.duration
	if cfg.short {
		minRounds, budget = 2, 0
		if cfg.mode == "embedded" {
			minRounds = 3
		}
	}
	// With --duration, the plan is longer than needed and the nemesis stops
	// at the deadline: a seed gives the same sequence of faults, of which a
	// run executes as many as fit.
	if budget > 0 {
		budget *= 2
	}
	plans := schedule(cfg.seed, cfg.mode, cfg.daemons, cfg.leaseTTL, budget, minRounds)
	var est time.Duration
	for _, p := range plans {
		est += p.Gap + p.Dur + estOverhead(p.Kind)
	}
	if cfg.duration > 0 && !cfg.short {
		est = cfg.duration
	}
	if cfg.short {
		h.planned.Store(int64(len(plans))) // with --duration, the deadline decides
	}
	est += 40 * time.Second // setup, tail, quiesce, checks

	var tgt target
	var storeLg *storeLog
	if cfg.mode == "shared" {
		if err := h.startEtcd(ctx); err != nil {
			return fail(err)
		}
		defer func() { _ = h.cli.Close() }()
		storeLg, err = startStoreLog(ctx, h.cli, h.namespace, filepath.Join(h.out, "store.jsonl"))
		if err != nil {
			return fail(err)
		}
		defer storeLg.result() // stops its watch
		st, err := newSharedTarget(h.cli, h.namespace)
		if err != nil {
			return fail(err)
		}
		tgt = st
	}
	if err := h.setupDaemons(); err != nil {
		return fail(err)
	}
	if cfg.mode == "embedded" {
		d := h.daemons[0]
		tgt = &httpTarget{addr: func() string { return d.listen }, hc: newHTTPClient()}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(h.daemons))
	for _, d := range h.daemons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.startDaemon(ctx, d); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fail(err)
	}
	defer tgt.close()

	// Queue control: the limit holds from the first job of the queue on.
	if err := setQueueLimit(ctx, tgt); err != nil {
		return fail(err)
	}

	// Workload, nemesis, supervisor, progress.
	h.phase.Store("under faults")
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	w := newWorkload(h, tgt, cfg.seed)
	workStart := time.Now()
	// Both background loops print; each stop waits for its loop to end, so
	// that nothing prints after run returns.
	var progWG, supWG sync.WaitGroup
	progCtx, cancelProg := context.WithCancel(ctx)
	progWG.Go(func() { h.progress(progCtx, w, wall, est) })
	stopProg := func() { cancelProg(); progWG.Wait() }
	defer stopProg()
	supCtx, cancelSup := context.WithCancel(ctx)
	supWG.Go(func() { h.supervise(supCtx) })
	stopSup := func() { cancelSup(); supWG.Wait() }
	defer stopSup()
	workCtx, stopWork := context.WithCancel(runCtx)
	workDone := make(chan struct{})
	go func() { defer close(workDone); w.run(workCtx, cfg.rate) }()
	var deadline time.Time
	if !cfg.short {
		deadline = time.Now().Add(cfg.duration)
	}
	nerr := h.nemesis(runCtx, plans, deadline)
	h.sleep(ctx, 3*time.Second) // a little work after the last fault
	stopWork()
	<-workDone
	workSecs := time.Since(workStart).Seconds()
	if nerr != nil && ctx.Err() == nil {
		stopProg()
		stopSup()
		return fail(nerr)
	}
	if ctx.Err() != nil {
		stopProg()
		stopSup()
		return fail(errInterrupted)
	}

	// Quiesce: every job should finish.
	h.phase.Store("quiesce")
	h.logf("workload stopped: %d jobs acknowledged, %d enqueue errors, %d skipped while the store stalled, %d cancel requests; waiting for jobs to finish",
		w.count(), w.enqErrs.Load(), w.skipped.Load(), w.cancels.Load())
	qStart := time.Now()
	q := newQuiescer(qStart, cfg.quiesce, cfg.quiesceMax)
	qEnd := ""
	for qEnd == "" {
		if ctx.Err() != nil {
			qEnd = quiesceStopped
			break
		}
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		jobs, err := tgt.list(lctx)
		cancel()
		if err != nil {
			qEnd = q.check(time.Now())
		} else {
			open := 0
			for _, j := range jobs {
				if !j.State.Final() {
					open++
				}
			}
			qEnd = q.observe(time.Now(), open)
			h.setCurrent(fmt.Sprintf("%d jobs not final", open))
		}
		if qEnd == "" {
			h.sleep(ctx, time.Second)
		}
	}
	if qEnd != quiesceAllFinal {
		h.logf("quiesce ended: %s", describeQuiesce(qEnd, cfg.quiesce, cfg.quiesceMax))
	}
	h.setCurrent("")
	qSecs := time.Since(qStart).Seconds()
	stopSup()

	// Final state: read it while the daemons still run ("lost" is "not
	// final after the quiesce period"; what stopping daemons do to an
	// unfinished job must not hide it), then stop them. The store log goes
	// on until after the stop, so its checks see any late write.
	h.phase.Store("final read")
	var final map[string]*coordinator.Job
	var finalAt time.Time
	readFinal := func() error {
		var err error
		for range 10 {
			lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			finalAt = time.Now()
			final, err = tgt.list(lctx)
			cancel()
			if err == nil {
				return nil
			}
			h.sleep(ctx, time.Second)
		}
		return err
	}
	if err := readFinal(); err != nil {
		stopProg()
		return fail(fmt.Errorf("reading the final state: %w", err))
	}
	h.faultMu.Lock()
	for _, d := range h.daemons {
		h.terminateDaemon(d)
	}
	h.faultMu.Unlock()
	storeLogState := "none (embedded mode)"
	var logEvents []StoreEvent
	logOK := false
	if cfg.mode == "shared" {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := h.cli.Get(gctx, "/leasehold/"+h.namespace+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err == nil {
			err = storeLg.catchUp(ctx, h.cli, resp.Header.Revision)
		}
		var gap string
		logEvents, gap = storeLg.result()
		switch {
		case err != nil:
			storeLogState = "incomplete: " + err.Error()
		case gap != "":
			storeLogState = "incomplete: " + gap
		default:
			storeLogState = fmt.Sprintf("complete: %d events", len(logEvents))
			logOK = true
		}
	}
	stopProg()
	end := time.Now()
	h.stopAll()

	// Check.
	h.phase.Store("check")
	events, torn, err := readHistories(h.histDir)
	if err != nil {
		return fail(err)
	}
	execLines, err := readExecRuns(filepath.Join(h.histDir, execRunsFile))
	if err != nil {
		return fail(err)
	}
	h.mu.Lock()
	faults := append([]*Fault(nil), h.faults...)
	anomalies := append([]string(nil), h.anomalies...)
	h.mu.Unlock()
	in := &CheckInput{Mode: cfg.mode, Jobs: w.snapshot(), Final: final, Events: events, Faults: faults,
		Instances: h.instancesSnapshot(), Log: logEvents, LogOK: logOK, SlotsLogged: logOK, End: end, FinalAt: finalAt,
		QuiesceEnd: qEnd, Quiesce: cfg.quiesce, QuiesceMax: cfg.quiesceMax, ExecLines: execLines}
	if err := writeJSON(filepath.Join(h.out, "checkinput.json"), savedInput{Mode: in.Mode, Jobs: in.Jobs, Final: in.Final,
		Faults: in.Faults, Instances: in.Instances, LogOK: in.LogOK, SlotsLogged: in.SlotsLogged, End: in.End, FinalAt: finalAt, Plan: plans, Lanes: len(h.daemons),
		QuiesceEnd: qEnd, Quiesce: cfg.quiesce, QuiesceMax: cfg.quiesceMax}); err != nil {
		return fail(err)
	}
	rep := Report{Mode: cfg.mode, Seed: cfg.seed, Daemons: cfg.daemons, Concurrency: cfg.concurrency,
		LeaseTTL: cfg.leaseTTL.String(), Rate: cfg.rate, Binary: h.binary, Started: wall,
		WorkloadSecs: round3(workSecs), QuiesceSecs: round3(qSecs), QuiesceEnd: qEnd, Plan: plans, Anomalies: anomalies, Instances: in.Instances, TornLines: torn,
		StoreLog: storeLogState, Out: h.out,
		Workload: map[string]int64{"acknowledged": int64(w.count()), "enqueue_errors": w.enqErrs.Load(),
			"skipped": w.skipped.Load(), "cancel_requests": w.cancels.Load(), "history_events": int64(len(events)),
			"exec_run_lines": int64(len(execLines)),
			"unique_hits":    w.uniqueHits.Load()},
		QueueOps: w.queueOpsSnapshot()}
	return report(cfg, in, &rep, len(h.daemons), wall, stdout)
}

// setQueueLimit sets limitedQueue's global limit, trying for up to 30 s
// (a shared daemon's first session can still be settling).
func setQueueLimit(ctx context.Context, tgt target) error {
	var err error
	for range 30 {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = tgt.queue(rctx, limitedQueue, "", queueLimit)
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	if err != nil {
		return fmt.Errorf("setting the limit of queue %s: %w", limitedQueue, err)
	}
	return nil
}

// report checks in, prints the findings and the summary (last), and
// writes report.json, timeline.svg and violations.txt to rep.Out.
func report(cfg config, in *CheckInput, rep *Report, lanes int, wall time.Time, stdout io.Writer) (int, string) {
	res := Check(in)
	nFaults, byKind := faultsByKind(in.Faults)
	summary := summaryLine(res, nFaults)
	rep.Summary, rep.Check, rep.Faults, rep.FaultsByKind, rep.FaultList = summary, res, nFaults, byKind, in.Faults
	rep.WallSeconds = round3(time.Since(wall).Seconds())
	bad := res.ViolatingJobs()
	if len(bad) > 0 {
		vf, err := os.Create(filepath.Join(rep.Out, "violations.txt"))
		if err == nil {
			for _, id := range bad {
				timeline(vf, in, res, id)
			}
			_ = vf.Close()
		}
		fmt.Fprintf(stdout, "\n%d violation(s) in %d job(s):\n", len(res.Violations), len(bad))
		for i, id := range bad {
			if i >= cfg.maxTimelines {
				fmt.Fprintf(stdout, "... and %d more jobs: see %s\n", len(bad)-i, filepath.Join(rep.Out, "violations.txt"))
				break
			}
			timeline(stdout, in, res, id)
		}
		fmt.Fprintln(stdout)
	}
	if err := writeJSON(filepath.Join(rep.Out, "report.json"), rep); err != nil {
		fmt.Fprintln(stdout, "cluster-test: writing the report:", err)
		return 3, summary
	}
	if f, err := os.Create(filepath.Join(rep.Out, "timeline.svg")); err == nil {
		writeSVG(f, in, res, lanes, fmt.Sprintf("%s (mode %s, seed %d)", summary, rep.Mode, rep.Seed))
		_ = f.Close()
	}
	fmt.Fprintf(stdout, "faults by kind: %s\n", formatKinds(byKind))
	fmt.Fprintf(stdout, "final states: %s; runs %d; finals by the reaper %d, by an unconfirmed write %d; cancelled while queued %d; store log %s\n",
		formatKinds(res.States), res.Runs, res.ReaperFinals, res.Uncertain, res.QueueCancels, rep.StoreLog)
	ts := res.Ticks
	fmt.Fprintf(stdout, "periodic %s (%s): %d ticks enqueued from %s to %s, %d twice, %d missed, %d not yet run at the final read; %d jobs enqueued after it began\n",
		ts.Name, tickSpec, ts.Ticks, ts.First.Format(tsFormat), ts.Last.Format(tsFormat), ts.Twice, ts.Missed, ts.Late, res.AfterFinalRead)
	qs := res.Queue
	if res.LogChecked {
		fmt.Fprintf(stdout, "unique keys: %d jobs with one, no two alive at once with the same key checked in the store history; %d enqueues answered with a live job\n",
			res.UniqueJobs, rep.Workload["unique_hits"])
		fmt.Fprintf(stdout, "queue %s: %d jobs, limit %d, at most %d held at once; %d claims checked against %d pauses and the limit\n",
			qs.Name, qs.Jobs, qs.Limit, qs.MaxHeld, qs.ClaimsChecked, qs.Pauses)
	} else {
		fmt.Fprintf(stdout, "queue %s: %d jobs (limit and pauses not checked without a store history; its jobs must still finish)\n", qs.Name, qs.Jobs)
	}
	es := res.Exec
	fmt.Fprintf(stdout, "exec kind %s: %d jobs (%d completed), %d runs in %d lines of %s, %d jobs run more than once, %d pairs of runs of a job overlapping\n",
		es.Kind, es.Jobs, es.Completed, es.Runs, es.Lines, execRunsFile, es.Rerun, es.Overlaps)
	fmt.Fprintf(stdout, "reclaim after lease loss: n=%d p50 %.2fs p99 %.2fs max %.2fs", res.Reclaim.N, res.Reclaim.P50, res.Reclaim.P99, res.Reclaim.Max)
	for _, k := range sortedKeys(res.ReclaimByKind) {
		s := res.ReclaimByKind[k]
		fmt.Fprintf(stdout, "; %s n=%d p50 %.2fs max %.2fs", k, s.N, s.P50, s.Max)
	}
	fmt.Fprintln(stdout)
	for _, wv := range res.Warnings {
		fmt.Fprintf(stdout, "WARNING %s: %s\n", wv.Kind, wv.Detail)
	}
	if len(rep.Anomalies) > 0 {
		fmt.Fprintf(stdout, "%d anomalies (unexpected process exits, restarts): see report.json\n", len(rep.Anomalies))
	}
	fmt.Fprintf(stdout, "report %s, picture %s (seed %d, %.0fs)\n", filepath.Join(rep.Out, "report.json"), filepath.Join(rep.Out, "timeline.svg"), rep.Seed, time.Since(wall).Seconds())
	code := 0
	found := countViolations(res) > 0 || len(res.Lost) > 0 || len(res.Undrained) > 0
	if found != cfg.expectViolations {
		code = 1
	}
	if cfg.expectViolations {
		if found {
			fmt.Fprintln(stdout, "--expect-violations: violations found, as expected of this binary")
		} else {
			fmt.Fprintln(stdout, "--expect-violations: NO violations found, but this binary was expected to produce some")
		}
	} else if len(rep.Anomalies) > 0 {
		// A process that exited without being told to (a crash) is a
		// failure, even if the supervisor restarted it and every job
		// finished.
		fmt.Fprintf(stdout, "FAIL: %d unexpected process exits or failed restarts: %s\n", len(rep.Anomalies), rep.Anomalies[0])
		code = 1
	}
	// In shared mode the store's history is what places every write at its
	// revision; without it the checks that need it (unfenced-write,
	// reap-while-owned, double-claim, phantom-write, token-unknown,
	// index-mismatch, write-after-final) did not run, and a clean verdict
	// would claim more than was checked.
	if code == 0 && !cfg.expectViolations && in.Mode == "shared" && !in.LogOK {
		why := rep.StoreLog
		if why == "" {
			why = "not recorded as complete"
		}
		fmt.Fprintf(stdout, "FAIL: the store log is incomplete (%s): its checks did not run; run again\n", why)
		code = 3
	}
	// A run that completed no job or injected no fault tested nothing: it
	// never passes.
	if done := res.States[string(coordinator.StateCompleted)]; done == 0 || nFaults == 0 {
		fmt.Fprintf(stdout, "FAIL: nothing was tested: %d jobs completed, %d faults injected\n", done, nFaults)
		code = 3
	}
	fmt.Fprintln(stdout, summary)
	return code, summary
}

// savedInput is what a run saves for --recheck (besides the histories and
// store.jsonl).
type savedInput struct {
	Mode      string                      `json:"mode"`
	Jobs      map[string]*JobInfo         `json:"jobs"`
	Final     map[string]*coordinator.Job `json:"final"`
	Faults    []*Fault                    `json:"faults"`
	Instances []instance                  `json:"instances"`
	LogOK     bool                        `json:"log_ok"`
	// SlotsLogged: CheckInput's (absent from runs saved before it was).
	SlotsLogged bool      `json:"slots_logged,omitempty"`
	End         time.Time `json:"end"`
	// FinalAt: CheckInput's (absent from runs saved before it was).
	FinalAt time.Time `json:"final_at,omitzero"`
	Plan    []plan    `json:"plan"`
	Lanes   int       `json:"lanes"`
	// QuiesceEnd, Quiesce and QuiesceMax: CheckInput's (absent from runs
	// saved before they were).
	QuiesceEnd string        `json:"quiesce_end,omitempty"`
	Quiesce    time.Duration `json:"quiesce,omitempty"`
	QuiesceMax time.Duration `json:"quiesce_max,omitempty"`
}

// recheck runs the checker again on a saved run.
func recheck(cfg config, stdout io.Writer) (int, error) {
	dir := cfg.recheck
	b, err := os.ReadFile(filepath.Join(dir, "checkinput.json"))
	if err != nil {
		return 3, err
	}
	var si savedInput
	if err := json.Unmarshal(b, &si); err != nil {
		return 3, fmt.Errorf("checkinput.json: %w", err)
	}
	var rep Report
	if b, err := os.ReadFile(filepath.Join(dir, "report.json")); err == nil {
		_ = json.Unmarshal(b, &rep)
	}
	events, torn, err := readHistories(filepath.Join(dir, "history"))
	if err != nil {
		return 3, err
	}
	execLines, err := readExecRuns(filepath.Join(dir, "history", execRunsFile))
	if err != nil {
		return 3, err
	}
	in := &CheckInput{Mode: si.Mode, Jobs: si.Jobs, Final: si.Final, Events: events, Faults: si.Faults, Instances: si.Instances, LogOK: si.LogOK, SlotsLogged: si.SlotsLogged, End: si.End, FinalAt: si.FinalAt,
		QuiesceEnd: si.QuiesceEnd, Quiesce: si.Quiesce, QuiesceMax: si.QuiesceMax, ExecLines: execLines}
	if si.Mode == "shared" {
		in.Log, err = readStoreLog(filepath.Join(dir, "store.jsonl"))
		if err != nil {
			return 3, err
		}
	}
	rep.Out, rep.TornLines, rep.Mode = dir, torn, si.Mode
	code, _ := report(cfg, in, &rep, si.Lanes, time.Now(), stdout)
	return code, nil
}
