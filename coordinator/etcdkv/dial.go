package etcdkv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Config says how to reach an etcd cluster.
type Config struct {
	// Endpoints are the members' client URLs, e.g. "https://10.0.0.1:2379".
	Endpoints []string

	// CAFile verifies the servers' certificates (PEM); empty uses the
	// system roots when TLS is on. CertFile and KeyFile are the client's
	// certificate and key (PEM) for servers that require one; give both or
	// neither. Any of the three turns TLS on.
	CAFile, CertFile, KeyFile string
	// ServerName overrides the name checked in the servers' certificates.
	ServerName string

	// Username and Password authenticate with etcd's own auth.
	Username, Password string

	// DialTimeout bounds Dial's check that the cluster answers, and
	// clientv3's own auth and version requests. Default 5 s.
	DialTimeout time.Duration
	// KeepAliveTime is how often gRPC pings the server while requests or
	// streams are open, and KeepAliveTimeout how long it waits for the
	// answer before it closes the connection: this is what detects a
	// connection whose packets are silently dropped, which TCP alone does
	// not for many minutes. Defaults 10 s and 5 s. gRPC raises any
	// KeepAliveTime below 10 s to 10 s, so detection takes at least
	// 10 s + KeepAliveTimeout (measured: 11.8 s with a 2 s timeout, for
	// KeepAliveTime 2 s and 10 s alike). That is longer than short lease
	// TTLs: a session must not count on it, but on deadlines of its own.
	KeepAliveTime, KeepAliveTimeout time.Duration

	// MaxCallSendMsgSize is the largest request the client sends (default
	// 2 MiB); raise it with the servers' --max-request-bytes.
	MaxCallSendMsgSize int

	// Logger receives clientv3's logs; nil discards them.
	Logger *zap.Logger

	// FailFast makes Dial fail at once when every endpoint refuses the
	// connection (nothing listens there), instead of retrying until
	// DialTimeout: for a command that a user waits on. A daemon leaves it
	// off, to wait out a member's restart.
	FailFast bool
}

// Defaults for Config.
const (
	DefaultDialTimeout      = 5 * time.Second
	DefaultKeepAliveTime    = 10 * time.Second
	DefaultKeepAliveTimeout = 5 * time.Second
)

// Dial builds a client from cfg and checks that at least one endpoint
// answers (a Status request, which also checks credentials) within ctx and
// DialTimeout. Auto-sync of endpoints is off: the client uses the endpoints
// given, which keeps test proxies and fixed addresses in the path. The
// caller closes the client.
func Dial(ctx context.Context, cfg Config) (*clientv3.Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcdkv: dial: no endpoints given: set Config.Endpoints to the members' client URLs (e.g. http://127.0.0.1:2379)")
	}
	ccfg, err := clientConfig(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.FailFast {
		if err := allRefused(ctx, cfg.Endpoints); err != nil {
			return nil, fmt.Errorf("etcdkv: dial: every endpoint refused the connection: %w", err)
		}
	}
	cli, err := clientv3.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("etcdkv: dial %v: %w", cfg.Endpoints, err)
	}
	cctx, cancel := context.WithTimeout(ctx, ccfg.DialTimeout)
	defer cancel()
	// A TLS mismatch fails every attempt alike: a command that a user
	// waits on probes for one while it dials, and fails at once on it.
	probed := func() error { return nil } // waits for the probe's verdict
	if cfg.FailFast {
		pctx, pcancel := context.WithCancel(cctx)
		sctx, scancel := context.WithCancel(cctx)
		defer scancel()
		done := make(chan struct{})
		var mismatch error
		go func() {
			defer close(done)
			if mismatch = probeTLS(pctx, cfg.Endpoints, ccfg.TLS); mismatch != nil {
				scancel()
			}
		}()
		defer func() { pcancel(); <-done }()
		probed = func() error { <-done; return mismatch }
		cctx = sctx
	}
	if _, err := firstStatus(cctx, cli, cfg.Endpoints); err != nil {
		_ = cli.Close()
		perr := probed()
		if perr != nil {
			return nil, fmt.Errorf("etcdkv: dial: %w", perr)
		}
		if ctx.Err() != nil {
			// The caller gave up (a signal, its own deadline), not the
			// endpoints: say that, with the endpoints' state as it was.
			why := "interrupted"
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				why = "the caller's deadline passed"
			}
			return nil, fmt.Errorf("etcdkv: dial %v: %s before an endpoint answered (%w): %w", cfg.Endpoints, why, context.Cause(ctx), err)
		}
		if !cfg.FailFast {
			perr = probeTLS(ctx, cfg.Endpoints, ccfg.TLS)
		}
		if perr != nil {
			return nil, fmt.Errorf("etcdkv: dial: no etcd endpoint answered within %v: %w (%w)", ccfg.DialTimeout, perr, err)
		}
		return nil, fmt.Errorf("etcdkv: dial: no etcd endpoint answered within %v: %w", ccfg.DialTimeout, err)
	}
	return cli, nil
}

