package main

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdFlags say how to reach an etcd cluster (shared mode).
type etcdFlags struct {
	endpoints []string
	namespace string
	ca        string
	cert      string
	key       string
	user      string
	password  string
	// maxRequest is the servers' --max-request-bytes (0: etcd's default).
	maxRequest sizeValue
}

func addEtcdFlags(cmd *cobra.Command, e *etcdFlags, withNamespace bool) {
	f := cmd.Flags()
	f.StringSliceVar(&e.endpoints, "etcd", nil, "etcd endpoints, comma-separated (shared mode), e.g. http://10.0.0.1:2379")
	if withNamespace {
		f.StringVar(&e.namespace, "namespace", coordinator.DefaultNamespace, "namespace of the queues in the store")
		// Read as left out, an empty one would be the default
		// namespace: another team's jobs, for --namespace "$NS" with
		// NS unset.
		nonEmpty(cmd, "namespace", `leave it out for the "`+coordinator.DefaultNamespace+`" namespace, or name one`)
	}
	f.StringVar(&e.ca, "etcd-ca", "", "CA certificate (PEM) that signed the etcd servers' certificates")
	f.StringVar(&e.cert, "etcd-cert", "", "client certificate (PEM) for etcd")
	f.StringVar(&e.key, "etcd-key", "", "client key (PEM) for etcd")
	f.StringVar(&e.user, "etcd-user", "", "etcd user name")
	f.StringVar(&e.password, "etcd-password", "", "etcd password (prefer LEASEHOLD_ETCD_PASSWORD)")
	f.Var(&e.maxRequest, "etcd-max-request-bytes", "the etcd servers' --max-request-bytes, if raised (default etcd's 1.5MiB); bounds the largest job")
	for _, name := range []string{"etcd-ca", "etcd-cert", "etcd-key", "etcd-user", "etcd-password", "etcd-max-request-bytes"} {
		sharedOnly(cmd, name)
	}
}

func (e *etcdFlags) shared() bool { return len(e.endpoints) > 0 }

// storeLimits are the limits of the etcd store these flags make (its
// request limit from --etcd-max-request-bytes), without dialing.
func (e *etcdFlags) storeLimits() kv.Limits {
	return etcdkv.New(nil, etcdkv.Options{MaxRequestBytes: int(e.maxRequest)}).Limits()
}

// addMaxPayloadFlag adds --max-payload (LEASEHOLD_MAX_PAYLOAD) to cmd, a
// daemon's limit on payloads; help says what it means to cmd.
func addMaxPayloadFlag(cmd *cobra.Command, v *sizeValue, help string) {
	cmd.Flags().Var(v, "max-payload", help)
}

// checkMaxPayload validates --max-payload (named label, as the user set
// it) before any store is opened. 0 is the default for the store; one
// larger than the store fits is refused when the coordinator is built
// (see maxPayloadError).
func checkMaxPayload(label string, v sizeValue) error {
	if v < 0 {
		return usagef("%s %s: want a size such as 1MiB", label, v)
	}
	return nil
}

// maxPayloadError is the usage error of a --max-payload the store does not
// fit (coordinator.New's ErrInvalid, which says the largest that does).
func maxPayloadError(label string, v sizeValue, err error) error {
	return usagef("%s %s: %s: pass the --max-payload the daemons run with (and, if the etcd servers run with a larger --max-request-bytes, that as --etcd-max-request-bytes)", label, v, apiserver.CleanCoordError(err))
}

// checkEtcdEndpoints refuses an --etcd endpoint that is not an http:// or
// https:// URL.
func checkEtcdEndpoints(eps []string) error {
	for _, ep := range eps {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usagef("--etcd %q is not an http:// or https:// URL: use e.g. http://127.0.0.1:2379", ep)
		}
	}
	return nil
}

