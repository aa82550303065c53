package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/etcdnode"
	"github.com/spf13/cobra"
)

type etcdOpts struct {
	cfg               etcdnode.Config
	quota, maxRequest sizeValue
}

func newEtcdCmd(g *globalOpts) *cobra.Command {
	o := &etcdOpts{}
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run an embedded etcd member, for development and test clusters",
		Long: `Run one etcd member embedded in this binary (etcd's own server code), with
auto-compaction on, so a development or test cluster needs nothing else. A
single member by default; for a static cluster start each member with the same
--initial-cluster. To grow a running cluster, add the member first
(etcdctl member add NAME --peer-urls=URL), then start it with
--initial-cluster-state existing and, as --initial-cluster, the
ETCD_INITIAL_CLUSTER etcdctl printed (every member, this one included). For
production, run etcd itself.`,
		Example: `  leasehold etcd --data ./etcd-1
  leasehold etcd --name m1 --data ./m1 --listen-client http://127.0.0.1:2379 --listen-peer http://127.0.0.1:2380 \
      --initial-cluster m1=http://127.0.0.1:2380,m2=http://127.0.0.1:2382,m3=http://127.0.0.1:2384
  leasehold etcd --data ./etcd-1 --listen-client http://0.0.0.0:2379 --advertise-client http://10.0.0.1:2379 \
      --listen-peer http://0.0.0.0:2380 --advertise-peer http://10.0.0.1:2380
  etcdctl --endpoints http://127.0.0.1:2379 member add m2 --peer-urls=http://127.0.0.1:2382
  leasehold etcd --name m2 --data ./m2 --listen-client http://127.0.0.1:2381 --listen-peer http://127.0.0.1:2382 \
      --initial-cluster-state existing --initial-cluster m1=http://127.0.0.1:2380,m2=http://127.0.0.1:2382`,
		Args: argsBetween(0, 0, "[--data DIR] [--name N] [--listen-client URL] [--listen-peer URL] [--advertise-client URL] [--advertise-peer URL] [--initial-cluster ...] [--initial-cluster-state new|existing]"),
		RunE: action(func(cmd *cobra.Command, _ []string) error { return runEtcd(cmd, g, o) }),
	}
	f := cmd.Flags()
	f.StringVar(&o.cfg.Dir, "data", "./etcd-data", "data directory of the member")
	noEnv(cmd, "data") // LEASEHOLD_DATA is the daemon's store
	f.StringVar(&o.cfg.Name, "name", "default", "member name")
	f.StringVar(&o.cfg.ClientURL, "listen-client", "http://127.0.0.1:2379", "client URL to listen on (and advertise, without --advertise-client)")
	f.StringVar(&o.cfg.PeerURL, "listen-peer", "http://127.0.0.1:2380", "peer URL to listen on (and advertise, without --advertise-peer)")
	f.StringVar(&o.cfg.AdvertiseClientURL, "advertise-client", "", "client URL given to clients and other members (default: --listen-client)")
	f.StringVar(&o.cfg.AdvertisePeerURL, "advertise-peer", "", "peer URL given to other members, this member's entry in --initial-cluster (default: --listen-peer)")
	f.StringVar(&o.cfg.InitialCluster, "initial-cluster", "", "NAME=ADVERTISED_PEER_URL,... of every member of a new cluster, or of the cluster it joins (default: this member alone)")
	f.StringVar(&o.cfg.InitialClusterState, "initial-cluster-state", etcdnode.ClusterStateNew, "new: start a new cluster; existing: join a running one after 'etcdctl member add' (read on the first start only)")
	f.StringVar(&o.cfg.AutoCompactionRetention, "auto-compaction-retention", "5m", "revision history kept (periodic auto-compaction)")
	f.Var(&o.quota, "quota-backend-bytes", "size at which the member refuses writes until defragmented (e.g. 8GiB; default etcd's 2GiB)")
	f.Var(&o.maxRequest, "max-request-bytes", "largest client request the member takes (e.g. 4MiB; default etcd's 1.5MiB); daemons and clients then need --etcd-max-request-bytes to match")
	f.DurationVar(&o.cfg.ElectionTimeout, "election-timeout", time.Second, "raft election timeout")
	f.DurationVar(&o.cfg.HeartbeatInterval, "heartbeat-interval", 100*time.Millisecond, "raft heartbeat interval")
	f.StringVar(&o.cfg.LogLevel, "etcd-log-level", "error", "etcd's own log level")
	f.StringVar(&o.cfg.ClientTLS.CertFile, "cert-file", "", "serve clients over TLS with this certificate (PEM; with --key-file and an https --listen-client)")
	f.StringVar(&o.cfg.ClientTLS.KeyFile, "key-file", "", "key of --cert-file (PEM)")
	f.StringVar(&o.cfg.ClientTLS.TrustedCAFile, "trusted-ca-file", "", "CA (PEM) that signs the client certificates --client-cert-auth requires")
	f.BoolVar(&o.cfg.ClientTLS.ClientCertAuth, "client-cert-auth", false, "require a client certificate signed by --trusted-ca-file")
	f.StringVar(&o.cfg.PeerTLS.CertFile, "peer-cert-file", "", "talk to other members over TLS with this certificate (PEM; with --peer-key-file and https peer URLs)")
	f.StringVar(&o.cfg.PeerTLS.KeyFile, "peer-key-file", "", "key of --peer-cert-file (PEM)")
	f.StringVar(&o.cfg.PeerTLS.TrustedCAFile, "peer-trusted-ca-file", "", "CA (PEM) that signs the peer certificates --peer-client-cert-auth requires")
	f.BoolVar(&o.cfg.PeerTLS.ClientCertAuth, "peer-client-cert-auth", false, "require a peer certificate signed by --peer-trusted-ca-file")
	f.BoolVar(&o.cfg.GRPCGateway, "enable-grpc-gateway", false, "also serve etcd's HTTP/JSON gateway (/v3/...) to clients: any web page the host's browser opens can then write and watch every key; for scripts on a host without a browser")
	return cmd
}

