package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults of the daemon's flags.
const (
	defaultData            = "./leasehold-data"
	defaultListen          = "127.0.0.1:7420"
	defaultConcurrency     = 20
	defaultShutdownTimeout = 30 * time.Second
	// httpShutdownTimeout bounds the wait for in-flight API requests at
	// stop; long-polls are woken at once.
	httpShutdownTimeout = 5 * time.Second
	// maxConcurrency bounds --concurrency: the worker reserves its slots
	// at start.
	maxConcurrency = 100000
)

type daemonOpts struct {
	data            string
	etcd            etcdFlags
	listen          string
	concurrency     int
	queues          []string
	leaseTTL        time.Duration
	shutdownTimeout time.Duration
	retention       time.Duration
	defaultTimeout  time.Duration
	maxPayload      sizeValue
	minFreeDisk     sizeValue
	execs           []string
	reapInterval    time.Duration
	historyDir      string
	apiToken        string
	apiTokenFile    string
	tlsCert         string
	tlsKey          string
	// --http-write-timeout and --http-max-connections (httpconns.go)
	httpWriteTimeout time.Duration
	httpMaxConns     int
	// token is the API token of --api-token or --api-token-file, read
	// once by validate: the file may be a pipe.
	token string
	// --periodic and --queue-concurrency (periodic.go)
	periodic         []string
	periodicJobs     []coordinator.PeriodicJob
	queueConcurrency map[string]int
}

func newDaemonCmd(g *globalOpts) *cobra.Command {
	cmd, _ := newDaemonCommand(g)
	return cmd
}

