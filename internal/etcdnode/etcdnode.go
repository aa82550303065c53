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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/soheilhy/cmux"
	"go.etcd.io/etcd/client/pkg/v3/logutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
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
	// ClientURL is where the member listens for clients. Default:
	// http://127.0.0.1:2379.
	ClientURL string
	// AdvertiseClientURL is the client URL the member gives clients and
	// other members (what MemberList reports). Default: ClientURL. It
	// must be one they can dial: a member listening on all interfaces
	// (0.0.0.0 or ::) needs it.
	AdvertiseClientURL string
	// Dir is the data directory. Default: ./etcd-data/NAME.
	Dir string
	// ElectionTimeout and HeartbeatInterval tune raft. Defaults: 1s, 100ms.
	ElectionTimeout, HeartbeatInterval time.Duration
	// InitialCluster is "name=peerURL,..." of every member of a new static
	// cluster, or of the running cluster this member joins (with
	// InitialClusterState "existing"), this member included. Default: this
	// member alone.
	InitialCluster string
	// InitialClusterState is ClusterStateNew to start a new cluster, or
	// ClusterStateExisting to join a running one that this member was
	// added to first (etcdctl member add, clientv3's MemberAdd). Default:
	// new. etcd reads it only on a member's first start: one with data
	// restarts from it.
	InitialClusterState string
	// LogLevel of etcd's own logs: debug, info, warn, error. Default: error.
	LogLevel string
	// Name of the member. Default: "default".
	Name string
	// PeerURL is where the member listens for other members. Default:
	// http://127.0.0.1:2380.
	PeerURL string
	// AdvertisePeerURL is the peer URL the member gives other members,
	// and the one etcd requires as its entry in InitialCluster. Default:
	// PeerURL; as AdvertiseClientURL, never an unspecified address.
	AdvertisePeerURL string
	// QuotaBytes caps the backend size. Default: etcd's (2 GiB).
	QuotaBytes int64
	// MaxRequestBytes is the largest client request the member takes.
	// Default: etcd's (1.5 MiB).
	MaxRequestBytes uint
	// ClusterToken separates clusters that share hosts. Default: "leasehold".
	ClusterToken string
	// ClientTLS serves clients over TLS (ClientURL https://); PeerTLS,
	// the other members (PeerURL https://). Zero: plain TCP.
	ClientTLS, PeerTLS TLSFiles
	// GRPCGateway serves etcd's HTTP/JSON gateway (/v3/kv/range, ...)
	// beside gRPC on the client URL. Off by default: a web page can send
	// it a form's POST, which it takes as a write (a delete of every key),
	// and read its watches over a WebSocket. Clients (the daemons, the
	// CLI, etcdctl) speak gRPC.
	GRPCGateway bool
}

// TLSFiles are the PEM files of one side of a member, as etcd's
// --cert-file, --key-file, --trusted-ca-file and --client-cert-auth (or
// their --peer-* forms) take them.
type TLSFiles struct {
	CertFile, KeyFile string
	// TrustedCAFile signs the certificates that ClientCertAuth requires
	// of every client (or peer).
	TrustedCAFile  string
	ClientCertAuth bool
}

func (f TLSFiles) info() transport.TLSInfo {
	return transport.TLSInfo{CertFile: f.CertFile, KeyFile: f.KeyFile, TrustedCAFile: f.TrustedCAFile, ClientCertAuth: f.ClientCertAuth}
}