func runEtcd(cmd *cobra.Command, g *globalOpts, o *etcdOpts) error {
	log, err := newLogger(g, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer surviveClosedLog()()
	// etcd checks most of these only after it has created the data
	// directory, exits 1 with a stack trace on some, and panics on a bad
	// log level: bad input is refused here, before anything is written.
	if err := o.validate(cmd); err != nil {
		return err
	}
	o.cfg.QuotaBytes, o.cfg.MaxRequestBytes = int64(o.quota), uint(o.maxRequest)
	if o.quota > maxEtcdQuota {
		log.Warn("--quota-backend-bytes is above what etcd advises (8GiB): a large backend slows restarts and defragmentation",
			"quota_backend_bytes", o.quota.String())
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), stopSignals()...)
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	// A member of a cluster of several serves once a quorum of them has
	// started (etcd's own lines wait until then): say so if that takes a
	// while, or the first member started looks hung.
	stopWaiting := func() bool { return false }
	if members := strings.Count(o.cfg.InitialCluster, "="); members > 1 {
		msg := "waiting for a quorum of the members of --initial-cluster: start the others (this one gives up after 60 s)"
		if o.cfg.InitialClusterState == "existing" {
			// Its peers run already: it catches up with them.
			msg = "joining the running cluster: waiting for its members to take this one in (this one gives up after 60 s)"
		}
		stopWaiting = time.AfterFunc(waitingForPeers, func() {
			log.Info(msg, "member", o.cfg.Name, "members", members)
		}).Stop
	}
	n, err := etcdnode.Start(sctx, o.cfg)
	stopWaiting() // served, or failed: no longer waiting
	var dirInUse *etcdnode.DirInUseError
	if errors.As(err, &dirInUse) {
		// Refused before etcd touched it: etcd would wait for the
		// member's lock of it forever.
		by := "another etcd member"
		if dirInUse.PID > 0 {
			by += " (pid " + strconv.Itoa(dirInUse.PID) + ")"
		}
		return failf("%s %s is in use by %s: stop it, or give this member its own data directory",
			flagLabel(cmd, "data"), o.cfg.Dir, by)
	}
	if err != nil && ctx.Err() != nil {
		// A signal (SIGINT, SIGTERM, SIGHUP) while etcd was starting:
		// what it started is closed, or is left to this exit (etcd
		// waits for --data).
		return failf("interrupted before member %s served", o.cfg.Name)
	}
	var inUse *etcdnode.AddrInUseError
	if errors.As(err, &inUse) {
		// etcd logged it with a stack trace, held back (etcdnode); it
		// wrote nothing, so a retry on a free port starts afresh.
		name := "listen-client"
		if inUse.Peer {
			name = "listen-peer"
		}
		return failf("%s %s: address already in use: pick another port with --%s, or stop what holds it",
			flagLabel(cmd, name), inUse.URL, name)
	}
	if err != nil && o.cfg.InitialClusterState == etcdnode.ClusterStateExisting {
		// Most often the member was not added first; etcd left --data
		// without a log, so a retry after the add joins afresh.
		peer := o.cfg.PeerURL
		if o.cfg.AdvertisePeerURL != "" {
			peer = o.cfg.AdvertisePeerURL
		}
		return failf("%v: check that the cluster has this member (etcdctl member add %s --peer-urls=%s), that %s lists every member, this one included, and that the ports are free",
			err, o.cfg.Name, peer, flagLabel(cmd, "initial-cluster"))
	}
	if err != nil {
		return failf("%v: check the URLs and --initial-cluster, and that the ports are free", err)
	}
	log.Info("etcd member serving", "name", o.cfg.Name, "client_url", n.ClientURL(), "listen_client", n.ListenClientURL(),
		"peer_url", n.PeerURL(), "data", o.cfg.Dir)
	if err := n.Wait(ctx); err != nil {
		return failf("%v", err)
	}
	log.Info("etcd member stopped", "name", o.cfg.Name)
	return nil
}