// newDaemonCommand returns the daemon command and the options its flags
// set (which `config check` validates).
func newDaemonCommand(g *globalOpts) (*cobra.Command, *daemonOpts) {
	o := &daemonOpts{minFreeDisk: localstore.MinFreeBytesDefault}
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run the daemon: claim and run jobs, serve the HTTP API",
		Long: `Run the daemon. In embedded mode (the default) it owns the Pebble directory
--data (no other process may open it) and re-queues the jobs a previous run
left running. In shared mode (--etcd) any number of daemons share the queues
of one etcd cluster: each holds its running jobs on its own lease, fences
itself when it cannot renew it, and re-queues the jobs of daemons whose lease
expired. Either way it runs
jobs of the built-in kinds (sleep, echo, fail) and of each --exec kind, and
serves the HTTP API and dashboard on --listen. SIGINT, SIGTERM or SIGHUP
stops it gracefully: running jobs get --shutdown-timeout to finish, then
they are interrupted and re-queued. A second signal stops it at once (exit code 1).`,
		Example: `  leasehold daemon --data /var/lib/leasehold --listen 127.0.0.1:7420
  leasehold daemon --exec 'thumbnail=./thumbnail.sh' --exec 'mail=python3 send.py' --concurrency 50`,
		Args: argsBetween(0, 0, "[--data DIR] [--listen ADDR] [--concurrency N] [--exec KIND=COMMAND]..."),
		RunE: action(func(cmd *cobra.Command, _ []string) error { return runDaemon(cmd, g, o) }),
	}
	f := cmd.Flags()
	f.StringVar(&o.data, "data", defaultData, "data directory (embedded mode)")
	addEtcdFlags(cmd, &o.etcd, true)
	f.StringVar(&o.historyDir, "history-dir", "", "fault testing: run the 'history' kind and append every execution event to DIR/WORKER.jsonl")
	_ = f.MarkHidden("history-dir")
	f.DurationVar(&o.reapInterval, "reap-interval", worker.DefaultReapInterval, "shared mode: period of the scan for jobs whose daemon lost its lease (a watch reacts at once; this is the backstop)")
	sharedOnly(cmd, "reap-interval")
	f.StringVar(&o.listen, "listen", defaultListen, "address of the HTTP API and dashboard")
	f.IntVar(&o.concurrency, "concurrency", defaultConcurrency, "jobs run at once")
	f.StringSliceVar(&o.queues, "queues", []string{coordinator.DefaultQueue}, "queues to serve, comma-separated")
	f.DurationVar(&o.leaseTTL, "lease-ttl", coordinator.DefaultLeaseTTL, "session lease TTL (whole seconds, at least 2s)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "how long running jobs may finish at stop before they are interrupted")
	f.DurationVar(&o.retention, "retention", coordinator.DefaultRetention, "how long finished jobs are kept")
	f.DurationVar(&o.defaultTimeout, "default-timeout", 0, "bound on an attempt of a job that sets no timeout (0: none)")
	addMaxPayloadFlag(cmd, &o.maxPayload, "largest job payload accepted (e.g. 1MiB, 256KiB, 65536; default 1MiB embedded, 664KiB on etcd: a job is written twice in one request, under etcd's 1.5MiB limit)")
	f.Var(&o.minFreeDisk, "min-free-disk", "embedded mode: disk space kept free for the jobs the daemon holds; with less free on the disk of --data, new jobs are refused (HTTP 507) while queued and running jobs go on (0: no reserve)")
	f.StringVar(&o.apiToken, "api-token", "", "require this bearer token on every state-changing API request (prefer --api-token-file: a command line shows in ps, and --exec commands inherit LEASEHOLD_API_TOKEN)")
	f.StringVar(&o.apiTokenFile, "api-token-file", "", "read the API token from this file (one line)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "serve the API over HTTPS with this certificate (PEM; with --tls-key)")
	f.StringVar(&o.tlsKey, "tls-key", "", "private key (PEM) of --tls-cert")
	f.DurationVar(&o.httpWriteTimeout, "http-write-timeout", defaultHTTPWriteTimeout, "bound on writing one HTTP response, from its first byte (a long-poll's wait and a backup's copy come before it; 0: the default)")
	f.IntVar(&o.httpMaxConns, "http-max-connections", defaultHTTPMaxConns, fmt.Sprintf("HTTP connections open at once; beyond them %d more serve the health probes only (other requests: 503), and the others wait until one closes (0: the default)", probeConns))
	f.StringArrayVar(&o.execs, "exec", nil, "run jobs of KIND with COMMAND (sh -c; payload on stdin), as KIND=COMMAND; repeatable (LEASEHOLD_EXEC: one per line)")
	f.StringArrayVar(&o.periodic, "periodic", nil, periodicFlagHelp)
	f.StringToIntVar(&o.queueConcurrency, "queue-concurrency", nil, "at most N jobs of a queue at once on this daemon, as QUEUE=N,... (a limit across all daemons: 'leasehold queues limit')")
	return cmd, o
}

// daemonKinds returns the kinds a daemon runs: the built-in ones and each
// --exec (which may replace a built-in one). leaseTTL bounds how long an
// --exec command of a lost run may ignore SIGTERM (execLostGrace; 0: no
// bound beyond execKillGrace); maxRequest is the store's request limit,
// which bounds the checkpoint lines an --exec command writes (0:
// defaultMaxCheckpointLine).
func daemonKinds(execs []string, leaseTTL time.Duration, maxRequest int, log *slog.Logger) (map[string]kindSpec, error) {
	kinds := builtinKinds()
	seen := map[string]bool{}
	for _, s := range execs {
		spec, err := parseExec(s)
		if err != nil {
			return nil, err
		}
		if seen[spec.kind] {
			return nil, usagef("--exec: kind %s is given twice: give each kind one command", spec.kind)
		}
		seen[spec.kind] = true
		if _, ok := kinds[spec.kind]; ok {
			// Allowed (a kind of one's own under a demo kind's name),
			// but said: the payload check of the built-in kind goes too.
			log.Info("--exec replaces a built-in kind", slog.String("kind", spec.kind))
		}
		spec.lostGrace = execLostGrace(leaseTTL)
		spec.maxCheckpoint = maxRequest
		kinds[spec.kind] = kindSpec{handler: execHandler(spec, log)}
	}
	return kinds, nil
}

func (o *daemonOpts) validate() error {
	if err := o.etcd.validate(); err != nil {
		return err
	}
	switch {
	case o.reapInterval <= 0:
		return usagef("--reap-interval %s: want a positive duration such as 10s", o.reapInterval)
	case o.data == "":
		return usagef("--data is empty: pass a data directory")
	case o.concurrency < 1 || o.concurrency > maxConcurrency:
		return usagef("--concurrency %d: want 1 to %d", o.concurrency, maxConcurrency)
	case coordinator.ValidateLeaseTTL(o.leaseTTL) != nil:
		return usagef("--lease-ttl %s: want whole seconds, at least %s", o.leaseTTL, coordinator.MinLeaseTTL)
	case o.shutdownTimeout < 0:
		return usagef("--shutdown-timeout %s is negative: want a duration such as 30s, or 0 to interrupt running jobs at once", o.shutdownTimeout)
	case o.retention <= 0:
		return usagef("--retention %s: want a positive duration such as 24h", o.retention)
	case o.defaultTimeout < 0:
		return usagef("--default-timeout %s is negative: want a duration such as 10m, or 0 for none", o.defaultTimeout)
	case o.httpWriteTimeout < 0:
		return usagef("--http-write-timeout %s is negative: want a duration such as 1m, or 0 for the default", o.httpWriteTimeout)
	case o.httpMaxConns < 0:
		return usagef("--http-max-connections %d is negative: want a number of connections such as %d, or 0 for the default", o.httpMaxConns, defaultHTTPMaxConns)
	}
	if err := checkMaxPayload("--max-payload", o.maxPayload); err != nil {
		return err
	}
	if len(o.queues) == 0 {
		return usagef("--queues is empty: pass at least one queue")
	}
	for _, q := range o.queues {
		if err := coordinator.ValidateQueue(q); err != nil {
			return usagef("--queues: %s", apiserver.CleanCoordError(err))
		}
	}
	_, port, err := net.SplitHostPort(o.listen)
	if err != nil {
		return usagef("--listen %q is not HOST:PORT: use e.g. %s", o.listen, defaultListen)
	}
	// What net.Listen takes: a number up to 65535 (0: any free port) or a
	// service name.
	if _, err := net.LookupPort("tcp", port); err != nil {
		return usagef("--listen %q: bad port %q: want 1 to 65535, 0 for any free port, or a service name such as http: use e.g. %s", o.listen, port, defaultListen)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together: give both or neither")
	}
	token, err := readToken(o.apiToken, o.apiTokenFile, "--")
	if err != nil {
		return err
	}
	o.token = token
	if err := o.validateFeatures(); err != nil {
		return err
	}
	if !o.etcd.shared() {
		// Opening the directory creates it and re-queues the jobs left
		// running: refuse what the coordinator and worker would refuse
		// (a --max-payload over what Pebble takes, say) before that. The
		// daemon opens Pebble with its default transaction limit.
		return checkStoreConfig(kv.Limits{MaxBytes: localstore.MaxTxnBytesDefault}, o.coordConfig(), o.workerConfig(false))
	}
	return nil
}

func runDaemon(cmd *cobra.Command, g *globalOpts, o *daemonOpts) error {
	if err := o.validate(); err != nil {
		return err
	}
	log, err := newLogger(g, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer surviveClosedLog()()
	token := o.token
	var tlsCfg *tls.Config
	if o.tlsCert != "" {
		if tlsCfg, err = loadKeyPair(o.tlsCert, o.tlsKey); err != nil {
			return err
		}
	}
	warnExposedSecrets(cmd, o, log)
	m := apiserver.NewMetrics()
	kinds, err := daemonKinds(o.execs, o.leaseTTL, o.storeRequestLimit(), log)
	if err != nil {
		return err
	}
	if err := o.checkPeriodicKinds(kinds); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	defer onSignals(ctx, cancel, log)()

	// The address first: a port in use fails before the store is opened
	// (an embedded store would be created, and its jobs left running
	// re-queued, by a daemon that cannot serve).
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return failf("cannot listen on %s: %s: stop what uses it or pass another --listen", o.listen, apiserver.OneLine(err.Error()))
	}
	defer func() { _ = ln.Close() }() // the HTTP server closes it too, once it serves
	loopback := loopbackListener(ln)
	lim := o.httpLimits()
	ll := newLimitListener(ln, lim.maxConns, probeConns, log)
	m.Registerer().MustRegister(ll.collectors()...)
	ln = ll
	if token == "" && !loopback {
		log.Warn("the API listens beyond loopback without a token: anyone who reaches it can enqueue and cancel jobs; set --api-token-file", slog.String("listen", o.listen))
	}

	shared := o.etcd.shared()
	if shared {
		if set := ignoredInSharedMode(cmd); len(set) > 0 {
			log.Warn("settings of the embedded store are ignored in shared mode: --data is its directory and --min-free-disk its disk reserve; etcd's quota bounds a shared store (--quota-backend-bytes of its members)", slog.Any("settings", set))
		}
	} else if set := ignoredInEmbeddedMode(cmd); len(set) > 0 {
		log.Warn("settings of shared mode are ignored in embedded mode: no --etcd is set, so the daemon runs on the directory of --data", slog.Any("settings", set), slog.String("data", o.data))
	}
	ccfg := o.coordConfig()
	ccfg.Logger = log
	m.HookCoordinator(&ccfg)

	var store kv.Store
	var backup apiserver.Backuper   // embedded mode: POST /v1/backup
	var storeFailed <-chan struct{} // embedded mode: closed when the store fails
	var storeErr func() error
	if shared {
		cli, es, err := o.etcd.dial(ctx, log)
		if err != nil {
			if ctx.Err() != nil {
				// A signal cut the dial short: a stop, not a failure.
				log.Info("stopped: signal received while connecting to etcd")
				return nil
			}
			return err
		}
		defer func() { _ = cli.Close() }()
		store = m.WrapStore(es, "etcd")
		log.Info("shared mode: connected to etcd", slog.Any("endpoints", o.etcd.endpoints), slog.String("namespace", o.etcd.namespace))
	} else {
		ls, err := localstore.Open(o.data, localstore.Options{Logger: log, MinFreeBytes: o.minFreeBytes()})
		if err != nil {
			if lerr, ok := lockedf(err); ok {
				return lerr
			}
			return failf("cannot open data directory %s: %s", o.data, strings.TrimPrefix(apiserver.OneLine(err.Error()), "localstore: "))
		}
		store = m.WrapStore(ls, "pebble")
		backup = ls
		storeFailed, storeErr = ls.Failed(), ls.Err
		log.Info("store opened", slog.String("dir", ls.Dir()))
	}
	defer func() {
		if err := store.Close(); err != nil {
			log.Error("closing the store failed", slog.Any("err", err))
		}
	}()

	if len(o.execs) > 0 {
		// Once the data directory is this daemon's: the guard of the
		// daemon that had it before may still be killing that one's
		// commands, whose jobs the worker's start re-queues.
		lock := ""
		if !shared {
			lock = filepath.Join(o.data, execGuardLockName)
		}
		stopGuard, err := startExecGuard(ctx, g, cmd.ErrOrStderr(), log, lock)
		if err != nil {
			if ctx.Err() != nil {
				log.Info("stopped: signal received while waiting for an earlier exec guard")
				return nil
			}
			return err
		}
		defer stopGuard()
	} else if !shared {
		// No guard of its own, but an earlier daemon's may still be
		// stopping commands whose jobs the worker's start re-queues
		// (a kind that --exec had given a built-in's name).
		if err := waitForOldGuard(ctx, filepath.Join(o.data, execGuardLockName), log); err != nil {
			if ctx.Err() != nil {
				log.Info("stopped: signal received while waiting for an earlier exec guard")
				return nil
			}
			return err
		}
	}

	coord, err := coordinator.New(store, ccfg)
	if err != nil {
		if errors.Is(err, coordinator.ErrInvalid) {
			return usagef("%s", apiserver.CleanCoordError(err))
		}
		return err
	}
	if err := coord.CheckClusterVersion(ctx); err != nil {
		if ctx.Err() != nil {
			log.Info("stopped: signal received while reading the cluster version")
			return nil
		}
		return failf("%v", apiserver.CleanCoordError(err))
	}

	workerID := coordinator.NewWorkerID()
	var onOutcome func(worker.Outcome)
	if o.historyDir != "" {
		h, err := openHistory(o.historyDir, workerID)
		if err != nil {
			return err
		}
		defer func() { _ = h.close() }()
		kinds["history"] = historyKind(h)
		onOutcome = h.onOutcome
	}
	wcfg := o.workerConfig(shared)
	wcfg.WorkerID, wcfg.OnOutcome, wcfg.Logger = workerID, onOutcome, log
	m.HookWorker(&wcfg)
	w, err := worker.New(coord, wcfg)
	if err != nil {
		if errors.Is(err, coordinator.ErrInvalid) {
			return usagef("%s", apiserver.CleanCoordError(err))
		}
		return err
	}
	for kind, spec := range kinds {
		w.Handle(kind, spec.handler)
	}

	api := apiserver.New(apiserver.Config{
		Coord: coord, Kinds: payloadChecks(kinds), KnownChecks: payloadChecks(builtinKinds()), Shared: shared,
		MaxPayload: coord.MaxPayloadBytes(), Logger: log, WorkerID: w.ID(), Worker: w, Metrics: m,
		Auth: apiserver.AuthConfig{Token: token, LoopbackOnly: loopback}, Backup: backup,
	})
	srv, stopHTTP := newHTTPServer(api, tlsCfg, lim, log)

	// HTTP serves from here on, while the worker starts (a shared daemon
	// waits out an etcd outage there): /healthz answers and /readyz says
	// why the daemon is not ready, so that an orchestrator's probes see
	// it waiting rather than nothing. The "listening" line still comes
	// once the worker runs.
	serveErr := make(chan error, 1)
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
		go func() { serveErr <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { serveErr <- srv.Serve(ln) }()
	}
	started := false
	defer func() {
		if !started {
			stopHTTP()
		}
	}()

	// The session the worker opens in Start derives from Start's context:
	// give it one that outlives the signal, so that a signal leads to the
	// graceful Stop below rather than to a lost session.
	// A store that does not answer (etcd without quorum) is waited out,
	// as a running daemon waits it out: a daemon restarted during an
	// outage comes up once it ends. So is etcd's NOSPACE alarm, which
	// refuses the session's lease until an operator makes room.
	for delay := time.Second; ; delay = min(2*delay, 10*time.Second) {
		err := w.Start(context.WithoutCancel(ctx))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case shared && errors.Is(err, kv.ErrNoSpace):
			// etcd's NOSPACE alarm refuses the session's lease until an
			// operator makes room: waited out too, so that a daemon
			// (re)started under the alarm comes up once it is disarmed.
			log.Warn("cannot start a session: etcd is out of space (its NOSPACE alarm refuses new leases); compact and defragment every member, then disarm the alarm (etcdctl alarm disarm); retrying",
				slog.Any("err", err), slog.Duration("in", delay))
		case shared && storeUnanswered(err):
			log.Warn("cannot start a session: etcd does not answer (no quorum?); retrying", slog.Any("err", err), slog.Duration("in", delay))
		default:
			return failf("starting the worker: %s", apiserver.CleanCoordError(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
	started = true
	m.RegisterWorker(w)
	addr := ln.Addr().String()
	log.Info("listening", slog.String("addr", addr), slog.String("url", scheme+"://"+addr), slog.Bool("api_token", token != ""),
		slog.String("worker", w.ID()), slog.Any("kinds", w.Kinds()), slog.Int("concurrency", o.concurrency))

	var runErr error
	drain, failed := o.shutdownTimeout, false
	select {
	case <-ctx.Done():
		log.Info("stopping: signal received; a second one stops at once")
	case err := <-serveErr:
		runErr = failf("HTTP server failed: %v", err)
		log.Error("HTTP server failed; stopping", slog.Any("err", err))
		cancel() // a signal now stops the daemon at once
	case <-storeFailed:
		// Every call fails from now on, outcomes included: the running
		// jobs cannot be recorded, and a start recovers what was synced
		// and re-queues them. Interrupt them without a drain and stop,
		// so that a supervisor restarts the daemon.
		err := storeErr()
		runErr = storeFailedError(err)
		log.Error("the store failed after a write error; stopping, running jobs are interrupted and re-queued at the next start", slog.String("err", err.Error()))
		drain, failed = 0, true
		cancel()
	}

	// Drain the worker while HTTP goes on serving (/readyz answers 503,
	// long-polls at once; /healthz, /metrics and the API answer, so that
	// a liveness probe does not kill the drain and the operator sees it),
	// then stop taking requests.
	api.Drain()
	wctx, wcancel := context.WithTimeout(context.Background(), drain)
	if err := w.Stop(wctx); err != nil && !failed {
		log.Warn("running jobs did not finish within the shutdown timeout; they were interrupted and re-queued",
			slog.String("shutdown_timeout", o.shutdownTimeout.String()), slog.Any("err", err))
	}
	wcancel()
	stopHTTP()
	select {
	case <-storeFailed:
		// It failed during a signal's drain: the stop did not record
		// everything, and the next start has to know why.
		if runErr == nil {
			runErr = storeFailedError(storeErr())
		}
	default:
	}
	log.Info("stopped")
	return runErr
}

// storeFailedError is the daemon's exit error after its store failed
// with err (localstore.Store.Err).
func storeFailedError(err error) error {
	cause := err
	if u := errors.Unwrap(err); u != nil {
		cause = u
	}
	return failf("the store failed after a write error (%s), and the daemon stopped: mend what it names (a full disk: free space on the disk of --data, and see --min-free-disk), then start the daemon again; nothing acknowledged is lost",
		apiserver.OneLine(cause.Error()))
}

// coordConfig returns the coordinator settings of the daemon's flags,
// without its logger and hooks.
func (o *daemonOpts) coordConfig() coordinator.Config {
	return coordinator.Config{Namespace: o.etcd.namespace, Retention: o.retention, MaxPayloadBytes: int(o.maxPayload)}
}

// workerConfig returns the worker settings of the daemon's flags, without
// its id, logger and hooks.
func (o *daemonOpts) workerConfig(shared bool) worker.Config {
	return worker.Config{
		Concurrency:    o.concurrency,
		Queues:         o.queues,
		DefaultTimeout: o.defaultTimeout,
		LeaseTTL:       o.leaseTTL,
		Maintain:       true,
		// Shared mode: reap the jobs of daemons that lost their lease,
		// and spread claims so daemons do not all race for one job.
		Reap:         shared,
		ReapInterval: o.reapInterval,
		Spread:       shared,
		// Periodic jobs, enqueued while this daemon leads maintenance.
		Periodic:         o.periodicJobs,
		QueueConcurrency: o.queueConcurrency,
	}
}

// limitsOnly is a store that has only limits: coordinator.New and
// worker.New read nothing else, so it checks their settings before the
// real store is opened.
type limitsOnly struct {
	kv.Store
	lim kv.Limits
}

func (s limitsOnly) Limits() kv.Limits { return s.lim }

// checkStoreConfig returns the usage error coordinator.New or worker.New
// would return over a store with limits lim.
func checkStoreConfig(lim kv.Limits, ccfg coordinator.Config, wcfg worker.Config) error {
	ccfg.Logger = slog.New(slog.DiscardHandler)
	coord, err := coordinator.New(limitsOnly{lim: lim}, ccfg)
	if err == nil {
		wcfg.Logger = ccfg.Logger
		_, err = worker.New(coord, wcfg)
	}
	if errors.Is(err, coordinator.ErrInvalid) {
		return usagef("%s", apiserver.CleanCoordError(err))
	}
	return nil
}

// newHTTPServer returns the daemon's HTTP server of a, with the bounds
// of lim (its listener bounds the connections: limitListener), and the
// function that stops it: it takes no more requests, wakes long-polls,
// and gives the requests in flight, and the store read of a /readyz that
// outlived its request, httpShutdownTimeout to finish.
//
// No WriteTimeout: it would count from the request's start, and cut the
// long-polls and backups; each response gets lim's deadline from its
// first byte instead (limitHandler).
func newHTTPServer(a *apiserver.Handler, tlsCfg *tls.Config, lim httpLimits, log *slog.Logger) (*http.Server, func()) {
	srv := &http.Server{
		Handler:           limitHandler(a, lim),
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ConnContext:       connContext,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(a.StopWaits)
	return srv, func() {
		hctx, hcancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		defer hcancel()
		if err := srv.Shutdown(hctx); err != nil {
			log.Warn("HTTP server did not stop cleanly", slog.Any("err", err))
			_ = srv.Close()
		}
		// A /readyz read of a stalled store may outlive its request.
		if err := a.StopProbe(hctx); err != nil {
			log.Warn("HTTP server stopped with a store read still in flight", slog.Any("err", err))
		}
	}
}

// surviveClosedLog keeps a daemon (or an etcd member) alive when what
// reads its log goes away (a pipe to a log shipper that restarts, `| tee`
// ended): Go ends a program whose write to a closed pipe on descriptor 1
// or 2 raises SIGPIPE, unless the program is notified of SIGPIPE, when the
// write fails with EPIPE instead (and the line is lost). Notified, not
// ignored: an ignored signal stays ignored in the --exec commands the
// daemon starts, and shell pipelines there rely on SIGPIPE. The returned
// function stops it.
func surviveClosedLog() func() {
	ch := make(chan os.Signal, 1) // never read: a full channel drops the signal
	signal.Notify(ch, syscall.SIGPIPE)
	return func() { signal.Stop(ch) }
}

// stopSignals are the signals that stop a daemon or an etcd member
// gracefully: SIGINT, SIGTERM and SIGHUP (a terminal that hangs up, an
// ssh session that drops: not a crash), unless SIGHUP was ignored when
// the process started (nohup), which Notify would undo.
func stopSignals() []os.Signal {
	if signal.Ignored(syscall.SIGHUP) {
		return []os.Signal{syscall.SIGINT, syscall.SIGTERM}
	}
	return []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
}

// onSignals cancels the daemon's context (with cancel) at the first SIGINT,
// SIGTERM or SIGHUP. Once ctx is done, a signal ends the process at once,
// with exit code 1 (a stop cut short is a failure; the exit codes are 0, 1 and
// 2), after killing the commands of the running jobs: they run in process
// groups of their own, which the daemon's exit would not reach, and would
// go on beside the runs that replace them. The returned function stops
// watching for signals.
func onSignals(ctx context.Context, cancel context.CancelFunc, log *slog.Logger) func() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals()...)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		case <-done:
			return
		}
		select {
		case sig := <-sigs:
			log.Warn("second signal: forcing the exit at once, with exit code 1; killing the commands of running jobs (their jobs are re-queued as after a crash)", slog.String("signal", sig.String()))
			execGroups.killAll()
			os.Exit(exitFailure)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
		<-exited
	}
}

// embeddedOnly are the daemon's settings of the embedded store, which a
// daemon in shared mode does not read.
var embeddedOnly = []string{"data", "min-free-disk"}

// ignoredInSharedMode names the embedded store's settings that were set
// (--data, --min-free-disk), as the user set them, for a daemon in shared
// mode, which does not read them: each is refused only when it and --etcd
// are both on the command line (checkStore).
func ignoredInSharedMode(cmd *cobra.Command) []string {
	var set []string
	for _, name := range embeddedOnly {
		if flagSource(cmd, name) > 0 {
			set = append(set, flagLabel(cmd, name))
		}
	}
	return set
}

// ignoredInEmbeddedMode names the settings of shared mode that were set
// (see sharedOnly), as the user set them, for a daemon in embedded mode,
// which does not read them: each is refused only when it is on the command
// line (checkSharedOnly).
func ignoredInEmbeddedMode(cmd *cobra.Command) []string {
	var set []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if len(f.Annotations[sharedOnlyAnnotation]) > 0 && flagSource(cmd, f.Name) > 0 {
			set = append(set, flagLabel(cmd, f.Name))
		}
	})
	return set
}

