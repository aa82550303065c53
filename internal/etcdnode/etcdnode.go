// Package etcdnode runs one embedded etcd member (go.etcd.io/etcd/server/v3/embed)
// configured for leasehold: auto-compaction on, a logger that stays quiet
// unless asked, and loopback URLs by default. It backs `leasehold etcd`, which
// lets developers and the cluster tests stand up a real etcd cluster from the
// project's one binary, and the shared-mode benchmark.
package etcdnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soheilhy/cmux"
	"go.etcd.io/etcd/client/pkg/v3/logutil"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
)

// Config describes one member. The zero value of each field means its
// default.
type Config struct {
	// AutoCompactionRetention keeps this much revision history (periodic
	// mode). Default: "5m". Without compaction the 2 GiB quota fills.
	AutoCompactionRetention string
	// ClientURL is where clients connect. Default: http://127.0.0.1:2379.
	ClientURL string
	// Dir is the data directory. Default: ./etcd-data/NAME.
	Dir string
	// ElectionTimeout and HeartbeatInterval tune raft. Defaults: 1s, 100ms.
	ElectionTimeout, HeartbeatInterval time.Duration
	// InitialCluster is "name=peerURL,..." of every member of a new static
	// cluster. Default: this member alone.
	InitialCluster string
	// LogLevel of etcd's own logs: debug, info, warn, error. Default: error.
	LogLevel string
	// Name of the member. Default: "default".
	Name string
	// PeerURL is where other members connect. Default: http://127.0.0.1:2380.
	PeerURL string
	// QuotaBytes caps the backend size. Default: etcd's (2 GiB).
	QuotaBytes int64
	// ClusterToken separates clusters that share hosts. Default: "leasehold".
	ClusterToken string
}

func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		c.Name = "default"
	}
	if c.Dir == "" {
		c.Dir = "./etcd-data/" + c.Name
	}
	if c.ClientURL == "" {
		c.ClientURL = "http://127.0.0.1:2379"
	}
	if c.PeerURL == "" {
		c.PeerURL = "http://127.0.0.1:2380"
	}
	if c.InitialCluster == "" {
		c.InitialCluster = c.Name + "=" + c.PeerURL
	}
	if c.AutoCompactionRetention == "" {
		c.AutoCompactionRetention = "5m"
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 100 * time.Millisecond
	}
	if c.LogLevel == "" {
		c.LogLevel = "error"
	}
	if c.ClusterToken == "" {
		c.ClusterToken = "leasehold"
	}
	for _, u := range []string{c.ClientURL, c.PeerURL} {
		if _, err := url.Parse(u); err != nil || !strings.Contains(u, "://") {
			return c, fmt.Errorf("etcdnode: bad URL %q: want http://HOST:PORT", u)
		}
	}
	if !namesMember(c.InitialCluster, c.Name) {
		return c, fmt.Errorf("etcdnode: --initial-cluster %q does not name this member %q", c.InitialCluster, c.Name)
	}
	return c, nil
}

// namesMember reports whether the initial cluster "name=peerURL,..." has a
// member called name, as etcd reads it (no spaces trimmed). A substring
// match is not enough: "m1" is not a member of "xm1=...", and etcd, which
// would refuse it, creates the data directory first.
func namesMember(initialCluster, name string) bool {
	for _, m := range strings.Split(initialCluster, ",") {
		if n, _, ok := strings.Cut(m, "="); ok && n == name {
			return true
		}
	}
	return false
}

// Node is a running member.
type Node struct {
	e         *embed.Etcd
	cfg       Config
	closeOnce sync.Once
	stopping  *atomic.Bool // set before e.Close: see quietStopCore
}