// The values of Config.InitialClusterState, as etcd's
// --initial-cluster-state takes them.
const (
	ClusterStateNew      = embed.ClusterStateFlagNew
	ClusterStateExisting = embed.ClusterStateFlagExisting
)

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
	// Which advertise URLs were left to their default decides what an
	// unspecified one is blamed on.
	ownClient, ownPeer := c.AdvertiseClientURL != "", c.AdvertisePeerURL != ""
	if !ownClient {
		c.AdvertiseClientURL = c.ClientURL
	}
	if !ownPeer {
		c.AdvertisePeerURL = c.PeerURL
	}
	switch c.InitialClusterState {
	case "":
		c.InitialClusterState = ClusterStateNew
	case ClusterStateNew, ClusterStateExisting:
	default:
		return c, fmt.Errorf("etcdnode: InitialClusterState %q: want %q or %q", c.InitialClusterState, ClusterStateNew, ClusterStateExisting)
	}
	// A joining member learns the cluster from the other members of its
	// initial cluster: etcd, alone in it, would fail to fetch the cluster
	// after it has created the data directory.
	if c.InitialClusterState == ClusterStateExisting && !HasOtherMembers(c.InitialCluster, c.Name) {
		return c, fmt.Errorf("etcdnode: InitialClusterState %q joins a running cluster: set InitialCluster to every member of it, this one included", ClusterStateExisting)
	}
	if c.InitialCluster == "" {
		c.InitialCluster = c.Name + "=" + c.AdvertisePeerURL
	}
	c.InitialCluster = trimInitialCluster(c.InitialCluster)
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
	for _, u := range []string{c.ClientURL, c.PeerURL, c.AdvertiseClientURL, c.AdvertisePeerURL} {
		if _, err := url.Parse(u); err != nil || !strings.Contains(u, "://") {
			return c, fmt.Errorf("etcdnode: bad URL %q: want http://HOST:PORT", u)
		}
	}
	if SameListenAddr(c.ClientURL, c.PeerURL) {
		return c, fmt.Errorf("etcdnode: ClientURL %q and PeerURL %q are the same address: give each its own port", c.ClientURL, c.PeerURL)
	}
	// etcd advertises an unspecified address as it is given: members and
	// clients that learn it from the cluster cannot dial it.
	for _, a := range []struct {
		field, listenField, url string
		own                     bool
	}{
		{"AdvertiseClientURL", "ClientURL", c.AdvertiseClientURL, ownClient},
		{"AdvertisePeerURL", "PeerURL", c.AdvertisePeerURL, ownPeer},
	} {
		if !Unspecified(a.url) {
			continue
		}
		// A lone member listening on all interfaces advertises that, as
		// it always did: no member dials it, and leasehold's clients dial
		// the endpoints they are given (no auto-sync).
		if !a.own && !HasOtherMembers(c.InitialCluster, c.Name) {
			continue
		}
		if a.own {
			return c, fmt.Errorf("etcdnode: %s %q is an unspecified address that nobody can dial: set a routable one", a.field, a.url)
		}
		return c, fmt.Errorf("etcdnode: %s %q listens on all interfaces and would be advertised as is, which nobody can dial: set %s to a routable URL", a.listenField, a.url, a.field)
	}
	peers := memberPeerURLs(c.InitialCluster, c.Name)
	switch {
	case len(peers) == 0:
		return c, fmt.Errorf("etcdnode: --initial-cluster %q does not name this member %q", c.InitialCluster, c.Name)
	case len(peers) > 1:
		return c, fmt.Errorf("etcdnode: --initial-cluster %q names member %q more than once: give it one peer URL, %s", c.InitialCluster, c.Name, c.AdvertisePeerURL)
	case PeerURLsDiffer(peers[0], c.AdvertisePeerURL):
		return c, fmt.Errorf("etcdnode: --initial-cluster has %s=%s but the member advertises peer URL %s: make them the same", c.Name, peers[0], c.AdvertisePeerURL)
	}
	return c, nil
}

// trimInitialCluster drops the spaces around the names and URLs of the
// initial cluster "name=peerURL, name=peerURL": etcd would keep those
// around a name (member " m2"), and so refuse to start member m2.
func trimInitialCluster(ic string) string {
	ms := strings.Split(ic, ",")
	for i, m := range ms {
		if n, u, ok := strings.Cut(m, "="); ok {
			ms[i] = strings.TrimSpace(n) + "=" + strings.TrimSpace(u)
		}
	}
	return strings.Join(ms, ",")
}

