package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"math/big"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/oklog/ulid/v2"
)

// Clock is the time source; tests inject a fake one.
type Clock interface {
	Now() time.Time
	// After is time.After on this clock.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// RealClock is the wall clock.
var RealClock Clock = realClock{}

// Config configures a Coordinator. The zero value of each field means its
// default.
type Config struct {
	// Clock is the time source. Default: RealClock.
	Clock Clock
	// Logger receives structured logs. Default: slog.Default().
	Logger *slog.Logger
	// MaxPayloadBytes limits a job's payload. Default: 1 MiB, or less on a
	// store with a request size limit: an available job is written twice
	// in one transaction (its record, and its queue's index entry), so the
	// default is the largest multiple of 4 KiB that fits twice, with the
	// largest metadata, in one request (664 KiB on etcd's default 1.5 MiB
	// --max-request-bytes). A larger value is refused. See
	// [Coordinator.MaxPayloadBytes].
	MaxPayloadBytes int
	// MaxClaimBytes bounds the bytes of the jobs one claim takes: of their
	// available-index entries, each of which carries the job's record,
	// payload included. A claim takes its candidates in order until the
	// next would pass the bound, and always at least one, so that a job
	// of any allowed size runs; it also reads fewer entries once it has
	// seen that a queue's are large. Default: 4 MiB (DefaultMaxClaimBytes).
	MaxClaimBytes int
	// MaxRescues is how many times a job may lose its run with its daemon
	// (lease expiry, crash) before it is discarded. Default: 5.
	MaxRescues int
	// OnReap, if set, is called for each job a reap moved out of running
	// (re-queued, cancelled or discarded), with the job as written: for
	// metrics. It must not block. A panic in it is recovered, logged with
	// its stack and counted (CallUser); the reap goes on.
	OnReap func(j *Job)
	// Namespace isolates queues that share a store. Default: "default".
	Namespace string
	// Retention is how long finished jobs are kept. Default: 24h.
	Retention time.Duration
	// RetryPolicy computes the next retry time. Default: DefaultRetryPolicy,
	// which also gives the wait of an attempt whose policy panicked (the
	// attempt fails all the same; the panic is logged, see CallUser).
	RetryPolicy RetryPolicy
	// EnqueueHooks run, in order, on every job enqueued through this
	// coordinator (including periodic ones) before it is validated: for
	// metadata such as trace ids or tenants. See EnqueueHook: one that
	// panics refuses the enqueue, writing nothing.
	EnqueueHooks []EnqueueHook
}

// Defaults of Config.
const (
	// DefaultMaxClaimBytes is the default of Config.MaxClaimBytes: four
	// jobs of the default payload limit (1 MiB), while a claim of 32 jobs
	// of up to 128 KiB each is not bounded. Each job a claim takes is held
	// several times over while it commits (as read, decoded, its rewrite,
	// the store's batch): in a drain of 1 MB payloads with 64 slots, a
	// bound of 16 MiB left the process at 1.0 GB, 4 MiB at 0.6 GB, and
	// the drain no slower (docs/performance.md, section 41).
	DefaultMaxClaimBytes = 4 << 20
	DefaultMaxRescues    = 5
	DefaultNamespace     = "default"
	DefaultRetention     = 24 * time.Hour
)

// Coordinator is the job state machine over one store. It is safe for
// concurrent use and holds no goroutines of its own: loops that need one
// (maintenance, reaping, sessions) are started by their callers.
type Coordinator struct {
	store  kv.Store
	keys   keys
	cfg    Config
	log    *slog.Logger
	clock  Clock
	limits kv.Limits

	idMu      sync.Mutex
	idEntropy *ulid.MonotonicEntropy

	floors floors
	group  groupCommit
	qconf  queueCache
	// finished: RecentCounts' count of the finished states.
	finished finishedCounts

	// callbackPanics: CallbackPanics.
	callbackPanics atomic.Int64

	// testMaxVersion, if not 0, stands for ClusterVersion (tests of
	// upgrades: a newer build).
	testMaxVersion int
}

// New returns a coordinator on store. It validates cfg.
func New(store kv.Store, cfg Config) (*Coordinator, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: no store: pass a localstore.Store or an etcdkv store", ErrInvalid)
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxClaimBytes == 0 {
		cfg.MaxClaimBytes = DefaultMaxClaimBytes
	}
	if cfg.MaxRescues == 0 {
		cfg.MaxRescues = DefaultMaxRescues
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.RetryPolicy == nil {
		cfg.RetryPolicy = DefaultRetryPolicy
	}
	if err := validName("namespace", cfg.Namespace); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxPayloadBytes", int64(cfg.MaxPayloadBytes)}, {"MaxClaimBytes", int64(cfg.MaxClaimBytes)}, {"MaxRescues", int64(cfg.MaxRescues)}, {"Retention", int64(cfg.Retention)},
	} {
		if f.v < 0 {
			return nil, fmt.Errorf("%w: coordinator.Config.%s is negative: want 0 (the default) or more", ErrInvalid, f.name)
		}
	}
	lim := store.Limits()
	fit := maxPayloadFor(lim)
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = min(DefaultMaxPayloadBytes, fit&^(4<<10-1))
		if cfg.MaxPayloadBytes < 4<<10 {
			return nil, fmt.Errorf("%w: the store's %d-byte request limit leaves no room for a job's payload: raise it", ErrInvalid, lim.MaxBytes)
		}
	}
	if cfg.MaxPayloadBytes > fit {
		return nil, fmt.Errorf("%w: max payload %d bytes does not fit the store's %d-byte request limit twice (a job's record and its queue entry): use at most %d", ErrInvalid, cfg.MaxPayloadBytes, lim.MaxBytes, fit)
	}
	c := &Coordinator{
		store:     store,
		keys:      newKeys(cfg.Namespace),
		cfg:       cfg,
		log:       cfg.Logger,
		clock:     cfg.Clock,
		limits:    lim,
		idEntropy: ulid.Monotonic(rand.Reader, 0),
	}
	c.group.c = c
	return c, nil
}

