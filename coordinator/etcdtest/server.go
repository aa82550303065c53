package etcdtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Option configures a server or cluster.
type Option func(*config)

type config struct {
	compactionMode      string
	compactionRetention string
	tick, election      time.Duration
	startTimeout        time.Duration
	logLevel            zapcore.Level
	configure           []func(*embed.Config)
}

func defaultConfig() config {
	return config{
		compactionMode:      embed.CompactorModePeriodic,
		compactionRetention: "1h",
		tick:                100 * time.Millisecond,
		election:            time.Second,
		startTimeout:        30 * time.Second,
		logLevel:            zapcore.ErrorLevel,
	}
}

// WithAutoCompaction sets etcd's auto-compaction: mode "periodic" with a
// retention such as "1h" (the default), or mode "revision" with a number of
// revisions to keep such as "1000".
func WithAutoCompaction(mode, retention string) Option {
	return func(c *config) { c.compactionMode, c.compactionRetention = mode, retention }
}

// WithoutAutoCompaction turns auto-compaction off (etcd's own default):
// history is kept until the test compacts it.
func WithoutAutoCompaction() Option {
	return func(c *config) { c.compactionMode, c.compactionRetention = embed.CompactorModePeriodic, "0" }
}

// WithElectionTimeout sets the raft heartbeat interval and election timeout
// (etcd's defaults: 100 ms and 1 s). Shorter ones make failover tests faster;
// note that etcd's minimum lease TTL is ceil(1.5 × election timeout) seconds.
func WithElectionTimeout(heartbeat, election time.Duration) Option {
	return func(c *config) { c.tick, c.election = heartbeat, election }
}

// WithStartTimeout bounds how long a start or restart waits for the members
// to be ready (default 30 s).
func WithStartTimeout(d time.Duration) Option {
	return func(c *config) { c.startTimeout = d }
}

// WithLogLevel sets the level of the members' logs ("debug", "info", "warn",
// "error"; default "error"). Logs are kept in memory and printed with t.Log
// only if the test fails.
func WithLogLevel(level string) Option {
	return func(c *config) {
		if l, err := zapcore.ParseLevel(level); err == nil {
			c.logLevel = l
		}
	}
}

// WithConfig lets f adjust each member's embed.Config after etcdtest has
// filled it in (for example MaxTxnOps, MaxRequestBytes, QuotaBackendBytes or
// UnsafeNoFsync). Changing the name, directory, URLs or cluster settings
// breaks the harness.
func WithConfig(f func(*embed.Config)) Option {
	return func(c *config) { c.configure = append(c.configure, f) }
}

// Cluster is a set of embedded etcd members, each in its own directory under
// the test's temporary directory, reached through per-member loopback proxies.
type Cluster struct {
	t       testing.TB // nil for NewCluster
	dir     string     // removed by Close when not from t.TempDir
	cfg     config
	token   string
	members []*Member
	logs    *logBuffer

	clientsMu sync.Mutex
	clients   map[*clientv3.Client]struct{}
	closeOnce sync.Once
}

// Server is a single-member cluster.
type Server struct {
	*Cluster
}

// Member is one etcd member of a [Cluster].
//
// A member listens on 127.0.0.1 ports chosen by the kernel and is reached
// only through two proxies of its own, one for clients and one for peers,
// whose addresses are the URLs it advertises. So its URLs stay the same
// across Kill and Restart without any port being reserved and released, and
// Kill can reset every connection at once instead of waiting for etcd's
// graceful shutdown.
type Member struct {
	c    *Cluster
	name string
	dir  string
	cli  *Proxy // client-facing proxy
	peer *Proxy // peer-facing proxy
	mu   sync.Mutex
	etcd *embed.Etcd
	// streams counts the running etcd's RangeStream handlers.
	streams *handlerCount
}

// Start starts a single-member etcd server for the test and stops it when
// the test ends. It fails the test if the server is not ready in time.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return &Server{Cluster: StartCluster(t, 1, opts...)}
}

// StartCluster starts a cluster of n members for the test, waits until all
// are ready, and stops it when the test ends. Its methods that can fail
// (Restart, Leader, WaitReady) fail the test, and must be called from the
// test's goroutine.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("etcdtest: StartCluster: need at least one member, got %d", n)
	}
	dir := t.TempDir() // before Cleanup below: removed after the members stop
	c := newCluster(n, dir, opts)
	c.t = t
	t.Cleanup(c.Close)
	if err := c.init(); err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return c
}