// etcdLogLevels are the levels --etcd-log-level takes.
var etcdLogLevels = []string{"debug", "info", "warn", "error"}

// maxEtcdElection is the longest election timeout etcd accepts.
const maxEtcdElection = 50 * time.Second

// maxEtcdQuota is the largest backend quota etcd advises (it warns above).
const maxEtcdQuota = 8 << 30

// The --max-request-bytes accepted: the least the daemons' payloads fit in
// (as --etcd-max-request-bytes), and well under gRPC's message limits (etcd
// advises at most 10MiB).
const (
	minEtcdRequest = 256 << 10
	maxEtcdRequest = 64 << 20
)

// validate refuses bad flags with a usage error that names each flag as
// the user set it (flagLabel: --name, or its LEASEHOLD_* variable).
func (o *etcdOpts) validate(cmd *cobra.Command) error {
	c := o.cfg
	l := func(name string) string { return flagLabel(cmd, name) }
	if strings.TrimSpace(c.Dir) == "" {
		return usagef("--data is empty: name the member's data directory")
	}
	if o.maxRequest != 0 && (o.maxRequest < minEtcdRequest || o.maxRequest > maxEtcdRequest) {
		return usagef("%s %s: want %s to %s (etcd's default is 1.5MiB)", l("max-request-bytes"), o.maxRequest,
			sizeValue(minEtcdRequest), sizeValue(maxEtcdRequest))
	}
	if strings.TrimSpace(c.Name) == "" || strings.ContainsAny(c.Name, "=,") {
		return usagef("%s %q: want a name without '=' or ',', such as m1", l("name"), c.Name)
	}
	switch c.InitialClusterState {
	case etcdnode.ClusterStateNew, etcdnode.ClusterStateExisting:
	default:
		return usagef("%s %q: want new (start a new cluster) or existing (join a running one, after etcdctl member add)", l("initial-cluster-state"), c.InitialClusterState)
	}
	// A joining member learns the cluster from the other members named in
	// --initial-cluster; etcd, with none, fails after creating --data.
	if c.InitialClusterState == etcdnode.ClusterStateExisting && !etcdnode.HasOtherMembers(c.InitialCluster, c.Name) {
		return usagef("%s existing joins a running cluster: pass %s with every member, this one included (etcdctl member add prints it)", l("initial-cluster-state"), l("initial-cluster"))
	}
	if err := checkEtcdURL(l("listen-client"), c.ClientURL); err != nil {
		return err
	}
	if err := checkEtcdURL(l("listen-peer"), c.PeerURL); err != nil {
		return err
	}
	// What this member advertises is what other members and clients dial
	// (etcd hands it out as is): never an unspecified address.
	for _, a := range []struct{ flag, listenFlag, url, listen string }{
		{l("advertise-client"), l("listen-client"), c.AdvertiseClientURL, c.ClientURL},
		{l("advertise-peer"), l("listen-peer"), c.AdvertisePeerURL, c.PeerURL},
	} {
		if a.url == "" {
			// A lone member advertises what it listens on, as it always
			// did; in a cluster, the others must be able to dial it.
			if etcdnode.Unspecified(a.listen) && etcdnode.HasOtherMembers(c.InitialCluster, c.Name) {
				return usagef("%s %q listens on all interfaces and would be advertised as is, which nobody can dial: pass %s with a routable URL, such as %s",
					a.listenFlag, a.listen, a.flag, routableExample(a.listen))
			}
			continue
		}
		if err := checkEtcdURL(a.flag, a.url); err != nil {
			return err
		}
		if etcdnode.Unspecified(a.url) {
			return usagef("%s %q is an unspecified address that nobody can dial: pass a routable one, such as %s", a.flag, a.url, routableExample(a.url))
		}
	}
	peer, peerFlag := c.PeerURL, l("listen-peer")
	if c.AdvertisePeerURL != "" {
		peer, peerFlag = c.AdvertisePeerURL, l("advertise-peer")
	}
	// etcd takes no path in the initial cluster, whose entry for this
	// member (by default, this URL) must equal it.
	if hasURLPath(peer) {
		return usagef("%s %q has a path, which etcd refuses in a peer URL: drop the trailing /", peerFlag, peer)
	}
	if c.InitialCluster != "" {
		ic := l("initial-cluster")
		var mine []string
		owner := map[string]string{} // peer URL -> member, as etcd compares them
		for _, m := range strings.Split(c.InitialCluster, ",") {
			// Spaces around names and URLs are dropped (etcdnode trims them).
			name, u, ok := strings.Cut(m, "=")
			name, u = strings.TrimSpace(name), strings.TrimSpace(u)
			if !ok || name == "" {
				return usagef("%s %q: %q is not NAME=PEER_URL", ic, c.InitialCluster, m)
			}
			if err := checkEtcdURL(ic+" member "+name, u); err != nil {
				return err
			}
			// A lone member may name itself on 0.0.0.0, which it advertises
			// (as without --initial-cluster); in a cluster, others dial it.
			if etcdnode.Unspecified(u) && etcdnode.HasOtherMembers(c.InitialCluster, c.Name) {
				return usagef("%s member %s %q is an unspecified address that no member can dial: give each member its advertised peer URL", ic, name, u)
			}
			if hasURLPath(u) {
				return usagef("%s member %s %q has a path, which etcd refuses in a peer URL: drop the trailing /", ic, name, u)
			}
			// etcd refuses two members with one peer URL, after it has
			// created the data directory.
			pu, _ := url.Parse(u)
			if other, ok := owner[pu.String()]; ok && other != name {
				return usagef("%s gives members %s and %s the same peer URL %s: give each member its own", ic, other, name, u)
			}
			owner[pu.String()] = name
			if name == c.Name {
				mine = append(mine, u)
			}
		}
		// etcd requires this member's entry to be the peer URL it
		// advertises, and refuses only after it has created the data
		// directory.
		switch {
		case len(mine) == 0:
			return usagef("%s %q does not name this member %q: add %s=%s", ic, c.InitialCluster, c.Name, c.Name, peer)
		case len(mine) > 1:
			return usagef("%s %q names this member %q more than once: give it one entry, %s=%s", ic, c.InitialCluster, c.Name, c.Name, peer)
		case etcdnode.PeerURLsDiffer(mine[0], peer):
			return usagef("%s has %s=%s but this member advertises peer URL %s (%s): make them the same", ic, c.Name, mine[0], peer, peerFlag)
		}
	}
	if err := checkEtcdTLS(cmd, "", c.ClientTLS, c.ClientURL, c.AdvertiseClientURL, "listen-client", "advertise-client"); err != nil {
		return err
	}
	if err := checkEtcdTLS(cmd, "peer-", c.PeerTLS, c.PeerURL, c.AdvertisePeerURL, "listen-peer", "advertise-peer"); err != nil {
		return err
	}
	// etcd would bind the peer URL and then fail on its own listener.
	if etcdnode.SameListenAddr(c.ClientURL, c.PeerURL) {
		return usagef("%s %q and %s %q are the same address: give each its own port", l("listen-client"), c.ClientURL, l("listen-peer"), c.PeerURL)
	}
	if !slices.Contains(etcdLogLevels, c.LogLevel) {
		return usagef("%s %q: want %s", l("etcd-log-level"), c.LogLevel, strings.Join(etcdLogLevels, ", "))
	}
	if c.HeartbeatInterval < time.Millisecond {
		return usagef("%s %s: want at least 1ms, such as 100ms", l("heartbeat-interval"), c.HeartbeatInterval)
	}
	if c.ElectionTimeout < 5*c.HeartbeatInterval || c.ElectionTimeout > maxEtcdElection {
		return usagef("%s %s: want at least 5 times %s (%s) and at most %s", l("election-timeout"), c.ElectionTimeout, l("heartbeat-interval"), c.HeartbeatInterval, maxEtcdElection)
	}
	if r := c.AutoCompactionRetention; r != "" {
		// etcd's periodic mode takes a duration, or a number of hours.
		d, err := time.ParseDuration(r)
		if err != nil {
			var h int64
			h, err = strconv.ParseInt(r, 10, 64)
			d = time.Duration(h) * time.Hour
		}
		if err != nil || d < 0 {
			return usagef("%s %q: want a duration such as 5m or 1h", l("auto-compaction-retention"), r)
		}
	}
	return nil
}