// Start starts the member and waits until it serves or ctx ends. A member
// of a multi-member cluster is ready only once a quorum has started.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	cu, _ := url.Parse(cfg.ClientURL)
	pu, _ := url.Parse(cfg.PeerURL)
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	ec.InitialCluster = cfg.InitialCluster
	ec.InitialClusterToken = cfg.ClusterToken
	ec.ClusterState = embed.ClusterStateFlagNew
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = cfg.AutoCompactionRetention
	ec.TickMs = uint(cfg.HeartbeatInterval / time.Millisecond)
	ec.ElectionMs = uint(cfg.ElectionTimeout / time.Millisecond)
	ec.LogLevel = cfg.LogLevel
	stopping := new(atomic.Bool)
	lg, err := newLogger(cfg.LogLevel, stopping)
	if err != nil {
		return nil, fmt.Errorf("etcdnode: member %s: build etcd's logger: %w", cfg.Name, err)
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	if cfg.QuotaBytes > 0 {
		ec.QuotaBackendBytes = cfg.QuotaBytes
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("etcdnode: start member %s in %s: %w", cfg.Name, cfg.Dir, err)
	}
	n := &Node{e: e, cfg: cfg, stopping: stopping}
	select {
	case <-e.Server.ReadyNotify():
		return n, nil
	case err := <-e.Err():
		n.Close()
		return nil, fmt.Errorf("etcdnode: member %s: %w", cfg.Name, err)
	case <-e.Server.StopNotify():
		n.Close()
		return nil, fmt.Errorf("etcdnode: member %s stopped before it was ready: %s", cfg.Name, stoppedWhy(cfg))
	case <-ctx.Done():
		e.Server.Stop()
		n.Close()
		return nil, fmt.Errorf("etcdnode: member %s not ready: %w", cfg.Name, ctx.Err())
	}
}

// ClientURL returns the member's client URL.
func (n *Node) ClientURL() string { return n.cfg.ClientURL }

// Wait blocks until ctx ends or the member fails or stops of its own accord
// (as a member removed from its cluster does), then stops it.
func (n *Node) Wait(ctx context.Context) error {
	defer n.Close()
	select {
	case <-ctx.Done():
		return nil
	case <-n.e.Server.StopNotify():
		return fmt.Errorf("etcdnode: member %s stopped: %s", n.cfg.Name, stoppedWhy(n.cfg))
	case err := <-n.e.Err():
		if err == nil {
			return errors.New("etcdnode: member stopped")
		}
		return fmt.Errorf("etcdnode: member %s: %w", n.cfg.Name, err)
	}
}

// stoppedWhy explains a member that stopped of its own accord.
func stoppedWhy(cfg Config) string {
	return fmt.Sprintf("it was removed from its cluster (delete its data directory %s before it joins again) or failed (etcd logs why at level warn)", cfg.Dir)
}

// Close stops the member. Later calls do nothing.
func (n *Node) Close() {
	n.closeOnce.Do(func() {
		n.stopping.Store(true)
		n.e.Close()
	})
}

// newLogger builds etcd's logger as etcd itself would (JSON on stderr, at
// level), except that once stopping is set the errors of listeners being
// closed are logged at level info (quietStopCore).
func newLogger(level string, stopping *atomic.Bool) (*zap.Logger, error) {
	c := logutil.DefaultZapLoggerConfig
	c.OutputPaths, c.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	c.Level = zap.NewAtomicLevelAt(logutil.ConvertToZapLevel(level))
	return c.Build(zap.WrapCore(func(core zapcore.Core) zapcore.Core {
		return &quietStopCore{Core: core, stopping: stopping}
	}))
}

// quietStopCore logs at level info what etcd logs at levels warn and error
// once Close has begun, about the error of a listener or server that Close
// closed: its serving goroutines each log one at level error, four on
// every clean stop, although nothing failed. Any other error, and any
// error before the stop, keeps its level.
type quietStopCore struct {
	zapcore.Core
	stopping *atomic.Bool
}

func (c *quietStopCore) With(fields []zapcore.Field) zapcore.Core {
	return &quietStopCore{Core: c.Core.With(fields), stopping: c.stopping}
}

func (c *quietStopCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if ent.Level >= zapcore.WarnLevel && c.stopping.Load() {
		return ce.AddCore(ent, c) // Write decides, seeing the error
	}
	return c.Core.Check(ent, ce)
}

func (c *quietStopCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	if ent.Level >= zapcore.WarnLevel && c.stopping.Load() && closedListener(fields) {
		ent.Level, ent.Stack = zapcore.InfoLevel, ""
	}
	if !c.Core.Enabled(ent.Level) {
		return nil
	}
	return c.Core.Write(ent, fields)
}

// closedListener reports whether fields hold an error that says a
// listener or server was closed.
func closedListener(fields []zapcore.Field) bool {
	for _, f := range fields {
		err, ok := f.Interface.(error)
		if f.Type != zapcore.ErrorType || !ok {
			continue
		}
		if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) ||
			errors.Is(err, cmux.ErrServerClosed) || errors.Is(err, cmux.ErrListenerClosed) ||
			errors.Is(err, grpc.ErrServerStopped) {
			return true
		}
	}
	return false
}
