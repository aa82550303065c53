package main

import (
	"context"

	"net"
	"net/url"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/internal/etcdnode"
	"github.com/spf13/cobra"
)

type etcdOpts struct {
	cfg etcdnode.Config
}

func newEtcdCmd(g *globalOpts) *cobra.Command {
	o := &etcdOpts{}
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run an embedded etcd member, for development and test clusters",
		Long: `Run one etcd member embedded in this binary (etcd's own server code), with
auto-compaction on, so a development or test cluster needs nothing else. A
single member by default; for a static cluster start each member with the same
--initial-cluster. For production, run etcd itself.`,
		Example: `  leasehold etcd --data ./etcd-1
  leasehold etcd --name m1 --data ./m1 --listen-client http://127.0.0.1:2379 --listen-peer http://127.0.0.1:2380 \
      --initial-cluster m1=http://127.0.0.1:2380,m2=http://127.0.0.1:2382,m3=http://127.0.0.1:2384`,
		Args: argsBetween(0, 0, "[--data DIR] [--name N] [--listen-client URL] [--listen-peer URL] [--initial-cluster ...]"),
		RunE: action(func(cmd *cobra.Command, _ []string) error { return runEtcd(cmd, g, o) }),
	}
	f := cmd.Flags()
	f.StringVar(&o.cfg.Dir, "data", "./etcd-data", "data directory of the member")
	noEnv(cmd, "data") // LEASEHOLD_DATA is the daemon's store
	f.StringVar(&o.cfg.Name, "name", "default", "member name")
	f.StringVar(&o.cfg.ClientURL, "listen-client", "http://127.0.0.1:2379", "client URL (listened on and advertised)")
	f.StringVar(&o.cfg.PeerURL, "listen-peer", "http://127.0.0.1:2380", "peer URL (listened on and advertised)")
	f.StringVar(&o.cfg.InitialCluster, "initial-cluster", "", "NAME=PEER_URL,... of every member of a new cluster (default: this member alone)")
	f.StringVar(&o.cfg.AutoCompactionRetention, "auto-compaction-retention", "5m", "revision history kept (periodic auto-compaction)")
	f.DurationVar(&o.cfg.ElectionTimeout, "election-timeout", time.Second, "raft election timeout")
	f.DurationVar(&o.cfg.HeartbeatInterval, "heartbeat-interval", 100*time.Millisecond, "raft heartbeat interval")
	f.StringVar(&o.cfg.LogLevel, "etcd-log-level", "error", "etcd's own log level")
	return cmd
}

func runEtcd(cmd *cobra.Command, g *globalOpts, o *etcdOpts) error {
	log, err := newLogger(g, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	// etcd checks most of these only after it has created the data
	// directory, exits 1 with a stack trace on some, and panics on a bad
	// log level: bad input is refused here, before anything is written.
	if err := o.validate(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	n, err := etcdnode.Start(sctx, o.cfg)
	if err != nil {
		return failf("%v: check the URLs and --initial-cluster, and that the ports are free", err)
	}
	log.Info("etcd member serving", "name", o.cfg.Name, "client_url", n.ClientURL(), "data", o.cfg.Dir)
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

// validate refuses bad flags with a usage error.
func (o *etcdOpts) validate() error {
	c := o.cfg
	if strings.TrimSpace(c.Dir) == "" {
		return usagef("--data is empty: name the member's data directory")
	}
	if strings.TrimSpace(c.Name) == "" || strings.ContainsAny(c.Name, "=,") {
		return usagef("--name %q: want a name without '=' or ',', such as m1", c.Name)
	}
	if err := checkEtcdURL("--listen-client", c.ClientURL); err != nil {
		return err
	}
	if err := checkEtcdURL("--listen-peer", c.PeerURL); err != nil {
		return err
	}
	if c.InitialCluster != "" {
		var names []string
		for _, m := range strings.Split(c.InitialCluster, ",") {
			name, u, ok := strings.Cut(strings.TrimSpace(m), "=")
			if !ok || name == "" {
				return usagef("--initial-cluster %q: %q is not NAME=PEER_URL", c.InitialCluster, m)
			}
			if err := checkEtcdURL("--initial-cluster member "+name, u); err != nil {
				return err
			}
			names = append(names, name)
		}
		if !slices.Contains(names, c.Name) {
			return usagef("--initial-cluster %q does not name this member %q: add %s=%s", c.InitialCluster, c.Name, c.Name, c.PeerURL)
		}
	}
	if !slices.Contains(etcdLogLevels, c.LogLevel) {
		return usagef("--etcd-log-level %q: want %s", c.LogLevel, strings.Join(etcdLogLevels, ", "))
	}
	if c.HeartbeatInterval < time.Millisecond {
		return usagef("--heartbeat-interval %s: want at least 1ms, such as 100ms", c.HeartbeatInterval)
	}
	if c.ElectionTimeout < 5*c.HeartbeatInterval || c.ElectionTimeout > maxEtcdElection {
		return usagef("--election-timeout %s: want at least 5 times --heartbeat-interval (%s) and at most %s", c.ElectionTimeout, c.HeartbeatInterval, maxEtcdElection)
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
			return usagef("--auto-compaction-retention %q: want a duration such as 5m or 1h", r)
		}
	}
	return nil
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