// memberPeerURLs returns the peer URLs that the initial cluster
// "name=peerURL,..." gives member name, as etcd reads it (after
// trimInitialCluster). A substring match is not enough: "m1" is not a
// member of "xm1=...", and etcd, which would refuse it, creates the data
// directory first.
func memberPeerURLs(initialCluster, name string) []string {
	var urls []string
	for _, m := range strings.Split(initialCluster, ",") {
		if n, u, ok := strings.Cut(m, "="); ok && n == name {
			urls = append(urls, u)
		}
	}
	return urls
}

// HasOtherMembers reports whether the initial cluster "name=peerURL,..."
// names a member other than name (an empty one names none).
func HasOtherMembers(initialCluster, name string) bool {
	for _, m := range strings.Split(initialCluster, ",") {
		if n, _, _ := strings.Cut(strings.TrimSpace(m), "="); n != "" && n != name {
			return true
		}
	}
	return false
}

// Unspecified reports whether the host of rawURL is an unspecified
// address (0.0.0.0, ::) or empty: one to listen on all interfaces with,
// which nobody can dial.
func Unspecified(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if h == "" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsUnspecified()
}

// PeerURLsDiffer reports whether peer URLs a and b surely name different
// endpoints, which etcd refuses for a member's advertised peer URL and its
// entry in the initial cluster: schemes, paths or port numbers that
// differ, different IP addresses, or "localhost" against another host
// (etcd does not resolve localhost, so it never equals an address). Other
// host names are left to etcd, which resolves them before it compares.
func PeerURLsDiffer(a, b string) bool {
	// etcd trims spaces around the URLs of the initial cluster.
	ua, erra := url.Parse(strings.TrimSpace(a))
	ub, errb := url.Parse(strings.TrimSpace(b))
	if erra != nil || errb != nil {
		return false
	}
	if !strings.EqualFold(ua.Scheme, ub.Scheme) || ua.Path != ub.Path {
		return true
	}
	// etcd compares port numbers: 02380 is 2380.
	pa, perra := strconv.Atoi(ua.Port())
	pb, perrb := strconv.Atoi(ub.Port())
	if perra != nil || perrb != nil {
		if ua.Port() != ub.Port() {
			return true
		}
	} else if pa != pb {
		return true
	}
	ha, hb := ua.Hostname(), ub.Hostname()
	if (ha == "localhost") != (hb == "localhost") {
		return true
	}
	ipa, ipb := net.ParseIP(ha), net.ParseIP(hb)
	return ipa != nil && ipb != nil && !ipa.Equal(ipb)
}

// AddrInUseError is Start's error when something else already listens on
// the address of the member's ClientURL or PeerURL. Nothing was written
// to the data directory: a retry on a free address starts afresh.
type AddrInUseError struct {
	Peer bool   // PeerURL's address; else ClientURL's
	URL  string // the listen URL
	Err  error  // the listen error (EADDRINUSE)
}

func (e *AddrInUseError) Error() string {
	what := "client"
	if e.Peer {
		what = "peer"
	}
	return fmt.Sprintf("etcdnode: %s URL %s: address already in use", what, e.URL)
}

func (e *AddrInUseError) Unwrap() error { return e.Err }

// addrInUse returns err as an *AddrInUseError if it is a listen error for
// the address of the peer or client URL (etcd listens on the peer URL
// first), else nil.
func addrInUse(err error, cfg Config) error {
	var oe *net.OpError
	if !errors.Is(err, syscall.EADDRINUSE) || !errors.As(err, &oe) || oe.Op != "listen" {
		return nil
	}
	ta, ok := oe.Addr.(*net.TCPAddr)
	if !ok {
		return nil
	}
	urls := []struct {
		peer bool
		url  string
	}{{true, cfg.PeerURL}, {false, cfg.ClientURL}}
	// A URL naming the address exactly first; then one naming a host
	// (etcd resolved it), which could be either.
	for _, exact := range []bool{true, false} {
		for _, c := range urls {
			if listensOn(c.url, ta, exact) {
				return &AddrInUseError{Peer: c.peer, URL: c.url, Err: err}
			}
		}
	}
	return nil
}