// New starts a single-member server outside of a test, for example in
// TestMain to share one server among the tests of a package. The caller
// must Close it. Its methods that can fail panic instead.
func New(opts ...Option) (*Server, error) {
	c, err := NewCluster(1, opts...)
	if err != nil {
		return nil, err
	}
	return &Server{Cluster: c}, nil
}

// NewCluster starts a cluster of n members outside of a test, in a new
// temporary directory; Close stops it and removes the directory. Its methods
// that can fail panic instead.
func NewCluster(n int, opts ...Option) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("etcdtest: NewCluster: need at least one member, got %d", n)
	}
	dir, err := os.MkdirTemp("", "etcdtest-")
	if err != nil {
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	c := newCluster(n, dir, opts)
	if err := c.init(); err != nil {
		c.Close()
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	return c, nil
}

func newCluster(n int, dir string, opts []Option) *Cluster {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	var tok [6]byte
	_, _ = rand.Read(tok[:])
	c := &Cluster{
		dir:     dir,
		cfg:     cfg,
		token:   "etcdtest-" + hex.EncodeToString(tok[:]),
		logs:    &logBuffer{max: 256 << 10},
		clients: make(map[*clientv3.Client]struct{}),
	}
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		c.members = append(c.members, &Member{c: c, name: name, dir: filepath.Join(dir, name)})
	}
	return c
}

// init creates the members' proxies and starts them all.
func (c *Cluster) init() error {
	for _, m := range c.members {
		var err error
		if m.cli, err = newProxy(""); err != nil {
			return err
		}
		if m.peer, err = newProxy(""); err != nil {
			return err
		}
	}
	var g errgroup.Group
	for _, m := range c.members {
		g.Go(m.start)
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("starting %d member(s): %w", len(c.members), err)
	}
	for _, m := range c.members {
		if err := m.waitReady(c.cfg.startTimeout); err != nil {
			return err
		}
	}
	return nil
}

// fail fails the test, or panics for a cluster from NewCluster.
func (c *Cluster) fail(format string, args ...any) {
	if c.t != nil {
		c.t.Helper()
		c.t.Fatalf("etcdtest: "+format, args...)
	}
	panic(fmt.Sprintf("etcdtest: "+format, args...))
}

func (c *Cluster) helper() {
	if c.t != nil {
		c.t.Helper()
	}
}

func (c *Cluster) initialCluster() string {
	var parts []string
	for _, m := range c.members {
		parts = append(parts, m.name+"="+m.peer.URL())
	}
	return strings.Join(parts, ",")
}

// start starts the member's etcd on its directory (new or existing) and
// points its proxies at it. It does not wait for the member to be ready.
func (m *Member) start() error {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	any0 := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls = []url.URL{any0}
	cfg.ListenPeerUrls = []url.URL{any0}
	cfg.AdvertiseClientUrls = []url.URL{{Scheme: "http", Host: m.cli.Addr()}}
	cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: m.peer.Addr()}}
	cfg.InitialCluster = m.c.initialCluster()
	cfg.InitialClusterToken = m.c.token
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.AutoCompactionMode = m.c.cfg.compactionMode
	cfg.AutoCompactionRetention = m.c.cfg.compactionRetention
	cfg.TickMs = uint(m.c.cfg.tick / time.Millisecond)
	cfg.ElectionMs = uint(m.c.cfg.election / time.Millisecond)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(m.c.logger(m.name))
	cfg.LogLevel = m.c.cfg.logLevel.String()
	// A RangeStream (a scan past its first page) reads on in its handler
	// after its client has gone, until its next chunk cannot be sent. One
	// that reads while the backend closes panics the process: stop waits
	// for them (see streams) before it stops the server.
	streams := newHandlerCount()
	cfg.GRPCAdditionalServerOptions = append(cfg.GRPCAdditionalServerOptions,
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if info.FullMethod != "/etcdserverpb.KV/RangeStream" {
				return handler(srv, ss)
			}
			if !streams.enter() {
				return status.Error(codes.Unavailable, "etcdtest: the member is stopping")
			}
			defer streams.leave()
			return handler(srv, ss)
		}))
	for _, f := range m.c.cfg.configure {
		f(cfg)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("member %s: %w", m.name, err)
	}
	m.mu.Lock()
	m.etcd, m.streams = e, streams
	m.mu.Unlock()
	m.cli.setTarget(e.Clients[0].Addr().String())
	m.peer.setTarget(e.Peers[0].Addr().String())
	return nil
}

