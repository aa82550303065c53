package apiserver

// The HTTP API of the daemon. Every request and response body is JSON
// (except /metrics and the dashboard at /); a job is always exactly
// coordinator.Job's JSON. Single jobs and lists come in an envelope:
//
//	POST /v1/jobs                 body: CreateRequest
//	    201 {"job":JOB,"existed":false}   the job was inserted
//	    200 {"job":JOB,"existed":true}    its unique_key matched a live job,
//	                                      which is returned; nothing written
//	POST /v1/jobs/batch           body: {"jobs":[CreateRequest,...]}
//	    201 {"jobs":[JOB,...],"existed":[bool,...]}   in request order;
//	                                      200 if every job already existed
//	GET  /v1/jobs                 ?state=&kind=&queue=&limit=&after=
//	    200 {"jobs":[JOB,...],"next":"CURSOR"}  next is absent on the last
//	                                      page; pass it as after=
//	GET  /v1/jobs/{id}            ?wait=DURATION (long-poll, at most 5m)
//	    200 {"job":JOB}  at once, or once the job is final, or when the
//	                     wait expires (check job.state)
//	POST /v1/jobs/{id}/cancel
//	    200 {"job":JOB}  cancelled, or cancel_requested for a running job
//	GET  /v1/workers       200 {"workers":[WORKER,...]}
//	GET  /v1/stats         200 {"counts":{"scheduled":N,...},"total":N}
//	GET  /v1/health        200 {"status":"ok"}   (also GET /healthz)
//	POST /v1/backup        body: {"dir":"/abs/path"}   (embedded mode; backup.go)
//	    200 {"revision":N,"created_at":...,"source":...,"dir":...}
//
// and the operations of ops_api.go (retry, delete, bulk cancel, queues,
// periodic jobs).
//	GET  /readyz           200 {"status":"ready",...} or 503 {"status":"unready",
//	                       "error":...}: store reachable, session lease valid
//	                       with margin (health.go)
//	GET  /metrics          Prometheus text format (metrics.go)
//	GET  /, /jobs, /jobs/{id}   HTML dashboard (dashboard.go)
//
// With a token (--api-token), every request but GET, HEAD and OPTIONS needs
// "Authorization: Bearer TOKEN" (401 otherwise); cross-origin browser
// requests that change state and, on a loopback listener, requests for a
// Host that is not loopback are refused with 403 (auth.go).
//
// A CreateRequest is
//
//	{"kind":"sleep","payload":{"ms":100},"queue":"default","priority":1,
//	 "scheduled_at":"2030-01-02T15:04:05Z" | "delay":"90s",
//	 "max_attempts":25,"timeout":"30s","unique_key":"...",
//	 "unique":{"by_args":true,"by_queue":true,"by_period":"1h",
//	           "by_state":["completed"]},"metadata":{...}}
//
// where only kind is required. Unknown fields are refused, and field
// names match exactly; so are unknown query parameters and repeated ones.
//
// Errors are {"error":"one line saying what was wrong and what to do"} with
// 400 for bad input (malformed JSON or text not UTF-8, unknown field,
// unknown kind or state, bad or empty id, oversized payload), 413 for a
// body over the size limit, 404 for an unknown job or endpoint (a path
// with an empty segment included: no redirect), 405 for a wrong method,
// 409 for an operation the job's state does not allow, 503 with
// Retry-After when the store did not answer within storeTimeout (a write's
// outcome is then unknown), 500 otherwise. A refused request writes
// nothing.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/jsontext"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	segjson "github.com/segmentio/encoding/json"
)

// Limits of the API.
const (
	// bodyOverhead is allowed on top of the payload and metadata limits
	// for the other fields of a create request.
	bodyOverhead = 64 << 10
	// MinBatchBody is the least body size a batch may have (clients size
	// their batches below it).
	MinBatchBody = 32 << 20
	// maxBatchJobs bounds the jobs of one batch request.
	maxBatchJobs = 10000
	// maxWait bounds the long-poll of GET /v1/jobs/{id}?wait=.
	maxWait = 5 * time.Minute
	// waitWatches bounds the long-polls that watch the store at once
	// (Config.WaitWatches): a watch wakes at every write of the store,
	// so that many of them, which anyone who may read can open, would
	// slow every write. The others read their job every waitPoll.
	waitWatches = 256
	// storeTimeout bounds the store work of one API or dashboard request
	// (a long-poll's wait is bounded by maxWait instead), so that requests
	// made while the store does not answer (etcd without quorum) end with
	// a 503 rather than pile up for the whole outage.
	storeTimeout = 10 * time.Second
	// retryAfter is the Retry-After (seconds) of a request whose store
	// work timed out.
	retryAfter = "5"
)

// waitPoll is how often a long-poll beyond Config.WaitWatches reads its
// job (a variable for tests).
var waitPoll = time.Second

// errStoreTimeout is the cause of a request context whose store deadline
// (storeTimeout) passed.
var errStoreTimeout = errors.New("the store did not answer in time")

// CreateRequest is one job to enqueue, as the API takes it.
type CreateRequest struct {
	Kind        string          `json:"kind"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Queue       string          `json:"queue,omitempty"`
	Priority    *int            `json:"priority,omitempty"`
	ScheduledAt string          `json:"scheduled_at,omitempty"`
	Delay       string          `json:"delay,omitempty"`
	MaxAttempts *int            `json:"max_attempts,omitempty"`
	Timeout     string          `json:"timeout,omitempty"`
	UniqueKey   string          `json:"unique_key,omitempty"`
	Unique      *UniqueRequest  `json:"unique,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
}

// BatchRequest is the body of POST /v1/jobs/batch.
type BatchRequest struct {
	Jobs []CreateRequest `json:"jobs"`
}

// CreateResponse answers POST /v1/jobs.
type CreateResponse struct {
	Job     *coordinator.Job `json:"job"`
	Existed bool             `json:"existed"`
}

// BatchResponse answers POST /v1/jobs/batch.
type BatchResponse struct {
	Jobs    []*coordinator.Job `json:"jobs"`
	Existed []bool             `json:"existed"`
}

