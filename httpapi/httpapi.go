package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/worker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// ErrConfig is the cause of New's errors: the Config cannot be served.
var ErrConfig = errors.New("httpapi: invalid config")

// PayloadCheck checks the payload of a job of one kind at enqueue, so
// that a payload its handler could never accept is refused (400) before
// anything is written. Its error says what is wrong with the payload.
type PayloadCheck func(payload json.RawMessage) error

// Backuper takes a consistent backup of an embedded store into dir, a
// directory that does not exist yet; *localstore.Store is one.
type Backuper interface {
	Backup(ctx context.Context, dir string) (localstore.BackupInfo, error)
}

// Config configures a Handler. Every field is optional.
type Config struct {
	// Worker is the program's worker, if it runs one, with its handlers
	// registered (New reads its kinds): the API accepts jobs of its
	// kinds, /readyz reports whether its session is valid, and the
	// dashboard marks it as this process.
	Worker *worker.Worker
	// Kinds are the kinds accepted beyond the Worker's (those that
	// workers elsewhere run), or the Worker's with a payload check (a nil
	// check: any JSON). A job of a kind neither names is refused with 400.
	Kinds map[string]PayloadCheck
	// AnyLiveKind also accepts the kinds of every live worker of the
	// namespace, and any kind while none is live: jobs wait for a worker
	// that knows them. It is what the daemon does in shared mode.
	AnyLiveKind bool
	// Token, if set, is required as "Authorization: Bearer TOKEN" on
	// every request but GET, HEAD and OPTIONS (401 otherwise). Spaces and
	// a newline around it (as read from a file) are dropped.
	Token string
	// LoopbackOnly refuses (403) requests whose Host is not a loopback
	// name: set it when the server listens on a loopback address, against
	// DNS rebinding.
	LoopbackOnly bool
	// Registry is what /metrics serves; New registers the API's HTTP
	// series on it (leasehold_http_requests_total,
	// leasehold_http_request_seconds). prometheus.DefaultRegisterer is a
	// *prometheus.Registry. Nil: a registry of the handler's own, with the
	// HTTP series and the Go runtime's and the process's.
	Registry *prometheus.Registry
	// Metrics are the program's metrics (package metrics, made on
	// Registry and wired to its coordinator and worker as that package
	// says, job gauges included): the API counts the jobs it enqueues
	// there (leasehold_enqueued_total). Without them /metrics serves no
	// job, worker or store series.
	Metrics *metrics.Metrics
	// Backup serves POST /v1/backup (and `leasehold backup`): pass the
	// embedded store. Nil (or a nil *localstore.Store): the route answers
	// 400 saying how to back up.
	Backup Backuper
	// Prefix is the path the handler is served under on the program's
	// mux, such as "/leasehold" (mux.Handle("/leasehold/", h)): it strips
	// it from each request and the dashboard's links stay under it. ""
	// (the default): the root of a server of its own.
	Prefix string
	// StoreTimeout bounds the store work of one request, after which it
	// is answered 503 with Retry-After (0: 10 s).
	StoreTimeout time.Duration
	// Logger receives the API's logs (nil: slog.Default()).
	Logger *slog.Logger
}

// Handler serves leasehold's HTTP API and dashboard. It is an
// http.Handler: serve it at the root of a server of its own, or under
// Config.Prefix.
type Handler struct {
	h *apiserver.Handler
}