// splitEndpoint returns the scheme of an endpoint ("" for a bare
// HOST:PORT) and its HOST:PORT.
func splitEndpoint(ep string) (scheme, host string) {
	scheme, host, ok := strings.Cut(ep, "://")
	if !ok {
		scheme, host = "", ep
	}
	host, _, _ = strings.Cut(host, "/")
	return scheme, host
}

// allRefused returns an error naming each endpoint if every one of them
// refuses a TCP connection, and nil if any accepts one, does not answer
// within a second, or is not a TCP address (unix://).
func allRefused(ctx context.Context, eps []string) error {
	errs := make([]error, len(eps))
	var g errgroup.Group
	for i, ep := range eps {
		scheme, host := splitEndpoint(ep)
		if scheme != "" && scheme != "http" && scheme != "https" {
			return nil
		}
		g.Go(func() error {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			var d net.Dialer
			conn, err := d.DialContext(pctx, "tcp", host)
			if err == nil {
				_ = conn.Close()
			} else if errors.Is(err, syscall.ECONNREFUSED) {
				errs[i] = fmt.Errorf("%s: %w", ep, err)
			}
			return nil
		})
	}
	_ = g.Wait()
	for _, err := range errs {
		if err == nil {
			return nil
		}
	}
	return errors.Join(errs...)
}

// firstStatus asks every endpoint for its status at once and returns the
// first answer, cancelling the others: an endpoint that hangs or refuses
// connections must not use up the time of one that answers.
func firstStatus(ctx context.Context, cli *clientv3.Client, eps []string) (*clientv3.StatusResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		resp *clientv3.StatusResponse
		err  error
	}
	results := make(chan result, len(eps))
	for _, ep := range eps {
		go func() {
			resp, err := endpointStatus(ctx, cli, ep)
			if err != nil {
				err = fmt.Errorf("%s: %w", ep, err)
			}
			results <- result{resp, err}
		}()
	}
	var errs []error
	for range eps {
		r := <-results
		if r.err == nil {
			cancel()
			// The others end promptly on cancel; drain them so that no
			// goroutine outlives the call.
			for range len(eps) - len(errs) - 1 {
				<-results
			}
			return r.resp, nil
		}
		errs = append(errs, r.err)
	}
	return nil, errors.Join(errs...)
}

// endpointStatus asks one endpoint for its status, as cli.Status does, but
// keeps what gRPC knew of a connection that never became ready (refused,
// TLS handshake failed, ...) when ctx ends: clientv3 replaces that with the
// bare context error, which does not tell a user what to fix.
func endpointStatus(ctx context.Context, cli *clientv3.Client, ep string) (*clientv3.StatusResponse, error) {
	conn, err := cli.Dial(ep)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := clientv3.RetryMaintenanceClient(cli, conn).Status(ctx, &etcdserverpb.StatusRequest{}, callOptions(cli)...)
	if err != nil {
		return nil, statusError(ctx, err)
	}
	return (*clientv3.StatusResponse)(resp), nil
}