// JobResponse answers the requests about one job.
type JobResponse struct {
	Job *coordinator.Job `json:"job"`
}

// WorkersResponse answers GET /v1/workers.
type WorkersResponse struct {
	Workers []coordinator.WorkerInfo `json:"workers"`
}

// StatsResponse answers GET /v1/stats.
type StatsResponse struct {
	Counts map[coordinator.State]int `json:"counts"`
	Total  int                       `json:"total"`
}

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	Error string `json:"error"`
}

// PayloadCheck checks the payload of a job of one kind at enqueue, so
// that a payload its handler could never accept is refused (400) before
// anything is written. Its error says what is wrong with the payload.
type PayloadCheck func(payload json.RawMessage) error

// Config configures the API.
type Config struct {
	Coord *coordinator.Coordinator
	// Kinds the daemon runs, with their payload checks (a nil check: any
	// JSON). Enqueueing any other kind is refused, unless Shared is set.
	Kinds map[string]PayloadCheck
	// KnownChecks are the payload checks of kinds the other daemons of
	// the namespace may run (the built-in ones), for the kinds that
	// Shared accepts beyond Kinds (none: any JSON).
	KnownChecks map[string]PayloadCheck
	// Shared (shared mode) also accepts the kinds of every live daemon of
	// the namespace, and any kind while no daemon is live: jobs wait for
	// a daemon that knows them.
	Shared bool
	// LiveKinds accepts kinds as Shared does, in a program whose store
	// (Pebble or etcd) the API does not know: its messages name both.
	LiveKinds bool
	// MaxPayload is the coordinator's payload limit, in bytes.
	MaxPayload int
	// CLI: the in-process API of a shared-mode CLI command, with no
	// daemon behind it: its errors say what to do on the command line.
	CLI    bool
	Logger *slog.Logger
	// WorkerID names the daemon's own worker on the dashboard.
	WorkerID string
	// Worker is the daemon's worker, for /readyz and its metrics; nil
	// for the in-process API of a CLI command.
	Worker *worker.Worker
	// Metrics receives the daemon's metrics; nil: a registry of the
	// API's own.
	Metrics *Metrics
	// Auth guards state-changing requests (see auth.go).
	Auth AuthConfig
	// Backup takes backups for POST /v1/backup: the embedded daemon's
	// store; nil in shared mode (backup.go).
	Backup Backuper
	// Prefix is the path the API is served under, such as "/leasehold"
	// ("": the root). ServeHTTP strips it from each request (a path
	// outside it is a 404), and the dashboard's links are relative to it.
	Prefix string
	// NoBackup is the error of POST /v1/backup without Backup (""
	// SharedBackupHint).
	NoBackup string
	// StoreTimeout bounds the store work of one request (0: 10s; none
	// for the in-process API of a CLI command, whose calls have the CLI's
	// own bound).
	StoreTimeout time.Duration
	// ReadyTimeout bounds the store read of one /readyz (0: 2s).
	ReadyTimeout time.Duration
	// WaitWatches bounds the long-polls of GET /v1/jobs/{id}?wait= that
	// watch the store at once (0: 256); the others read their job every
	// second instead.
	WaitWatches int
}

// Handler serves the HTTP API. It is an http.Handler.
type Handler struct {
	cfg       Config
	kindNames []string
	mux       *http.ServeMux
	log       *slog.Logger
	m         *Metrics
	// waits is done once StopWaits is called (at the daemon's stop):
	// long-polls then answer at once.
	waits     context.Context
	stopWaits context.CancelFunc
	// draining is set by Drain: /readyz answers 503.
	draining atomic.Bool
	// probe reads the store for /readyz (health.go).
	probe *storeProbe
	// watchSlots holds a token per long-poll that watches the store
	// (Config.WaitWatches).
	watchSlots chan struct{}
	// counts runs the counts of GET /v1/stats one at a time (stats.go).
	counts *sharedCounts
}

// New returns the API of cfg.
func New(cfg Config) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = coordinator.DefaultMaxPayloadBytes
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.StoreTimeout <= 0 {
		cfg.StoreTimeout = storeTimeout
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = readyTimeout
	}
	if cfg.WaitWatches <= 0 {
		cfg.WaitWatches = waitWatches
	}
	a := &Handler{cfg: cfg, mux: http.NewServeMux(), log: cfg.Logger, m: cfg.Metrics}
	a.watchSlots = make(chan struct{}, cfg.WaitWatches)
	a.counts = &sharedCounts{count: cfg.Coord.Counts, timeout: cfg.StoreTimeout}
	a.waits, a.stopWaits = context.WithCancel(context.Background())
	a.probe = newStoreProbe(cfg.Coord.Store(), cfg.ReadyTimeout)
	a.kindNames = SortedKeys(cfg.Kinds)
	if a.m.jobs {
		a.m.RegisterJobs(cfg.Coord, cfg.Logger)
	}

	a.mux.HandleFunc("POST /v1/jobs", a.createJob)
	a.mux.HandleFunc("POST /v1/jobs/batch", a.createBatch)
	a.mux.HandleFunc("GET /v1/jobs", a.listJobs)
	a.mux.HandleFunc("GET /v1/jobs/{id}", a.getJob)
	a.mux.HandleFunc("POST /v1/jobs/{id}/cancel", a.cancelJob)
	a.mux.HandleFunc("GET /v1/workers", a.listWorkers)
	a.mux.HandleFunc("GET /v1/stats", a.stats)
	a.mux.HandleFunc("POST /v1/backup", a.backup)
	a.mux.HandleFunc("GET /v1/health", a.health)
	a.mux.HandleFunc("GET /healthz", a.health)
	a.mux.HandleFunc("GET /readyz", a.ready)
	a.mux.Handle("GET /metrics", promhttp.HandlerFor(a.m.reg, promhttp.HandlerOpts{}))
	a.routeDashboard()
	a.routeOps()
	return a
}

// StopWaits wakes the long-polls of GET /v1/jobs/{id}?wait= in flight
// and to come: they answer at once with the job as it is. The daemon
// calls it when it stops.
func (a *Handler) StopWaits() { a.stopWaits() }

