package main

import (
	"context"
	"os/signal"
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