// storeRequestLimit is the request limit of the store the daemon opens:
// etcd's (--etcd-max-request-bytes, less etcdkv's margin) in shared mode,
// Pebble's default transaction limit embedded.
func (o *daemonOpts) storeRequestLimit() int {
	if o.etcd.shared() {
		return o.etcd.storeLimits().MaxBytes
	}
	return localstore.MaxTxnBytesDefault
}

// minFreeBytes is --min-free-disk as localstore.Options.MinFreeBytes,
// where 0 would mean the default: 0 is no reserve.
func (o *daemonOpts) minFreeBytes() int64 {
	if o.minFreeDisk == 0 {
		return -1
	}
	return int64(o.minFreeDisk)
}

// sizeValue is a byte size flag: 1048576, 1MiB, 512KiB, 2MB, ...
type sizeValue int

// maxSize is the largest size a sizeValue takes.
const maxSize = 1 << 40

// errSizeTooLarge is a size over maxSize: a size all the same, which "not
// a size" would misname.
var errSizeTooLarge = errors.New("over 1024GiB, the largest size accepted: give a smaller one")

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
}

func (s sizeValue) String() string {
	n := int64(s)
	switch {
	case n > 0 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n > 0 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10)
}

func (s *sizeValue) Set(v string) error {
	v = strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(strings.ToUpper(v), strings.ToUpper(u.suffix)) {
			v, mult = strings.TrimSpace(v[:len(v)-len(u.suffix)]), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if (err == nil && n > maxSize/mult) || (errors.Is(err, strconv.ErrRange) && n > 0) {
		return errSizeTooLarge
	}
	if err != nil || n < 0 {
		return fmt.Errorf("not a size: use e.g. 1MiB, 256KiB or a number of bytes")
	}
	*s = sizeValue(n * mult)
	return nil
}

func (s *sizeValue) Type() string { return "size" }

// storeUnanswered reports whether err is etcd not answering in time (a
// cluster without quorum, a member that hangs), which ends.
func storeUnanswered(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, etcdkv.ErrNoAnswer) || errors.Is(err, coordinator.ErrSessionExpired)
}