// Drain says that the worker is stopping: /readyz answers 503 (so that
// a load balancer sends requests elsewhere) while /healthz, /metrics, the
// API and the dashboard go on serving through the drain, and the
// long-polls answer at once (StopWaits). The daemon calls it at its first
// signal, before it stops the worker; the HTTP server stops after.
func (a *Handler) Drain() {
	a.draining.Store(true)
	a.stopWaits()
}

// StopProbe cancels the store reads that may outlive their requests while
// the store stalls (the read of /readyz, the count that requests of
// /v1/stats share), starts no other, and waits for them to return until
// ctx is done.
func (a *Handler) StopProbe(ctx context.Context) error {
	return errors.Join(a.probe.stop(ctx), a.counts.stop(ctx))
}

// ServeHTTP routes r, answers the mux's own 404 and 405 in JSON, and
// counts and logs the request.
func (a *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Prefix != "" {
		rest, ok := strings.CutPrefix(r.URL.Path, a.cfg.Prefix)
		if !ok || (rest != "" && rest[0] != '/') {
			WriteError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s %s: the API is served under %s/", r.Method, TruncateString(r.URL.Path, 200), a.cfg.Prefix))
			return
		}
		r2 := new(http.Request)
		*r2 = *r
		r2.URL = new(url.URL)
		*r2.URL = *r.URL
		r2.URL.Path, r2.URL.RawPath = cmp.Or(rest, "/"), ""
		r = r2
	}
	start := time.Now()
	_, route := a.mux.Handler(r)
	rw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	var out http.ResponseWriter = rw
	if route == "" {
		route = "unmatched"
		out = &jsonFallback{statusWriter: rw, r: r}
	}
	switch {
	case !a.guard(out, r):
	case a.refuseUnclean(rw, r):
		route = "unmatched"
	default:
		if !a.cfg.CLI && !unboundedRoutes[route] {
			ctx, cancel := context.WithTimeoutCause(r.Context(), a.cfg.StoreTimeout, errStoreTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		a.mux.ServeHTTP(out, r)
	}
	a.m.observeRequest(route, rw.code, time.Since(start))
	a.log.Debug("http request", slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.Int("status", rw.code), slog.Duration("took", time.Since(start)))
}

// refuseUnclean answers a path with an empty segment (or a . or ..
// segment) with a JSON error, unless it is a dashboard page's, and reports
// whether it did. The mux would redirect it to the cleaned path: for
// POST /v1/jobs//cancel, to the bulk cancel, and without a JSON body.
func (a *Handler) refuseUnclean(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	clean := cleanURLPath(p)
	if clean == p {
		return false
	}
	if !strings.HasPrefix(clean, "/v1/") && safeMethod(r.Method) {
		c := r.Clone(r.Context())
		c.URL.Path = clean
		if _, pattern := a.mux.Handler(c); strings.HasPrefix(pattern, "GET /jobs") || pattern == "GET /{$}" {
			return false // a browser follows the redirect to the page
		}
	}
	if rest, ok := strings.CutPrefix(p, "/v1/jobs/"); ok && (rest == "" || strings.HasPrefix(rest, "/")) {
		a.fail(w, r, badRequest("empty job id in %s %s: put the job's id between /v1/jobs/ and what follows", r.Method, TruncateString(p, 200)))
		return true
	}
	WriteError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s %s: the path has an empty, . or .. segment; use e.g. /v1/jobs", r.Method, TruncateString(p, 200)))
	return true
}

// cleanURLPath is p as net/http's ServeMux cleans it before routing: no
// empty, . or .. segments, a trailing slash kept.
func cleanURLPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// unboundedRoutes get no storeTimeout in ServeHTTP: /readyz and
// /metrics have budgets of their own, the health checks read nothing, a
// backup copies the local store and a bulk cancel goes through the whole
// backlog in transactions of its own (however long either takes: the CLI
// waits an hour for a bulk cancel), and GET /v1/jobs/{id} bounds its
// long-poll and its read itself (getJob).
var unboundedRoutes = map[string]bool{
	"GET /readyz": true, "GET /metrics": true, "GET /healthz": true, "GET /v1/health": true,
	"POST /v1/backup": true, "POST /v1/jobs/cancel": true, "GET /v1/jobs/{id}": true,
}

// storeTimedOut reports whether the store deadline of r's context passed.
func storeTimedOut(r *http.Request) bool {
	return errors.Is(context.Cause(r.Context()), errStoreTimeout)
}

// timeoutMessage says that the store work of r timed out, and, for a
// request that writes, that its outcome is unknown.
func (a *Handler) timeoutMessage(r *http.Request) string {
	why := "the data directory's disk stalled?"
	switch {
	case a.cfg.Shared:
		why = "etcd unreachable or without quorum?"
	case a.cfg.LiveKinds:
		why = "etcd unreachable or without quorum, or the data directory's disk stalled?"
	}
	msg := fmt.Sprintf("the store did not answer within %s (%s)", a.cfg.StoreTimeout, why)
	if u := UnknownOutcome(r.Method, r.URL.Path); u != "" {
		return msg + ": " + u
	}
	return msg + ": retry later"
}

// UnknownOutcome says what to do about a change (method and path) that
// got no answer: it may or may not have been made. It is "" for a read,
// which can simply be sent again.
func UnknownOutcome(method, path string) string {
	switch {
	case safeMethod(method):
		return ""
	case path == "/v1/jobs" || path == "/v1/jobs/batch":
		return "the outcome is unknown, the job may or may not have been enqueued: retry later with the same unique_key (without one, a retry may enqueue it twice), or list the jobs first"
	}
	return "the outcome is unknown, the change may or may not have been made: check, then retry later"
}

// statusWriter records the status code of a response.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// jsonFallback turns the mux's plain-text 404 and 405 into JSON errors.
type jsonFallback struct {
	*statusWriter
	r         *http.Request
	swallowed bool
}

func (j *jsonFallback) WriteHeader(code int) {
	switch code {
	case http.StatusNotFound:
		j.swallowed = true
		WriteError(j.statusWriter, code, fmt.Sprintf("no endpoint %s %s: the API is under /v1/ (jobs, workers, stats, health, queues, periodic, backup)", j.r.Method, j.r.URL.Path))
	case http.StatusMethodNotAllowed:
		j.swallowed = true
		WriteError(j.statusWriter, code, fmt.Sprintf("method %s is not allowed on %s: use %s", j.r.Method, j.r.URL.Path, j.Header().Get("Allow")))
	default:
		j.statusWriter.WriteHeader(code)
	}
}

func (j *jsonFallback) Write(p []byte) (int, error) {
	if j.swallowed {
		return len(p), nil
	}
	return j.statusWriter.Write(p)
}

// apiError is an error with its HTTP status.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, a ...any) error {
	return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, a...)}
}