// statusError converts err as clientv3 does (etcd's errors become
// rpctypes errors, a deadline or cancellation becomes ctx's error), but
// adds gRPC's reason to a context error when it gave one.
func statusError(ctx context.Context, err error) error {
	err = rpctypes.Error(err)
	st, ok := status.FromError(err)
	if !ok || ctx.Err() == nil || (st.Code() != codes.DeadlineExceeded && st.Code() != codes.Canceled) {
		return err
	}
	if msg := st.Message(); msg != "" && msg != ctx.Err().Error() {
		return fmt.Errorf("%w (%s)", ctx.Err(), msg)
	}
	return ctx.Err()
}

// reconnect paces gRPC's attempts to reach a member it lost. gRPC's
// default waits up to 120 s between attempts (1 s, growing 1.6-fold): a
// daemon whose etcd was down for a few minutes then went on failing for
// up to two minutes after etcd came back (measured: 19.7 s after a 150 s
// outage of the only member), unready and claiming nothing. Attempts at
// most 2 s apart cost one connection attempt per member every 2 s while
// it is down.
var reconnect = grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  100 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   2 * time.Second,
	},
	MinConnectTimeout: 5 * time.Second,
}

// clientConfig turns cfg into a clientv3.Config, loading the TLS files.
func clientConfig(cfg Config) (clientv3.Config, error) {
	c := clientv3.Config{
		Endpoints:            cfg.Endpoints,
		AutoSyncInterval:     0,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    cfg.KeepAliveTime,
		DialKeepAliveTimeout: cfg.KeepAliveTimeout,
		MaxCallSendMsgSize:   cfg.MaxCallSendMsgSize,
		Username:             cfg.Username,
		Password:             cfg.Password,
		Logger:               cfg.Logger,
		DialOptions:          []grpc.DialOption{grpc.WithConnectParams(reconnect)},
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.DialKeepAliveTime <= 0 {
		c.DialKeepAliveTime = DefaultKeepAliveTime
	}
	if c.DialKeepAliveTimeout <= 0 {
		c.DialKeepAliveTimeout = DefaultKeepAliveTimeout
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return c, errors.New("etcdkv: dial: give both a username and a password, or neither")
	}
	if cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" || cfg.ServerName != "" {
		tc, err := tlsConfig(cfg)
		if err != nil {
			return c, err
		}
		for _, ep := range cfg.Endpoints {
			if strings.HasPrefix(ep, "http://") || strings.HasPrefix(ep, "unix://") {
				return c, fmt.Errorf("etcdkv: dial: TLS files are given but endpoint %s does not use TLS; use https://", ep)
			}
		}
		c.TLS = tc
	}
	return c, nil
}

func tlsConfig(cfg Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("etcdkv: reading the etcd CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcdkv: CA file %s holds no PEM certificate", cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	switch {
	case cfg.CertFile != "" && cfg.KeyFile != "":
		if _, err := os.Stat(cfg.CertFile); err != nil {
			return nil, fmt.Errorf("etcdkv: reading the etcd client certificate: %w", err)
		}
		if _, err := os.Stat(cfg.KeyFile); err != nil {
			return nil, fmt.Errorf("etcdkv: reading the etcd client key: %w", err)
		}
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("etcdkv: loading the etcd client certificate %s and key %s: %w", cfg.CertFile, cfg.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	case cfg.CertFile != "":
		return nil, fmt.Errorf("etcdkv: client certificate %s given without a key file", cfg.CertFile)
	case cfg.KeyFile != "":
		return nil, fmt.Errorf("etcdkv: client key %s given without a certificate file", cfg.KeyFile)
	}
	return tc, nil
}