func (e *etcdFlags) validate() error {
	if err := checkEtcdEndpoints(e.endpoints); err != nil {
		return err
	}
	if (e.cert == "") != (e.key == "") {
		return usagef("--etcd-cert and --etcd-key go together: give both or neither")
	}
	for _, f := range []struct{ flag, path string }{{"etcd-ca", e.ca}, {"etcd-cert", e.cert}, {"etcd-key", e.key}} {
		if f.path == "" {
			continue
		}
		// A bad path is the caller's to fix, not an etcd out of reach.
		if _, err := os.ReadFile(f.path); err != nil {
			return usagef("--%s: %s: check the path and its permissions", f.flag, apiserver.OneLine(err.Error()))
		}
	}
	if e.maxRequest != 0 && e.maxRequest < 256<<10 {
		return usagef("--etcd-max-request-bytes %s: want the servers' --max-request-bytes, at least 256KiB", e.maxRequest)
	}
	if (e.user == "") != (e.password == "") {
		return usagef("--etcd-user and --etcd-password go together: give both or neither")
	}
	if e.namespace != "" {
		if err := coordinator.ValidateQueue(e.namespace); err != nil {
			return usagef("--namespace: %s", strings.Replace(apiserver.CleanCoordError(err), "queue", "namespace", 1))
		}
	}
	return nil
}

// versionCheckFor bounds a daemon's check of the etcd servers' versions
// for known lease bugs at start: members that do not answer within it are
// not counted.
const versionCheckFor = 2 * time.Second

// leaveOutFor is how long a daemon leaves an etcd member that looks hung
// out of its client's endpoints.
const leaveOutFor = 15 * time.Second