// CleanCoordError strips the coordinator's sentinel prefixes from an error
// message, leaving what was wrong.
func CleanCoordError(err error) string {
	s := err.Error()
	for _, p := range []string{coordinator.ErrInvalid.Error() + ": ", "coordinator: "} {
		s = strings.ReplaceAll(s, p, "")
	}
	return OneLine(s)
}

// OneLine collapses line breaks and runs of blanks so that an error is one
// line whatever its source.
func OneLine(s string) string {
	s = strings.TrimSpace(s)
	if !strings.ContainsAny(s, "\r\n\t") {
		return s
	}
	return strings.Join(strings.Fields(strings.NewReplacer("\r\n", "; ", "\n", "; ", "\r", "; ").Replace(s)), " ")
}

// fail answers err with its status.
func (a *Handler) fail(w http.ResponseWriter, r *http.Request, err error) { a.failWith(w, r, err, nil) }

// failWith answers err with its status, its message in the JSON that
// answer returns (nil: ErrorResponse), for an endpoint whose error answer
// says more (what a bulk cancel did before it failed).
func (a *Handler) failWith(w http.ResponseWriter, r *http.Request, err error, answer func(msg string) any) {
	write := func(status int, msg string) {
		if answer == nil {
			WriteError(w, status, msg)
			return
		}
		WriteJSON(w, status, answer(OneLine(msg)))
	}
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		write(ae.status, ae.msg)
	case errors.Is(err, coordinator.ErrInvalid):
		write(http.StatusBadRequest, CleanCoordError(err))
	case errors.Is(err, coordinator.ErrNotFound):
		write(http.StatusNotFound, CleanCoordError(err))
	case errors.Is(err, coordinator.ErrWrongState), errors.Is(err, coordinator.ErrConflict):
		write(http.StatusConflict, CleanCoordError(err))
	case errors.Is(err, coordinator.ErrEnqueueRefused):
		// The program's enqueue hook refused the job (its error or its
		// panic): nothing was written, and the same request is refused
		// again. Not a 5xx, which the clients read as in doubt.
		write(http.StatusUnprocessableEntity, CleanCoordError(err))
	case errors.Is(err, kv.ErrTxnTooLarge):
		// The limits checked before sending said it fits: the store's
		// own is lower than this process was told. Nothing was written.
		hint := "the store's limit is lower than this daemon's: see its log"
		if a.cfg.Shared {
			hint = "the etcd servers' --max-request-bytes is below the --etcd-max-request-bytes given here: pass their value (and a --max-payload that fits it), or send less"
		}
		write(http.StatusRequestEntityTooLarge, "the store refused the request as too large: "+hint)
		a.log.Warn("the store refused a request as too large", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("err", err))
	case errors.Is(err, kv.ErrNoSpace):
		// Nothing was written: say why, and what frees room. Not logged
		// per request: the store logs the change (localstore), or the
		// daemon's own writes fail and log (etcd's NOSPACE alarm).
		write(http.StatusInsufficientStorage, a.noSpaceMessage(err))
	case errors.Is(err, etcdkv.ErrNoAnswer):
		// A write that an etcd member did not answer (it may hang): it
		// may have been applied, and the next request goes elsewhere.
		w.Header().Set("Retry-After", retryAfter)
		msg := "an etcd member did not answer in time (it may hang, and the next request goes to another; or the cluster lost its quorum)"
		if u := UnknownOutcome(r.Method, r.URL.Path); u != "" {
			msg += ": " + u
		} else {
			msg += ": retry"
		}
		write(http.StatusServiceUnavailable, msg)
		if !a.cfg.CLI {
			a.log.Warn("request got no answer from an etcd member", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("err", err))
		}
	case a.cfg.CLI && errors.Is(r.Context().Err(), context.DeadlineExceeded):
		msg := "etcd did not answer in time: " + checkEtcd
		if u := UnknownOutcome(r.Method, r.URL.Path); u != "" {
			msg = "etcd did not answer in time (check the etcd endpoints, --etcd, and that the cluster is healthy): " + u
		}
		write(http.StatusServiceUnavailable, msg)
	case a.cfg.CLI && r.Context().Err() != nil:
		write(http.StatusServiceUnavailable, "interrupted")
	case storeTimedOut(r):
		w.Header().Set("Retry-After", retryAfter)
		write(http.StatusServiceUnavailable, a.timeoutMessage(r))
	case r.Context().Err() != nil:
		// The client went away or the daemon is stopping.
		write(http.StatusServiceUnavailable, "request cancelled: the client disconnected or the daemon is stopping")
	case a.cfg.CLI:
		write(http.StatusInternalServerError, CleanCoordError(err)+": "+checkEtcd)
	default:
		a.log.Error("request failed", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("err", err))
		write(http.StatusInternalServerError, CleanCoordError(err)+": see the daemon's log")
	}
}