// checkEtcdTLS refuses the TLS flags of one side of the member (prefix
// "" for clients, "peer-" for peers) that etcd would refuse, or start
// with and then fail every connection: a certificate without its key, an
// https URL without a certificate or a certificate for http URLs, client
// certificates required with no CA to check them, files that do not
// load.
func checkEtcdTLS(cmd *cobra.Command, prefix string, t etcdnode.TLSFiles, listen, advertise, listenFlag, advertiseFlag string) error {
	l := func(name string) string { return flagLabel(cmd, name) }
	cert, key, ca, auth := l(prefix+"cert-file"), l(prefix+"key-file"), l(prefix+"trusted-ca-file"), l(prefix+"client-cert-auth")
	if (t.CertFile == "") != (t.KeyFile == "") {
		return usagef("%s and %s go together: pass both, or neither", cert, key)
	}
	if t.ClientCertAuth && t.TrustedCAFile == "" {
		return usagef("%s needs %s, the CA that signs the certificates it requires", auth, ca)
	}
	on := t.CertFile != ""
	if !on && (t.TrustedCAFile != "" || t.ClientCertAuth) {
		return usagef("%s and %s apply to TLS: pass %s and %s too, with https URLs", ca, auth, cert, key)
	}
	for _, u := range []struct{ flag, url string }{{l(listenFlag), listen}, {l(advertiseFlag), advertise}} {
		if u.url == "" {
			continue
		}
		switch https := strings.HasPrefix(u.url, "https://"); {
		case https && !on:
			return usagef("%s %s serves TLS: pass %s and %s", u.flag, u.url, cert, key)
		case !https && on:
			return usagef("%s is given but %s %s is plain http: use https://", cert, u.flag, u.url)
		}
	}
	if !on {
		return nil
	}
	if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
		return usagef("%s %s / %s %s: %s: give a PEM certificate and its key", cert, t.CertFile, key, t.KeyFile, apiserver.OneLine(err.Error()))
	}
	if t.TrustedCAFile != "" {
		pem, err := os.ReadFile(t.TrustedCAFile)
		if err != nil {
			return usagef("%s: %s", ca, apiserver.OneLine(err.Error()))
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return usagef("%s %s holds no PEM certificate", ca, t.TrustedCAFile)
		}
	}
	return nil
}

// routableExample returns a routable URL with the scheme and port of a URL
// that checkEtcdURL accepted, for a message.
func routableExample(s string) string {
	u, _ := url.Parse(s)
	return u.Scheme + "://10.0.0.1:" + u.Port()
}

// hasURLPath reports whether a URL that checkEtcdURL accepted has a path
// ("/").
func hasURLPath(s string) bool {
	u, _ := url.Parse(s)
	return u.Path != ""
}

// checkEtcdURL refuses what etcd cannot listen on: want http(s)://HOST:PORT.
func checkEtcdURL(flag, s string) error {
	u, err := url.Parse(s)
	bad := err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil
	if !bad {
		_, port, perr := net.SplitHostPort(u.Host)
		n, nerr := strconv.Atoi(port)
		bad = perr != nil || nerr != nil || n < 1 || n > 65535
	}
	if bad {
		return usagef("%s %q: want a URL such as http://127.0.0.1:2379", flag, s)
	}
	return nil
}

// waitingForPeers is how long a member of a cluster of several waits for
// the others before it says so.
const waitingForPeers = 3 * time.Second