// listensOn reports whether listen URL rawURL can be what bound addr: same
// port and the URL's address (or all interfaces); with exact false, a URL
// naming a host matches too.
func listensOn(rawURL string, addr *net.TCPAddr, exact bool) bool {
	u, err := url.Parse(rawURL)
	if err != nil || u.Port() != strconv.Itoa(addr.Port) {
		return false
	}
	ip := hostIP(u.Hostname())
	if ip == nil {
		return !exact
	}
	return ip.Equal(addr.IP) || (ip.IsUnspecified() && (addr.IP == nil || addr.IP.IsUnspecified()))
}

// hostIP returns the address host names: itself if it is one, the
// loopback address for localhost, else nil.
func hostIP(host string) net.IP {
	if strings.EqualFold(host, "localhost") {
		return net.IPv4(127, 0, 0, 1)
	}
	return net.ParseIP(host)
}

// SameListenAddr reports whether listen URLs a and b would bind the same
// port on overlapping addresses (the same one, or one of them all
// interfaces), which no second listener can: a member given them as its
// client and peer URLs fails on its own peer listener.
func SameListenAddr(a, b string) bool {
	ua, erra := url.Parse(a)
	ub, errb := url.Parse(b)
	if erra != nil || errb != nil || ua.Port() != ub.Port() {
		return false
	}
	if Unspecified(a) || Unspecified(b) {
		return true
	}
	ha, hb := ua.Hostname(), ub.Hostname()
	ia, ib := hostIP(ha), hostIP(hb)
	if ia != nil && ib != nil {
		return ia.Equal(ib)
	}
	return ha == hb
}

// Node is a running member.
type Node struct {
	e         *embed.Etcd
	cfg       Config
	closeOnce sync.Once
	stopping  *atomic.Bool // set before e.Close: see quietStopCore
}

// Start starts the member and waits until it serves or ctx ends. A member
// of a multi-member cluster is ready only once a quorum has started. A
// listen address that something else holds is an *AddrInUseError; a data
// directory that a running member holds, a *DirInUseError.
//
// etcd's start cannot be interrupted (it waits without end for a data
// directory that another member took meanwhile): when ctx ends first,
// Start returns at once and leaves it to finish in the background, and
// closes the member it starts.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// Before etcd binds a port or touches the directory (it cleans up its
	// snap directory before it opens the backend).
	if err := dirFree(cfg.Dir); err != nil {
		return nil, err
	}
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	cu, _ := url.Parse(cfg.ClientURL)
	pu, _ := url.Parse(cfg.PeerURL)
	acu, _ := url.Parse(cfg.AdvertiseClientURL)
	apu, _ := url.Parse(cfg.AdvertisePeerURL)
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*acu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*apu}
	ec.InitialCluster = cfg.InitialCluster
	ec.InitialClusterToken = cfg.ClusterToken
	ec.ClusterState = cfg.InitialClusterState
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = cfg.AutoCompactionRetention
	ec.TickMs = uint(cfg.HeartbeatInterval / time.Millisecond)
	ec.ElectionMs = uint(cfg.ElectionTimeout / time.Millisecond)
	ec.LogLevel = cfg.LogLevel
	// Stop with no handler left running: etcd 3.7 closes its backend once
	// gRPC has stopped, and gRPC stops without waiting for handlers whose
	// connection is gone, so a RangeStream still reading (a daemon's scan)
	// panics on the closed backend.
	ec.GRPCAdditionalServerOptions = append(ec.GRPCAdditionalServerOptions, grpc.WaitForHandlers(true))
	stopping, hold := new(atomic.Bool), newStartHold()
	lg, err := newLogger(cfg.LogLevel, stopping, hold)
	if err != nil {
		return nil, fmt.Errorf("etcdnode: member %s: build etcd's logger: %w", cfg.Name, err)
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	if cfg.QuotaBytes > 0 {
		ec.QuotaBackendBytes = cfg.QuotaBytes
	}
	if cfg.MaxRequestBytes > 0 {
		ec.MaxRequestBytes = cfg.MaxRequestBytes
	}
	ec.ClientTLSInfo, ec.PeerTLSInfo = cfg.ClientTLS.info(), cfg.PeerTLS.info()
	ec.EnableGRPCGateway = cfg.GRPCGateway
	// No answer allows another origin to read it (etcd's default, "*",
	// let any web page read the gateway's answers). etcd reads an empty
	// set as every origin: this one holds an origin no browser sends.
	ec.CORS = map[string]struct{}{"leasehold-no-cross-origin": {}}
	e, err := startEtcd(ctx, ec, hold, stopping)
	if err != nil {
		if ae := addrInUse(err, cfg); ae != nil {
			return nil, ae
		}
		return nil, fmt.Errorf("etcdnode: start member %s in %s: %w", cfg.Name, cfg.Dir, err)
	}
	n := &Node{e: e, cfg: cfg, stopping: stopping}
	startedHook()
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
		n.Close()
		return nil, fmt.Errorf("etcdnode: member %s not ready: %w", cfg.Name, ctx.Err())
	}
}