// noSpaceMessage says why a store out of space refused a request, and what
// frees room.
func (a *Handler) noSpaceMessage(err error) string {
	if a.cfg.Shared {
		return "etcd is out of space (over its --quota-backend-bytes, its NOSPACE alarm refuses every write but deletes, running jobs' outcomes too; a write that took it over its quota was applied all the same, so retry an enqueue with the same unique_key): compact and defragment every member (etcdctl compact, etcdctl defrag --cluster) or raise their --quota-backend-bytes, then disarm the alarm (etcdctl alarm disarm); the daemons resume on their own"
	}
	msg := "the daemon's disk is short of space"
	if se := (*localstore.SpaceError)(nil); errors.As(err, &se) {
		msg += " (" + se.Short() + ", --min-free-disk)"
	}
	return msg + ", and it takes no new jobs; nothing was written: free space on that disk (finished jobs are deleted after --retention; a shorter one frees room sooner), or lower --min-free-disk; the jobs already queued still run"
}

// checkEtcd is what to do about a store failure of a shared-mode CLI
// command.
const checkEtcd = "check the etcd endpoints (--etcd) and that the cluster is healthy, then retry"

// payloadHint is what to do about a payload over the limit.
func (a *Handler) payloadHint() string {
	if a.cfg.CLI {
		return "send a smaller payload (or, if the cluster runs with a larger --max-payload, pass it as --max-payload; if the etcd servers run with a larger --max-request-bytes, pass that as --etcd-max-request-bytes)"
	}
	if a.cfg.Shared {
		return "send a smaller payload (or raise the daemons' --max-payload, which past 664KiB needs the etcd servers' --max-request-bytes raised and passed to the daemons as --etcd-max-request-bytes)"
	}
	return "send a smaller payload (or raise the daemon's --max-payload)"
}

// WriteError answers with status and the JSON error msg, on one line.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, ErrorResponse{Error: OneLine(msg)})
}

// WriteJSON answers with status and v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorResponse{Error: "cannot encode response: " + err.Error()})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	// A payload is anyone's text: no browser may take the JSON for a page.
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// bodySpec describes the JSON body of an endpoint, so that decodeBody's
// errors name that endpoint's own fields and limit.
type bodySpec struct {
	limit   int64
	fields  string // "the fields are ..." after an unknown field
	example string // a body to send, after an empty one
	tooBig  string // what to do about a body over limit
}

// jsonFields lists the JSON names of the fields of struct v, in order.
func jsonFields(v any) string {
	var names []string
	for name := range jsonNames(reflect.TypeOf(v)) {
		names = append(names, name)
	}
	return strings.Join(names, ", ")
}

// jsonNames yields the JSON name and the field of each field of struct t
// that encoding/json decodes, in order.
func jsonNames(t reflect.Type) iter.Seq2[string, reflect.StructField] {
	return func(yield func(string, reflect.StructField) bool) {
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if !yield(cmp.Or(name, f.Name), f) {
				return
			}
		}
	}
}

// optional reports a field that a request may leave out (omitempty).
func optional(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	return slices.Contains(strings.Split(opts, ","), "omitempty")
}

// jobLimit bounds the JSON of one create request: room for the largest
// payload and metadata the coordinator takes, and the other fields.
func (a *Handler) jobLimit() int64 {
	return int64(a.cfg.MaxPayload) + coordinator.MaxMetadataBytes + bodyOverhead
}

// createBody is the body of POST /v1/jobs.
func (a *Handler) createBody() bodySpec {
	return bodySpec{
		limit:   a.jobLimit(),
		fields:  "the fields are " + jsonFields(CreateRequest{}),
		example: `{"kind":"echo","payload":{}}`,
		tooBig:  fmt.Sprintf("a job's payload may be at most %d bytes: %s", a.cfg.MaxPayload, a.payloadHint()),
	}
}

// batchBody is the body of POST /v1/jobs/batch.
func (a *Handler) batchBody() bodySpec {
	return bodySpec{
		limit:   a.batchLimit(),
		fields:  "the field is jobs, a list of jobs whose fields are " + jsonFields(CreateRequest{}),
		example: `{"jobs":[{"kind":"echo","payload":{}}]}`,
		tooBig:  "send a smaller payload or fewer jobs per batch",
	}
}

// decodeBody decodes one JSON object of at most spec.limit bytes into v,
// refusing unknown fields (names match exactly), trailing data and text
// that is not UTF-8.
func decodeBody(w http.ResponseWriter, r *http.Request, spec bodySpec, v any) error {
	if r.ContentLength > spec.limit {
		// Refused before a byte is read, so that a client waiting for
		// "100 Continue" (curl does, for large bodies) is answered
		// rather than have its connection reset mid-upload.
		return bodyError(&http.MaxBytesError{Limit: spec.limit}, spec)
	}
	r.Body = http.MaxBytesReader(w, r.Body, spec.limit)
	// Read whole (the decoder would buffer the object anyway) to check
	// the encoding first: encoding/json turns a string's invalid UTF-8
	// into U+FFFD without a word, so that two different unique keys
	// would become one, and keeps a payload's raw, so that the job's JSON
	// is not JSON to stricter clients.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(err, spec)
	}
	if at := InvalidUTF8(body); at >= 0 {
		return badRequest("request body is not valid UTF-8 (at byte %d): send JSON text in UTF-8, with binary data encoded (base64 or hex, say)", at)
	}
	if at := jsontext.LoneSurrogate(body); at >= 0 {
		// encoding/json reads it as U+FFFD: two unique keys would become
		// one, and a payload kept raw would be refused by strict readers.
		return badRequest("%s", jsontext.LoneSurrogateError("request body", at))
	}
	// The field names first (of a body that parses): an unknown field in
	// a nested object is then named with that object's fields.
	var whole *wholeFieldError
	if err := exactFields(body, reflect.TypeOf(v), ""); errors.As(err, &whole) {
		return badRequest("%s", err)
	} else if err != nil {
		return badRequest("%s: %s", err, spec.fields)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err, spec)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("request body has more after its JSON object: send exactly one object")
	}
	return nil
}

// wholeFieldError is an error of exactFields whose message needs no list
// of the body's fields after it: an unknown field of a nested object
// (it names that object's fields), an empty field.
type wholeFieldError struct{ msg string }

func (e *wholeFieldError) Error() string { return e.msg }