// handlerCount counts running handlers until it is closed; then it admits
// none.
type handlerCount struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   *sync.Cond // signalled when n falls to 0
}

func newHandlerCount() *handlerCount {
	h := &handlerCount{}
	h.idle = sync.NewCond(&h.mu)
	return h
}

// enter admits a handler, unless h is closed.
func (h *handlerCount) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.n++
	return true
}

func (h *handlerCount) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n--; h.n == 0 {
		h.idle.Broadcast()
	}
}

// closeAndWait admits no more handlers and waits for those running.
func (h *handlerCount) closeAndWait() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for h.n > 0 {
		h.idle.Wait()
	}
}

// waitReady waits until the member has joined the cluster and serves.
func (m *Member) waitReady(timeout time.Duration) error {
	e := m.Etcd()
	if e == nil {
		return fmt.Errorf("member %s is not running", m.name)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("member %s failed to start: %v", m.name, err)
	case <-timer.C:
		return fmt.Errorf("member %s not ready after %v", m.name, timeout)
	}
}

// stop resets every client connection to the member, then shuts it down.
// With crash set, its peer connections are reset too and raft stops first,
// so a leader does not hand over its leadership as etcd's graceful shutdown
// does. Resetting client connections first makes the shutdown immediate:
// with open client streams etcd otherwise waits for its request timeout
// (about 7 s).
func (m *Member) stop(crash bool) {
	m.mu.Lock()
	e, streams := m.etcd, m.streams
	m.etcd = nil
	m.mu.Unlock()
	if e == nil {
		return
	}
	m.cli.setTarget("")
	m.cli.DropConnections()
	// With its client gone, a RangeStream's handler ends at its next
	// chunk; etcd closes its backend under a handler still reading.
	streams.closeAndWait()
	if crash {
		m.peer.setTarget("")
		m.peer.DropConnections()
		e.Server.HardStop()
	}
	e.Close()
	m.peer.setTarget("")
	m.peer.DropConnections()
}

// Close stops every member and waits for them, closes the clients made by
// Client, and removes the data directories of a cluster from NewCluster.
// A cluster from StartCluster is closed when its test ends. Close is
// idempotent.
func (c *Cluster) Close() {
	c.closeOnce.Do(c.close)
}

func (c *Cluster) close() {
	c.clientsMu.Lock()
	clients := make([]*clientv3.Client, 0, len(c.clients))
	for cli := range c.clients {
		clients = append(clients, cli)
	}
	c.clientsMu.Unlock()
	for _, cli := range clients {
		_ = cli.Close()
	}
	var wg sync.WaitGroup
	for _, m := range c.members {
		if m.cli != nil && m.peer != nil {
			wg.Go(func() { m.stop(true) })
		}
	}
	wg.Wait()
	for _, m := range c.members {
		if m.cli != nil {
			_ = m.cli.Close()
		}
		if m.peer != nil {
			_ = m.peer.Close()
		}
	}
	if c.t == nil {
		_ = os.RemoveAll(c.dir)
	} else if c.t.Failed() {
		if logs := c.logs.String(); logs != "" {
			c.t.Logf("etcdtest: etcd logs (level %v and above):\n%s", c.cfg.logLevel, logs)
		}
	}
}

// Logs returns the last 256 KiB of the members' logs (at the level set by
// WithLogLevel). A cluster from StartCluster prints them when its test failed.
func (c *Cluster) Logs() string { return c.logs.String() }

// Endpoints returns the client URLs of all members (running or not), for
// clientv3.Config.Endpoints.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.ClientURL()
	}
	return eps
}

// Client returns a new client of the cluster, closed when t's test ends
// (and in any case before the cluster stops).
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return c.client(t, c.Endpoints())
}

func (c *Cluster) client(t testing.TB, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcdtest: new client: %v", err)
	}
	c.clientsMu.Lock()
	c.clients[cli] = struct{}{}
	c.clientsMu.Unlock()
	t.Cleanup(func() {
		c.clientsMu.Lock()
		delete(c.clients, cli)
		c.clientsMu.Unlock()
		_ = cli.Close()
	})
	return cli
}

// Members returns the members, in the order they were created.
func (c *Cluster) Members() []*Member { return append([]*Member(nil), c.members...) }

// Member returns member i.
func (c *Cluster) Member(i int) *Member { return c.members[i] }