// startedHook runs once etcd has started, before Start waits for the
// member to be ready: a test ends Start's context there.
var startedHook = func() {}

// starting counts the goroutines that run embed.StartEtcd, those that
// Start gave up on included: tests wait for them.
var starting sync.WaitGroup

// startEtcd runs embed.StartEtcd, ending the hold when it returns, until
// ctx ends: then it returns ctx's error and leaves the start to a
// goroutine, which closes the member if it starts.
func startEtcd(ctx context.Context, ec *embed.Config, hold *startHold, stopping *atomic.Bool) (*embed.Etcd, error) {
	type result struct {
		e   *embed.Etcd
		err error
	}
	res, gaveUp := make(chan result), make(chan struct{})
	starting.Add(1)
	go func() {
		defer starting.Done()
		e, err := embed.StartEtcd(ec)
		hold.release(err)
		select {
		case res <- result{e, err}:
		case <-gaveUp:
			if e != nil {
				closeEtcd(e, stopping)
			}
		}
	}()
	select {
	case r := <-res:
		return r.e, r.err
	case <-ctx.Done():
		close(gaveUp)
		return nil, ctx.Err()
	}
}

// ClientURL returns the client URL the member advertises: the one to dial.
func (n *Node) ClientURL() string { return n.cfg.AdvertiseClientURL }

// ListenClientURL returns the client URL the member listens on.
func (n *Node) ListenClientURL() string { return n.cfg.ClientURL }

// PeerURL returns the peer URL the member advertises.
func (n *Node) PeerURL() string { return n.cfg.AdvertisePeerURL }

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
		closeEtcd(n.e, n.stopping)
	})
}

// closeEtcd sets stopping, then closes e. A member not ready yet is
// stopped first: etcd's Close waits for its client servers, which wait
// until the member is ready or stopping. Stopping set first makes that
// stop quiet too (quietStopCore).
func closeEtcd(e *embed.Etcd, stopping *atomic.Bool) {
	stopping.Store(true)
	if e.Server != nil {
		select {
		case <-e.Server.ReadyNotify():
		default:
			e.Server.Stop()
		}
	}
	e.Close()
}

// newLogger builds etcd's logger as etcd itself would (JSON on stderr, at
// level), except that once stopping is set the errors of listeners being
// closed are logged at level info (quietStopCore), and that what etcd logs
// while hold is on waits for hold.release.
func newLogger(level string, stopping *atomic.Bool, hold *startHold) (*zap.Logger, error) {
	c := logutil.DefaultZapLoggerConfig
	c.OutputPaths, c.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	c.Level = zap.NewAtomicLevelAt(logutil.ConvertToZapLevel(level))
	return c.Build(zap.WrapCore(func(core zapcore.Core) zapcore.Core {
		if logTee != nil {
			core = zapcore.NewTee(core, logTee)
		}
		return &quietStopCore{Core: core, stopping: stopping, hold: hold}
	}))
}

// logTee, if set (by a test), also gets what etcd's logger writes to
// stderr; it must be enabled at the same level.
var logTee zapcore.Core