// exactFields refuses a key of the JSON object data that is not exactly
// the name of a field of t (nor of its nested objects): encoding/json
// also takes "KIND" for "kind", so that a misspelt field would be taken
// for another. where prefixes the field's name in the error.
func exactFields(data []byte, t reflect.Type, where string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if segjson.Unmarshal(data, &obj) != nil || obj == nil {
			return nil // null, or not an object: decoded already
		}
		if k, ok := repeatedKey(data); ok {
			// Decoding keeps the last; a proxy or a log may read the first.
			return fmt.Errorf("field %q is given twice: give each field once", where+k)
		}
		fields := maps.Collect(jsonNames(t))
		for _, k := range SortedKeys(obj) {
			f, ok := fields[k]
			if !ok {
				for name := range fields {
					if strings.EqualFold(name, k) {
						return fmt.Errorf("unknown field %q (names are case-sensitive: %s)", where+k, where+name)
					}
				}
				if where != "" {
					names := SortedKeys(fields)
					return &wholeFieldError{fmt.Sprintf("unknown field %q: the fields of %s are %s", where+k, strings.TrimSuffix(where, "."), strings.Join(names, ", "))}
				}
				return fmt.Errorf("unknown field %q", where+k)
			}
			if f.Type.Kind() == reflect.String && optional(f) && string(bytes.TrimSpace(obj[k])) == `""` {
				// Read as left out, it would quietly mean the default:
				// a filter that matches everything, a job without its
				// unique key, a job that runs now.
				return &wholeFieldError{fmt.Sprintf("field %q is empty: leave it out, or give a value", where+k)}
			}
			if err := exactFields(obj[k], f.Type, where+k+"."); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return nil // a json.RawMessage: any JSON
		}
		var arr []json.RawMessage
		if segjson.Unmarshal(data, &arr) != nil {
			return nil
		}
		for i, x := range arr {
			if err := exactFields(x, t.Elem(), fmt.Sprintf("%s[%d].", strings.TrimSuffix(where, "."), i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// repeatedKey returns a key that the JSON object data has more than once
// (spelled the same; data is a valid object).
func repeatedKey(data []byte) (string, bool) {
	// A tokenizer, not a Decoder: a job's payload is skipped over in
	// place, not copied (a batch of large jobs spent more time here
	// than in its store write).
	seen := map[string]bool{}
	for t := segjson.NewTokenizer(data); t.Next(); {
		if t.Depth != 1 || !t.IsKey {
			continue
		}
		k := string(t.String())
		if seen[k] {
			return k, true
		}
		seen[k] = true
	}
	return "", false
}

// InvalidUTF8 returns the offset of the first byte of b that is not valid
// UTF-8, or -1.
func InvalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

func bodyError(err error, spec bodySpec) error {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return &apiError{status: http.StatusRequestEntityTooLarge,
			msg: fmt.Sprintf("request body is over the %d-byte limit: %s", spec.limit, spec.tooBig)}
	case errors.Is(err, io.EOF):
		return badRequest("request body is empty: send a JSON object such as %s", spec.example)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("request body is truncated JSON: send a complete JSON object")
	case errors.As(err, &se):
		return badRequest("request body is not valid JSON (at byte %d: %s): send a JSON object", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.As(err, &te):
		if te.Field == "" {
			return badRequest("request body is a JSON %s: send a JSON object such as %s", te.Value, spec.example)
		}
		return badRequest("field %q is a JSON %s: want %s", te.Field, te.Value, JSONTypeName(te.Type.String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("%s: %s", strings.TrimPrefix(err.Error(), "json: "), spec.fields)
	}
	return badRequest("cannot read request body: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// JSONTypeName names, for an error message, the JSON value that a Go type
// (as encoding/json prints it) takes.
func JSONTypeName(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	}
	return "an object"
}

// params validates one create request against what this daemon runs and
// turns it into enqueue parameters. It writes nothing. live returns the
// kinds of the live daemons (liveKinds), read once per request. now is
// the coordinator's clock's (a delay counts from it, as the coordinator
// stamps and promotes jobs by it).
func (a *Handler) params(req CreateRequest, now time.Time, live func() ([]string, error)) (coordinator.EnqueueParams, error) {
	if req.Kind == "" {
		return coordinator.EnqueueParams{}, badRequest(`kind is missing: set "kind" to one of %s`, strings.Join(a.kindNames, ", "))
	}
	if err := coordinator.ValidateKind(req.Kind); err != nil {
		return coordinator.EnqueueParams{}, badRequest("%s", CleanCoordError(err))
	}
	check, ok := a.cfg.Kinds[req.Kind]
	if !ok && (a.cfg.Shared || a.cfg.LiveKinds) {
		names, err := live()
		if err != nil {
			return coordinator.EnqueueParams{}, err
		}
		ok = names == nil || slices.Contains(names, req.Kind)
		if !ok {
			return coordinator.EnqueueParams{}, badRequest("unknown kind %s: the live daemons run %s: register a handler for it or check its spelling", req.Kind, strings.Join(names, ", "))
		}
		check = a.cfg.KnownChecks[req.Kind]
	}
	if !ok && len(a.kindNames) == 0 {
		return coordinator.EnqueueParams{}, badRequest("unknown kind %s: this API takes no kinds (it runs no handlers): enqueue through one that does", req.Kind)
	}
	if !ok {
		return coordinator.EnqueueParams{}, badRequest("unknown kind %s: this daemon runs %s: register a handler for it or check its spelling", req.Kind, strings.Join(a.kindNames, ", "))
	}
	p := coordinator.EnqueueParams{
		Kind: req.Kind, Payload: req.Payload, Queue: req.Queue,
		UniqueKey: req.UniqueKey, Metadata: req.Metadata,
	}
	// Left out (or null) is the default; an explicit 0 is refused, as the
	// CLI refuses it, rather than read as the default.
	if req.Priority != nil {
		if *req.Priority == 0 {
			return coordinator.EnqueueParams{}, badRequest("priority 0: want 1 (first) to 4 (last), or leave it out for %d", coordinator.DefaultPriority)
		}
		p.Priority = *req.Priority
	}
	if req.MaxAttempts != nil {
		if *req.MaxAttempts == 0 {
			return coordinator.EnqueueParams{}, badRequest("max_attempts 0: want 1 or more, or leave it out for %d", coordinator.DefaultMaxAttempts)
		}
		p.MaxAttempts = *req.MaxAttempts
	}
	if err := req.Unique.apply(&p); err != nil {
		return coordinator.EnqueueParams{}, err
	}
	if string(p.Payload) == "null" {
		p.Payload = nil
	}
	if len(p.Payload) > a.cfg.MaxPayload {
		return coordinator.EnqueueParams{}, badRequest("payload is %d bytes, over the %d-byte limit: %s", len(p.Payload), a.cfg.MaxPayload, a.payloadHint())
	}
	if check != nil {
		if err := check(p.Payload); err != nil {
			return coordinator.EnqueueParams{}, badRequest("%s payload: %v", req.Kind, err)
		}
	}
	if req.ScheduledAt != "" && req.Delay != "" {
		return coordinator.EnqueueParams{}, badRequest("scheduled_at and delay are both set: set one of them")
	}
	if req.ScheduledAt != "" {
		t, err := time.Parse(time.RFC3339Nano, req.ScheduledAt)
		if err != nil {
			return coordinator.EnqueueParams{}, badRequest("scheduled_at %q is not an RFC 3339 time: use e.g. 2030-01-02T15:04:05Z", TruncateString(req.ScheduledAt, 40))
		}
		p.ScheduledAt = t
	}
	if req.Delay != "" {
		d, err := time.ParseDuration(req.Delay)
		if err != nil || d < 0 {
			return coordinator.EnqueueParams{}, badRequest("delay %q is not a duration of zero or more: use e.g. 90s or 5m", TruncateString(req.Delay, 40))
		}
		p.ScheduledAt = now.Add(d)
	}
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d < time.Millisecond {
			return coordinator.EnqueueParams{}, badRequest("timeout %q is not a duration of at least 1ms: use e.g. 30s, or leave it out for the daemon's default", TruncateString(req.Timeout, 40))
		}
		p.Timeout = d
	}
	return p, nil
}

// TruncateString cuts s to n bytes, marking the cut with "...".
func TruncateString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func (a *Handler) createJob(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		a.fail(w, r, err)
		return
	}
	var req CreateRequest
	if err := decodeBody(w, r, a.createBody(), &req); err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := a.params(req, a.cfg.Coord.Clock().Now(), a.liveKindsOnce(r.Context()))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	res, err := a.cfg.Coord.Enqueue(r.Context(), p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	status := http.StatusCreated
	if res.Existed {
		status = http.StatusOK
	} else {
		a.m.countEnqueued(res.Job)
	}
	WriteJSON(w, status, CreateResponse{Job: res.Job, Existed: res.Existed})
}

func (a *Handler) batchLimit() int64 {
	return max(int64(MinBatchBody), 2*a.jobLimit())
}

func (a *Handler) createBatch(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		a.fail(w, r, err)
		return
	}
	var req BatchRequest
	if err := decodeBody(w, r, a.batchBody(), &req); err != nil {
		a.fail(w, r, err)
		return
	}
	switch {
	case len(req.Jobs) == 0:
		a.fail(w, r, badRequest(`no jobs: send {"jobs":[{"kind":...},...]}`))
		return
	case len(req.Jobs) > maxBatchJobs:
		a.fail(w, r, badRequest("%d jobs in one batch, over the limit of %d: split the batch", len(req.Jobs), maxBatchJobs))
		return
	}
	now, live := a.cfg.Coord.Clock().Now(), a.liveKindsOnce(r.Context())
	ps := make([]coordinator.EnqueueParams, len(req.Jobs))
	for i, jr := range req.Jobs {
		p, err := a.params(jr, now, live)
		if err != nil {
			// Say which job, keeping the status: a store that cannot
			// be read is no fault of the request.
			var ae *apiError
			if errors.As(err, &ae) {
				err = &apiError{status: ae.status, msg: fmt.Sprintf("job %d: %s", i, ae.msg)}
			} else {
				err = fmt.Errorf("job %d: %w", i, err)
			}
			a.fail(w, r, err)
			return
		}
		ps[i] = p
	}
	res, err := a.cfg.Coord.EnqueueBatch(r.Context(), ps)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := BatchResponse{Jobs: make([]*coordinator.Job, len(res)), Existed: make([]bool, len(res))}
	status := http.StatusOK
	for i, x := range res {
		out.Jobs[i], out.Existed[i] = x.Job, x.Existed
		if !x.Existed {
			status = http.StatusCreated
			a.m.countEnqueued(x.Job)
		}
	}
	WriteJSON(w, status, out)
}

// checkQuery refuses query parameters other than allowed, so that a typo
// is not silently ignored, and a parameter given twice, of which only
// one would count.
// checkNoBody refuses a request to an endpoint that takes no body but was
// sent one: whatever it asked for in it would otherwise be ignored while
// the change went ahead.
func checkNoBody(r *http.Request) error {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	var b [1]byte
	if n, _ := io.ReadFull(r.Body, b[:]); n == 0 {
		return nil
	}
	return badRequest("%s %s takes no body: send none (its parameters go in the path and the query string)", r.Method, r.URL.Path)
}

func checkQuery(r *http.Request, allowed ...string) error {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return badRequest("bad query string: %s: escape it as a URL query (key=value&...)", OneLine(err.Error()))
	}
	for _, k := range SortedKeys(q) {
		if n := len(q[k]); n > 1 {
			return badRequest("query parameter %q is given %d times: give it once", TruncateString(k, 40), n)
		}
	}
	for _, k := range SortedKeys(q) {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			if len(allowed) == 0 {
				return badRequest("unknown query parameter %q: this endpoint takes none", k)
			}
			return badRequest("unknown query parameter %q: use %s", k, strings.Join(allowed, ", "))
		}
		if q.Get(k) == "" {
			// Read as left out, an empty filter would match everything.
			return badRequest("query parameter %q is empty: leave it out, or give a value", k)
		}
	}
	return nil
}

func (a *Handler) listJobs(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r, "state", "kind", "queue", "limit", "after"); err != nil {
		a.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	p := coordinator.ListParams{Kind: q.Get("kind"), Queue: q.Get("queue"), After: q.Get("after")}
	if s := q.Get("state"); s != "" {
		st, err := coordinator.ParseState(s)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		p.State = st
	}
	if p.Kind != "" {
		if err := coordinator.ValidateKind(p.Kind); err != nil {
			a.fail(w, r, err)
			return
		}
	}
	var ok bool
	if p.Limit, ok = a.pageLimit(w, r); !ok {
		return
	}
	page, err := a.cfg.Coord.List(r.Context(), p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, page)
}

func (a *Handler) getJob(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r, "wait"); err != nil {
		a.fail(w, r, err)
		return
	}
	id := r.PathValue("id")
	if err := coordinator.ValidateID(id); err != nil {
		a.fail(w, r, err)
		return
	}
	var wait time.Duration
	if s := r.URL.Query().Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			a.fail(w, r, badRequest("wait %q is not a duration of zero or more: use e.g. wait=30s (at most %s)", TruncateString(s, 20), maxWait))
			return
		}
		wait = min(d, maxWait)
	}
	if wait > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		stopWait := context.AfterFunc(a.waits, cancel)
		j, err := a.wait(ctx, id)
		expired := ctx.Err() != nil
		stopWait()
		cancel()
		switch {
		case err == nil:
			WriteJSON(w, http.StatusOK, JobResponse{Job: j})
			return
		case !expired:
			a.fail(w, r, err)
			return
		}
		// The wait expired (or the daemon is stopping): answer with the
		// job as it is now.
	}
	// Read even if the request's context ended with the wait (a CLI's
	// deadline may be the wait's), within the store deadline.
	ctx, cancel := context.WithTimeoutCause(context.WithoutCancel(r.Context()), a.cfg.StoreTimeout, errStoreTimeout)
	defer cancel()
	j, err := a.cfg.Coord.Get(ctx, id)
	if err != nil {
		a.fail(w, r.WithContext(ctx), err)
		return
	}
	WriteJSON(w, http.StatusOK, JobResponse{Job: j})
}