// Leader waits until the running members agree on a leader and returns its
// index. It fails the test if there is none within the start timeout.
func (c *Cluster) Leader() int {
	c.helper()
	deadline := time.Now().Add(c.cfg.startTimeout)
	for {
		if i, ok := c.leader(); ok {
			return i
		}
		if time.Now().After(deadline) {
			c.fail("no leader after %v", c.cfg.startTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leader returns the index of the member that a quorum of running members
// (itself included) follows.
func (c *Cluster) leader() (int, bool) {
	votes := make(map[uint64]int)
	ids := make(map[uint64]int)
	for i, m := range c.members {
		e := m.Etcd()
		if e == nil {
			continue
		}
		ids[uint64(e.Server.MemberID())] = i
		if l := e.Server.Lead(); l != 0 {
			votes[l]++
		}
	}
	for id, n := range votes {
		i, running := ids[id]
		if running && n > len(c.members)/2 {
			return i, true
		}
	}
	return 0, false
}

// Kill stops member i as a crash would: every connection to it is reset and
// raft stops at once (a leader does not hand over its leadership), then the
// member shuts down. Its data directory and URLs are kept for
// [Cluster.Restart]. Killing a member that is not running does nothing.
func (c *Cluster) Kill(i int) {
	c.members[i].stop(true)
}

// Stop stops member i gracefully, as etcd does on SIGTERM: a leader first
// transfers its leadership to another member. Client connections are reset
// all the same. It takes about a second (etcd gives its peers' connections
// that long to close). Restart it with [Cluster.Restart].
func (c *Cluster) Stop(i int) {
	c.members[i].stop(false)
}

// Restart starts member i again on its data directory and URLs. If a quorum
// of members is then running it waits until the member is ready (failing the
// test on timeout); otherwise it returns at once, and the member becomes
// ready when enough others are restarted ([Member.WaitReady]).
func (c *Cluster) Restart(i int) {
	c.helper()
	m := c.members[i]
	if m.Etcd() != nil {
		c.fail("Restart(%d): member %s is running", i, m.name)
	}
	if err := m.start(); err != nil {
		c.fail("Restart(%d): %v", i, err)
	}
	running := 0
	for _, o := range c.members {
		if o.Etcd() != nil {
			running++
		}
	}
	if running > len(c.members)/2 {
		if err := c.waitAllReady(); err != nil {
			c.fail("Restart(%d): %v", i, err)
		}
	}
}

// waitAllReady waits for every running member (restarting one can make
// others, waiting for quorum, ready too).
func (c *Cluster) waitAllReady() error {
	for _, m := range c.members {
		if m.Etcd() != nil {
			if err := m.waitReady(c.cfg.startTimeout); err != nil {
				return err
			}
		}
	}
	return nil
}

// Name returns the member's name (m0, m1, ...).
func (m *Member) Name() string { return m.name }

// Dir returns the member's data directory.
func (m *Member) Dir() string { return m.dir }

// ClientURL returns the URL clients use to reach this member.
func (m *Member) ClientURL() string { return m.cli.URL() }

// PeerURL returns the URL this member advertises to its peers.
func (m *Member) PeerURL() string { return m.peer.URL() }

// ClientProxy returns the proxy in front of the member's client port, for
// fault injection on client traffic to this member. Do not Close it.
func (m *Member) ClientProxy() *Proxy { return m.cli }

// PeerProxy returns the proxy in front of the member's peer port: it carries
// the connections that other members open to this one (raft traffic in both
// directions flows over connections opened by both sides). Do not Close it.
func (m *Member) PeerProxy() *Proxy { return m.peer }

// Etcd returns the running embedded server, or nil after Kill.
func (m *Member) Etcd() *embed.Etcd {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd
}

// Client returns a client of this member alone, closed when t's test ends.
func (m *Member) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return m.c.client(t, []string{m.ClientURL()})
}

// WaitReady waits until the member is ready, failing the test on timeout.
func (m *Member) WaitReady() {
	m.c.helper()
	if err := m.waitReady(m.c.cfg.startTimeout); err != nil {
		m.c.fail("%v", err)
	}
}

// Endpoint returns the server's client URL.
func (s *Server) Endpoint() string { return s.members[0].ClientURL() }

// Etcd returns the running embedded server (nil after Kill).
func (s *Server) Etcd() *embed.Etcd { return s.members[0].Etcd() }

// logger returns a zap logger that writes into the cluster's log buffer.
func (c *Cluster) logger(member string) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(c.logs), c.cfg.logLevel)
	return zap.New(core).Named(member)
}

// logBuffer keeps the last max bytes written to it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