// startHold keeps back what etcd logs while embed.StartEtcd runs. etcd
// logs some of the errors it returns, at level error with a stack trace (a
// peer port already taken): Start's error reports those, once, in its own
// words; the rest is written, in order, when StartEtcd returns.
type startHold struct {
	on   atomic.Bool // read without mu by Check
	mu   sync.Mutex  // orders the writes of held and later entries
	held []heldEntry
}

type heldEntry struct {
	core   zapcore.Core
	ent    zapcore.Entry
	fields []zapcore.Field
}

func newStartHold() *startHold {
	h := &startHold{}
	h.on.Store(true)
	return h
}

// write holds the entry while the hold is on; otherwise it writes it. An
// entry at level dpanic or above, after which zap may end the process,
// first writes all that was held.
func (h *startHold) write(core zapcore.Core, ent zapcore.Entry, fields []zapcore.Field) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.on.Load() {
		if ent.Level < zapcore.DPanicLevel {
			h.held = append(h.held, heldEntry{core: core, ent: ent, fields: fields})
			return nil
		}
		h.flush(nil)
	}
	return core.Write(ent, fields)
}

// release ends the hold and writes what it held, except the entries about
// err, which StartEtcd returned (and Start reports).
func (h *startHold) release(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flush(err)
}

// flush ends the hold and writes what it held, except the entries about
// err; h.mu is held.
func (h *startHold) flush(err error) {
	for _, e := range h.held {
		if err != nil && aboutErr(e.fields, err) {
			continue
		}
		_ = e.core.Write(e.ent, e.fields)
	}
	h.held = nil
	// Off only now: an entry logged meanwhile saw the hold on and waited
	// for h.mu, so it is written after the held ones, not before.
	h.on.Store(false)
}

// aboutErr reports whether fields hold an error that err is or wraps.
func aboutErr(fields []zapcore.Field, err error) bool {
	for _, f := range fields {
		if fe, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType && errors.Is(err, fe) {
			return true
		}
	}
	return false
}

// quietStopCore logs at level info what etcd logs at levels warn and error
// once Close has begun, about the error of a listener or server that Close
// closed: its serving goroutines each log one at level error, four on
// every clean stop, although nothing failed. Any other error, and any
// error before the stop, keeps its level.
type quietStopCore struct {
	zapcore.Core
	stopping *atomic.Bool
	hold     *startHold // nil: none
}

func (c *quietStopCore) With(fields []zapcore.Field) zapcore.Core {
	return &quietStopCore{Core: c.Core.With(fields), stopping: c.stopping, hold: c.hold}
}

func (c *quietStopCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if (ent.Level >= zapcore.WarnLevel && c.stopping.Load()) || c.holding() {
		return ce.AddCore(ent, c) // Write decides, seeing the error
	}
	return c.Core.Check(ent, ce)
}

// holding reports whether the start hold is on.
func (c *quietStopCore) holding() bool { return c.hold != nil && c.hold.on.Load() }

func (c *quietStopCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	if ent.Level >= zapcore.WarnLevel && c.stopping.Load() && closedListener(fields) {
		ent.Level, ent.Stack = zapcore.InfoLevel, ""
	}
	if !c.Core.Enabled(ent.Level) {
		return nil
	}
	if c.holding() {
		return c.hold.write(c.Core, ent, fields)
	}
	return c.Core.Write(ent, fields)
}

// errServerStopping is the text of the error (no sentinel) that etcd's
// client servers return, and log at level error with a stack trace, when
// the member stops before it was ready: a member stopped while it waits
// for its peers.
const errServerStopping = "server is stopping"

// closedListener reports whether fields hold an error that says a
// listener or server was closed, or that the member stopped before its
// servers began.
func closedListener(fields []zapcore.Field) bool {
	for _, f := range fields {
		err, ok := f.Interface.(error)
		if f.Type != zapcore.ErrorType || !ok {
			continue
		}
		if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) ||
			errors.Is(err, cmux.ErrServerClosed) || errors.Is(err, cmux.ErrListenerClosed) ||
			errors.Is(err, grpc.ErrServerStopped) || err.Error() == errServerStopping {
			return true
		}
	}
	return false
}