// wait returns job id once it is final, or ctx's error. It watches the
// store while fewer than Config.WaitWatches long-polls do, and otherwise
// reads the job every waitPoll: each watch wakes at every write, so that
// thousands of long-polls (reads need no token) would slow every write of
// the daemon, while a poll costs what a client's own GET would.
func (a *Handler) wait(ctx context.Context, id string) (*coordinator.Job, error) {
	select {
	case a.watchSlots <- struct{}{}:
		defer func() { <-a.watchSlots }()
		return a.cfg.Coord.Wait(ctx, id)
	default:
	}
	t := time.NewTicker(waitPoll)
	defer t.Stop()
	for {
		j, err := a.cfg.Coord.Get(ctx, id)
		if err != nil || j.State.Final() {
			return j, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (a *Handler) cancelJob(w http.ResponseWriter, r *http.Request) {
	if err := cmp.Or(checkQuery(r), checkNoBody(r)); err != nil {
		a.fail(w, r, err)
		return
	}
	id := r.PathValue("id")
	j, err := a.cfg.Coord.Cancel(r.Context(), id)
	if errors.Is(err, coordinator.ErrWrongState) && j != nil {
		a.fail(w, r, &apiError{status: http.StatusConflict, msg: fmt.Sprintf("job %s is already %s: only unfinished jobs can be cancelled", id, j.State)})
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, JobResponse{Job: j})
}

func (a *Handler) listWorkers(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		a.fail(w, r, err)
		return
	}
	ws, err := a.cfg.Coord.Workers(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, WorkersResponse{Workers: ws})
}

func (a *Handler) stats(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		a.fail(w, r, err)
		return
	}
	var counts map[coordinator.State]int
	var err error
	if a.cfg.CLI {
		// The in-process API of one CLI command: one caller.
		counts, err = a.cfg.Coord.Counts(r.Context())
	} else {
		counts, err = a.counts.get(r.Context())
	}
	if errors.Is(err, errStoreTimeout) {
		// The shared count's deadline, or this request's.
		w.Header().Set("Retry-After", retryAfter)
		WriteError(w, http.StatusServiceUnavailable, a.timeoutMessage(r))
		return
	}
	if errors.Is(err, errProbeStopped) {
		// StopProbe ended the shared count: the daemon is going.
		WriteError(w, http.StatusServiceUnavailable, "the daemon is stopping: ask another, or retry once it is back")
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	WriteJSON(w, http.StatusOK, StatsResponse{Counts: counts, Total: total})
}

func (a *Handler) health(w http.ResponseWriter, _ *http.Request) {
	WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// SortedKeys returns the keys of m, sorted.
func SortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// liveKindsOnce returns liveKinds for one request, read at most once (it
// reads every daemon's registration).
func (a *Handler) liveKindsOnce(ctx context.Context) func() ([]string, error) {
	return sync.OnceValues(func() ([]string, error) { return a.liveKinds(ctx) })
}

// liveKinds returns the kinds this daemon and every live daemon of the
// namespace run, sorted; nil when no daemon is live.
func (a *Handler) liveKinds(ctx context.Context) ([]string, error) {
	live, err := a.cfg.Coord.LiveKinds(ctx)
	if err != nil {
		return nil, err
	}
	if len(live) == 0 && len(a.cfg.Kinds) == 0 {
		return nil, nil
	}
	set := map[string]bool{}
	for k := range a.cfg.Kinds {
		set[k] = true
	}
	for _, k := range live {
		set[k] = true
	}
	return SortedKeys(set), nil
}

// pageLimit is the request's limit query parameter, 0 when it has none.
// A limit that is not a number from 1 to coordinator.MaxListLimit is
// answered 400, and ok is false.
func (a *Handler) pageLimit(w http.ResponseWriter, r *http.Request) (n int, ok bool) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return 0, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > coordinator.MaxListLimit {
		a.fail(w, r, badRequest("limit %q: want a number from 1 to %d", TruncateString(s, 20), coordinator.MaxListLimit))
		return 0, false
	}
	return n, true
}
