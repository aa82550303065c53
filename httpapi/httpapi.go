package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/worker"
	"github.com/prometheus/client_golang/prometheus"
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
	// registered: the API accepts jobs of its kinds, /readyz reports
	// whether its session is valid, and the dashboard marks it as this
	// process.
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
	// every request but GET, HEAD and OPTIONS (401 otherwise).
	Token string
	// LoopbackOnly refuses (403) requests whose Host is not a loopback
	// name: set it when the server listens on a loopback address, against
	// DNS rebinding.
	LoopbackOnly bool
	// Registry is what /metrics serves. New registers the API's HTTP
	// series on it (leasehold_http_requests_total,
	// leasehold_http_request_seconds) and, unless Metrics is set, the
	// library's series (metrics.New) with the job gauges. Nil: a registry
	// of the handler's own, with the Go runtime's and the process's
	// series too, as the daemon serves.
	Registry *prometheus.Registry
	// Metrics are the program's metrics (package metrics), made on
	// Registry: the API counts the jobs it enqueues there
	// (leasehold_enqueued_total), and the program registers the job
	// gauges itself (Metrics.RegisterJobs).
	Metrics *metrics.Metrics
	// Backup serves POST /v1/backup (and `leasehold backup`): pass the
	// embedded store. Nil: the route answers 400, as in shared mode.
	Backup Backuper
	// StoreTimeout bounds the store work of one request, after which it
	// is answered 503 with Retry-After (0: 10 s).
	StoreTimeout time.Duration
	// Logger receives the API's logs (nil: slog.Default()).
	Logger *slog.Logger
}

// Handler serves leasehold's HTTP API and dashboard. It is an
// http.Handler; serve it at the root of a server of its own.
type Handler struct {
	h *apiserver.Handler
}

// New returns the API of coord as cfg says.
func New(coord *coordinator.Coordinator, cfg Config) (*Handler, error) {
	if coord == nil {
		return nil, fmt.Errorf("%w: no coordinator: pass the one the program enqueues through", ErrConfig)
	}
	if cfg.Metrics != nil && cfg.Registry == nil {
		return nil, fmt.Errorf("%w: Metrics without Registry: pass the registry the metrics were made on, which /metrics serves", ErrConfig)
	}
	kinds := map[string]apiserver.PayloadCheck{}
	for k, check := range cfg.Kinds {
		if err := coordinator.ValidateKind(k); err != nil {
			return nil, fmt.Errorf("%w: Kinds: %w", ErrConfig, err)
		}
		kinds[k] = apiserver.PayloadCheck(check)
	}
	ac := apiserver.Config{
		Coord: coord, Kinds: kinds, Shared: cfg.AnyLiveKind, MaxPayload: coord.MaxPayloadBytes(),
		Logger: cfg.Logger, Auth: apiserver.AuthConfig{Token: cfg.Token, LoopbackOnly: cfg.LoopbackOnly},
		StoreTimeout: cfg.StoreTimeout,
	}
	if w := cfg.Worker; w != nil {
		ac.Worker, ac.WorkerID = w, w.ID()
		for _, k := range w.Kinds() {
			if _, ok := kinds[k]; !ok {
				kinds[k] = nil
			}
		}
	}
	if cfg.Backup != nil {
		ac.Backup = cfg.Backup
	} else {
		ac.NoBackup = "this program serves no backups (its httpapi.Config has no Backup): ask its owner to set it, or to back up with localstore.Store.Backup; " + apiserver.SharedBackupHint
	}
	if cfg.Registry != nil {
		m, err := apiserver.NewMetricsOn(cfg.Registry, cfg.Metrics)
		if err != nil {
			return nil, fmt.Errorf("%w: %w: serve one Handler per Registry", ErrConfig, err)
		}
		ac.Metrics = m
	}
	return &Handler{h: apiserver.New(ac)}, nil
}

// ServeHTTP serves one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.h.ServeHTTP(w, r) }

// StopWaits wakes the long-polls in flight (GET /v1/jobs/{id}?wait=) and
// to come: they answer at once with the job as it is. Register it with
// the server's RegisterOnShutdown, so that Shutdown does not wait them
// out.
func (h *Handler) StopWaits() { h.h.StopWaits() }

// Close stops the long-polls and waits, until ctx is done, for a
// /readyz read that outlived its request (a store that stalls) to
// return. Call it after the server's Shutdown.
func (h *Handler) Close(ctx context.Context) error {
	h.h.StopWaits()
	return h.h.StopProbe(ctx)
}