// New returns the API of coord as cfg says. It refuses (ErrConfig) a
// config that cannot serve: no coordinator, metrics not made on Registry,
// a second Handler on one Registry, a token that is blank or holds a
// space, a Worker of another coordinator or with no handlers yet. With no Worker, Kinds or
// AnyLiveKind it serves everything but enqueueing (a dashboard and
// operations on the jobs that programs elsewhere enqueue).
func New(coord *coordinator.Coordinator, cfg Config) (*Handler, error) {
	if coord == nil {
		return nil, fmt.Errorf("%w: no coordinator: pass the one the program enqueues through", ErrConfig)
	}
	token := strings.TrimSpace(cfg.Token)
	if cfg.Token != "" && (token == "" || strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0) {
		return nil, fmt.Errorf("%w: Token is empty or holds spaces or control characters: pass the token alone", ErrConfig)
	}
	kinds := map[string]apiserver.PayloadCheck{}
	for k, check := range cfg.Kinds {
		if err := coordinator.ValidateKind(k); err != nil {
			return nil, fmt.Errorf("%w: Kinds: %w", ErrConfig, err)
		}
		kinds[k] = apiserver.PayloadCheck(check)
	}
	prefix := strings.TrimSuffix(cfg.Prefix, "/")
	if prefix != "" && (prefix[0] != '/' || path.Clean(prefix) != prefix || strings.ContainsAny(prefix, "?#%")) {
		return nil, fmt.Errorf("%w: Prefix %q: want a clean path such as /leasehold", ErrConfig, cfg.Prefix)
	}
	ac := apiserver.Config{
		Coord: coord, Kinds: kinds, LiveKinds: cfg.AnyLiveKind, MaxPayload: coord.MaxPayloadBytes(),
		Logger: cfg.Logger, Auth: apiserver.AuthConfig{Token: token, LoopbackOnly: cfg.LoopbackOnly},
		StoreTimeout: cfg.StoreTimeout, Prefix: prefix,
	}
	if w := cfg.Worker; w != nil {
		if w.Coordinator() != coord {
			return nil, fmt.Errorf("%w: the Worker claims through another coordinator: pass the one it was made with", ErrConfig)
		}
		if len(w.Kinds()) == 0 {
			return nil, fmt.Errorf("%w: the Worker has no handlers yet: register them (Handle) before New, which reads the kinds the API accepts", ErrConfig)
		}
		ac.Worker, ac.WorkerID = w, w.ID()
		for _, k := range w.Kinds() {
			if _, ok := kinds[k]; !ok {
				kinds[k] = nil
			}
		}
	}
	if b := cfg.Backup; b != nil && !nilPointer(b) {
		ac.Backup = b
	} else {
		ac.NoBackup = "this program serves no backups (its httpapi.Config has no Backup, which it can set in embedded mode); " + apiserver.SharedBackupHint
	}
	reg := cfg.Registry
	switch {
	case cfg.Metrics != nil && reg == nil:
		return nil, fmt.Errorf("%w: Metrics without Registry: pass the registry the metrics were made on, which /metrics serves", ErrConfig)
	case cfg.Metrics != nil && cfg.Metrics.Registerer() != prometheus.Registerer(reg):
		return nil, fmt.Errorf("%w: Metrics were made on another registry than Registry: /metrics would not serve them", ErrConfig)
	case reg == nil:
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m, err := apiserver.NewMetricsOn(reg, cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("%w: %w: serve one Handler per Registry", ErrConfig, err)
	}
	ac.Metrics = m
	return &Handler{h: apiserver.New(ac)}, nil
}

// nilPointer reports whether v holds a nil pointer (a nil
// *localstore.Store as a Backuper).
func nilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// ServeHTTP serves one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.h.ServeHTTP(w, r) }

// StopWaits wakes the long-polls in flight (GET /v1/jobs/{id}?wait=) and
// to come: they answer at once with the job as it is. Register it with
// the server's RegisterOnShutdown, so that Shutdown does not wait them
// out.
func (h *Handler) StopWaits() { h.h.StopWaits() }

// Drain says that the program is stopping its worker: /readyz answers
// 503, so that a load balancer sends requests elsewhere, while the rest
// goes on serving, and the long-polls answer at once. Call it before the
// worker's Stop, and Shutdown the server after, so that health checks and
// metrics are answered through the drain.
func (h *Handler) Drain() { h.h.Drain() }

// Close stops the long-polls and waits, until ctx is done, for the
// store reads of /readyz and /v1/stats that outlived their requests (a
// store that stalls) to return. Call it after the server's Shutdown.
func (h *Handler) Close(ctx context.Context) error {
	h.h.StopWaits()
	return h.h.StopProbe(ctx)
}