// Store returns the store under the coordinator.
func (c *Coordinator) Store() kv.Store { return c.store }

// MaxPayloadBytes returns the payload limit in force (Config.MaxPayloadBytes
// or its default for the store).
func (c *Coordinator) MaxPayloadBytes() int { return c.cfg.MaxPayloadBytes }

// maxPayloadFor returns the largest payload whose job, with the largest
// metadata, fits twice in one transaction of a store with limits lim.
func maxPayloadFor(lim kv.Limits) int {
	if lim.MaxBytes <= 0 {
		return math.MaxInt
	}
	return max(0, (lim.MaxBytes-requestOverhead)/2-MaxMetadataBytes-4<<10)
}

// Namespace returns the namespace of the coordinator.
func (c *Coordinator) Namespace() string { return c.cfg.Namespace }

// Clock returns the coordinator's clock.
func (c *Coordinator) Clock() Clock { return c.clock }

// Logger returns the coordinator's logger.
func (c *Coordinator) Logger() *slog.Logger { return c.log }

func (c *Coordinator) newID(now time.Time) string {
	c.idMu.Lock()
	defer c.idMu.Unlock()
	return ulid.MustNew(ulid.Timestamp(now), c.idEntropy).String()
}

// NewWorkerID returns a unique worker id: host-pid-random. Fencing compares
// owner ids, so two daemons must never share one, not even across restarts
// of the same pid.
func NewWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%08x", host, os.Getpid(), binary.BigEndian.Uint32(b[:]))
}

// jitter returns a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	n, err := rand.Int(rand.Reader, big.NewInt(int64(d)))
	if err != nil {
		return 0
	}
	return time.Duration(n.Int64())
}

// maxOpsPerTxn returns how many units of opsPerUnit operations fit in one
// transaction next to fixed outer operations; at most want.
func (c *Coordinator) unitsPerTxn(opsPerUnit, want int) int {
	if c.limits.MaxOps == 0 {
		return want
	}
	n := c.limits.MaxOps / opsPerUnit
	if n < 1 {
		n = 1
	}
	return min(n, want)
}

// getMany reads keys in as few round trips as the store allows, in order.
// A missing key yields nil.
func (c *Coordinator) getMany(ctx context.Context, keys []string) ([]*kv.KeyValue, error) {
	out := make([]*kv.KeyValue, 0, len(keys))
	per := c.unitsPerTxn(1, len(keys))
	for len(keys) > 0 {
		n := min(per, len(keys))
		ops := make([]kv.Op, n)
		for i, k := range keys[:n] {
			ops[i] = kv.Get(k)
		}
		res, err := c.store.Txn(ctx, kv.Txn{Then: ops})
		if err != nil {
			return nil, err
		}
		for _, r := range res.Results {
			out = append(out, r.KV)
		}
		keys = keys[n:]
	}
	return out, nil
}