// dial connects to etcd and builds the store over it. The caller closes
// the client after the store. A daemon passes its log; a command passes
// nil, and fails at once if nothing listens at the endpoints.
func (e *etcdFlags) dial(ctx context.Context, log *slog.Logger) (*clientv3.Client, *etcdkv.Store, error) {
	if err := e.validate(); err != nil {
		return nil, nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cli, err := etcdkv.Dial(dctx, etcdkv.Config{
		Endpoints: e.endpoints, CAFile: e.ca, CertFile: e.cert, KeyFile: e.key,
		Username: e.user, Password: e.password,
		// Room for a request as large as the servers take.
		MaxCallSendMsgSize: max(2<<20, int(e.maxRequest)+etcdkv.RequestBytesMargin),
		FailFast:           log == nil,
	})
	if err != nil {
		return nil, nil, failf("cannot reach etcd at %s: %s: %s", strings.Join(e.endpoints, ","), apiserver.OneLine(err.Error()), dialHint(err))
	}
	opts := etcdkv.Options{MaxRequestBytes: int(e.maxRequest)}
	if log != nil {
		// The client is the daemon's own: a member that looks hung is
		// left out of its endpoints for as long as gRPC's keepalive
		// would take to close its connection (ADR 0031).
		opts.LeaveOutFor, opts.Logger = leaveOutFor, log
	}
	store := etcdkv.New(cli, opts)
	if log != nil {
		// A warning only, so it waits little: ServerVersion waits for
		// every endpoint, and one member down held every daemon's start
		// for the whole dial bound (15 s), saying nothing.
		vctx, vcancel := context.WithTimeout(ctx, versionCheckFor)
		v, err := store.ServerVersion(vctx)
		vcancel()
		if err == nil {
			for _, warning := range etcdkv.KnownLeaseBugs(v) {
				log.Warn("etcd server has a known lease bug; leasehold stays safe through fencing, but upgrade it", slog.String("version", v), slog.String("bug", warning))
			}
		}
	}
	return cli, store, nil
}

// target is where a CLI command sends its requests: the daemon's HTTP API
// (embedded mode), or etcd directly (shared mode), through the same API
// served in process.
type target struct {
	server string
	etcd   etcdFlags
	auth   clientAuth
	// maxPayload is the daemons' --max-payload, for the shared-mode
	// commands that write jobs (0: the default for the store), and
	// maxPayloadFlag names it as the user set it (see useMaxPayload).
	maxPayload     sizeValue
	maxPayloadFlag string
}

// sharedMaxPayloadHelp is the help of --max-payload of a command that
// writes jobs.
const sharedMaxPayloadHelp = "shared mode (--etcd): the payload limit to apply, the daemons' --max-payload if they run with one (default as theirs: 664KiB under etcd's default --max-request-bytes)"

// addWriteTargetFlags adds the flags of addTargetFlags and, for a command
// that writes jobs, --max-payload: in shared mode the command checks
// payloads itself, and must apply the limit the cluster's daemons do.
func addWriteTargetFlags(cmd *cobra.Command, t *target) {
	addTargetFlags(cmd, t)
	addMaxPayloadFlag(cmd, &t.maxPayload, sharedMaxPayloadHelp)
	sharedOnly(cmd, "max-payload")
}

// useMaxPayload validates --max-payload of cmd (see addWriteTargetFlags)
// before any request is made, and keeps its name for errors.
func (t *target) useMaxPayload(cmd *cobra.Command) error {
	t.maxPayloadFlag = flagLabel(cmd, "max-payload")
	return checkMaxPayload(t.maxPayloadFlag, t.maxPayload)
}

func addTargetFlags(cmd *cobra.Command, t *target) {
	addServerFlag(cmd, &t.server)
	addClientAuthFlags(cmd, &t.auth)
	addEtcdFlags(cmd, &t.etcd, true)
}

// client returns a client of t. In shared mode it holds an etcd connection
// until close.
func (t *target) client(ctx context.Context) (*client, error) {
	if !t.etcd.shared() {
		c, err := newClient(t.server)
		if err != nil {
			return nil, err
		}
		if err := c.setAuth(t.auth); err != nil {
			return nil, err
		}
		return c, nil
	}
	cli, store, err := t.etcd.dial(ctx, nil)
	if err != nil {
		return nil, err
	}
	coord, err := coordinator.New(store, coordinator.Config{Namespace: t.etcd.namespace, MaxPayloadBytes: int(t.maxPayload), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		_ = store.Close()
		_ = cli.Close()
		if t.maxPayload > 0 && errors.Is(err, coordinator.ErrInvalid) {
			label := cmp.Or(t.maxPayloadFlag, "--max-payload")
			return nil, maxPayloadError(label, t.maxPayload, err)
		}
		return nil, usagef("%s", apiserver.CleanCoordError(err))
	}
	c, err := newClient("http://etcd")
	if err != nil {
		return nil, err
	}
	c.server = "etcd at " + strings.Join(t.etcd.endpoints, ",")
	c.namespace = coord.Namespace()
	c.hc = &http.Client{Transport: handlerTransport{newCLIAPI(coord)}}
	c.onClose = func() {
		_ = store.Close()
		_ = cli.Close()
	}
	return c, nil
}

// newCLIAPI returns the in-process API of a shared-mode CLI command. It
// logs nowhere: the command prints its error on one line.
func newCLIAPI(coord *coordinator.Coordinator) *apiserver.Handler {
	return apiserver.New(apiserver.Config{Coord: coord, KnownChecks: payloadChecks(builtinKinds()), Shared: true, CLI: true, MaxPayload: coord.MaxPayloadBytes(), Logger: slog.New(slog.DiscardHandler)})
}

// handlerTransport serves requests with an in-process handler.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}

// dialHint says what to do about a failed dial, from what etcdkv's probe
// of the TLS handshake found.
func dialHint(err error) string {
	switch {
	case errors.Is(err, etcdkv.ErrClientCertRequired):
		return "pass --etcd-cert and --etcd-key with a client certificate that the server's --trusted-ca-file signed"
	case errors.Is(err, etcdkv.ErrServerCertUntrusted):
		return "pass --etcd-ca with the CA that signed the server's certificate"
	case errors.Is(err, etcdkv.ErrServerTLS):
		return "use https:// endpoints (with --etcd-ca)"
	case errors.Is(err, etcdkv.ErrServerPlain):
		return "use http:// endpoints, without --etcd-ca, --etcd-cert and --etcd-key"
	}
	return "check --etcd and the TLS/auth flags"
}
