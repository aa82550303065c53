package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/internal/apicall"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// defaultServer is where the CLI finds the daemon.
const defaultServer = "http://127.0.0.1:7420"

// requestTimeout bounds one API call that is not a long-poll.
const requestTimeout = 30 * time.Second

// client calls the daemon's HTTP API (see internal/apiserver).
type client struct {
	server  string // as given, for messages
	base    *url.URL
	hc      *http.Client
	onClose func() // releases a shared-mode connection
	// namespace is the etcd namespace a shared-mode command reads, for
	// messages ("" through a daemon, whose namespace is its own).
	namespace string
	token     string // sent as a bearer token when set
}

// addServerFlag adds --server to cmd.
func addServerFlag(cmd *cobra.Command, server *string) {
	cmd.Flags().StringVar(server, "server", defaultServer, "URL of the daemon's HTTP API")
}

func newClient(server string) (*client, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		return nil, usagef("--server %q is not an http:// or https:// URL: use e.g. %s", server, defaultServer)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if strings.HasSuffix(u.Path, "/v1") {
		// The client adds /v1/ itself: a request would go to /v1/v1/.
		return nil, usagef("--server %q ends in /v1: pass the daemon's base URL, e.g. %s", server, strings.TrimSuffix(strings.TrimSuffix(server, "/"), "/v1"))
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the daemon is local or addressed directly
	return &client{server: server, base: u, hc: &http.Client{Transport: tr}}, nil
}

// peer names what the client reads from, for messages: the daemon at its
// --server, or in shared mode etcd at its endpoints.
func (c *client) peer() string {
	if c.onClose != nil {
		return c.server // "etcd at ..."
	}
	return "the daemon at " + c.server
}

// close releases the client's idle connections.
func (c *client) close() {
	c.hc.CloseIdleConnections()
	if c.onClose != nil {
		c.onClose()
	}
}

// call sends method path?query with body (if not nil) as JSON and decodes
// a successful answer into out (if not nil). Failures come back as
// cliErrors: an unreachable daemon, a timeout, or the API's own error with
// exit code 2 for bad input (400, 413) and 1 otherwise.
func (c *client) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	var resp *http.Response
	var b []byte
	for attempt := 1; ; attempt++ {
		var err error
		resp, b, err = apicall.Do(ctx, c.hc, apicall.Request{Method: method, Base: c.base, Path: path, Query: query, Body: body, Token: c.token})
		var be *apicall.BuildError
		switch {
		case errors.As(err, &be):
			return usagef("cannot send a request to %s%s: %v: check --server", c.server, path, be.Err)
		case errors.Is(err, apicall.ErrAnswerTooLarge):
			return failf("%s", strings.TrimPrefix(err.Error(), "apicall: "))
		case err != nil:
			return c.transportError(ctx, method, path, err)
		}
		if resp.StatusCode < 300 {
			break
		}
		if d, ok := busy.Retry(ctx, resp, attempt, 0); ok {
			if pause(ctx, d); ctx.Err() == nil {
				continue
			}
		}
		if _, ok := apicall.ErrorMessage(b); ok && out != nil {
			// What the API answers beside its error (a bulk cancel's
			// counts so far).
			_ = json.Unmarshal(b, out)
		}
		return c.statusError(method, path, resp, b, attempt)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		if u := apiserver.UnknownOutcome(method, path); u != "" {
			// Answered as done, but what was done cannot be read.
			return &cliError{code: exitFailure, outcomeUnknown: true, msg: fmt.Sprintf("the server at %s sent an answer that is not leasehold's JSON (%v): is --server a leasehold daemon? %s", c.server, err, u)}
		}
		return failf("the server at %s sent an answer that is not leasehold's JSON (%v): is --server a leasehold daemon?", c.server, err)
	}
	if u := apiserver.UnknownOutcome(method, path); u != "" && apicall.ForeignAnswer(b, out) {
		// JSON, but none of the API's (a front answering for it): what
		// was done cannot be read.
		return &cliError{code: exitFailure, outcomeUnknown: true, msg: fmt.Sprintf("the server at %s answered %s with JSON that is not leasehold's answer (%s): is --server a leasehold daemon? %s", c.server, resp.Status, apiserver.TruncateString(strings.TrimSpace(string(b)), 120), u)}
	}
	return nil
}

func (c *client) transportError(ctx context.Context, method, path string, err error) error {
	var oe *net.OpError
	var cve *tls.CertificateVerificationError
	switch {
	case errors.As(err, &oe) && oe.Op == "dial":
		return &cliError{code: exitFailure, unreachable: true, msg: fmt.Sprintf("cannot reach the daemon at %s: is 'leasehold daemon' running? (set --server)", c.server)}
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		if u := apiserver.UnknownOutcome(method, path); u != "" {
			// A change sent and not answered may have been made.
			return &cliError{code: exitFailure, outcomeUnknown: true, msg: fmt.Sprintf("the daemon at %s did not answer in time (check that it is healthy: its log, %s/healthz): %s", c.server, strings.TrimSuffix(c.server, "/"), u)}
		}
		return failf("the daemon at %s did not answer in time: check that it is healthy (its log, %s/healthz) and retry", c.server, strings.TrimSuffix(c.server, "/"))
	case ctx.Err() != nil:
		if u := apiserver.UnknownOutcome(method, path); u != "" {
			return &cliError{code: exitFailure, outcomeUnknown: true, msg: "interrupted: " + u}
		}
		return failf("interrupted")
	case errors.As(err, &cve):
		return failf("the daemon at %s has a TLS certificate this client does not trust (%s): pass --server-ca with the CA that signed its --tls-cert", c.server, apiserver.OneLine(cve.Err.Error()))
	case c.base.Scheme == "https" && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		plain := *c.base
		plain.Scheme = "http"
		return failf("the daemon at %s serves plain HTTP: use %s (or start it with --tls-cert and --tls-key)", c.server, plain.String())
	}
	// The connection failed before the answer, or during it (reset,
	// closed, an answer cut short): the daemon may be stopping or
	// restarting. A change sent may have been made all the same.
	if u := apiserver.UnknownOutcome(method, path); u != "" {
		return &cliError{code: exitFailure, unreachable: true, outcomeUnknown: true, msg: fmt.Sprintf("request to the daemon at %s failed before its answer was read: %v: %s", c.server, err, u)}
	}
	return &cliError{code: exitFailure, unreachable: true, msg: fmt.Sprintf("request to the daemon at %s failed: %v: check that it is running and retry", c.server, err)}
}

// statusError is the error of an answer resp (with body) to method path
// that is not a success, after attempts sends of its request.
func (c *client) statusError(method, path string, resp *http.Response, body []byte, attempts int) error {
	msg, ok := apicall.ErrorMessage(body)
	if secure, tls := apicall.HTTPSURL(c.base, resp.StatusCode, body); !ok && tls {
		// Exit 1 as for the converse (an https --server for a plain
		// daemon): the daemon is reached, at the wrong scheme.
		return failf("the daemon at %s serves HTTPS: use --server %s (and --server-ca with the CA that signed its --tls-cert if this machine does not trust it)", c.server, secure)
	}
	if !ok {
		first, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		msg = fmt.Sprintf("the server at %s answered %s (%s): is --server a leasehold daemon?", c.server, resp.Status, apiserver.TruncateString(first, 120))
	}
	if resp.StatusCode == http.StatusServiceUnavailable && apicall.NotProcessed(resp) {
		// Refused before the daemon's API (beyond its connection
		// bound): nothing was written, whatever the request. Said here,
		// not left to the daemon's message.
		return &cliError{code: exitFailure, status: resp.StatusCode, notProcessed: true, msg: fmt.Sprintf("the daemon at %s refused the request %s without processing it, nothing was written (it has as many HTTP connections open as it serves at once): retry later, or raise its --http-max-connections", c.server, times(attempts))}
	}
	u := apiserver.UnknownOutcome(method, path)
	unknown := u != "" && resp.StatusCode >= 500 && resp.StatusCode != http.StatusInsufficientStorage
	if unknown && !strings.Contains(msg, "outcome is unknown") {
		// A 5xx that does not say the change was not made (a proxy's
		// 502 or 504, the daemon's 503 for a request cancelled while it
		// ran, a 500): it may have been made.
		msg += ": " + u
	}
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return &cliError{code: exitUsage, msg: msg, status: resp.StatusCode}
	case http.StatusNotFound:
		if ok && strings.HasPrefix(msg, "job not found") {
			if c.namespace != "" {
				// A job enqueued under another --namespace is not
				// found here either.
				msg += fmt.Sprintf(": check the id with 'leasehold jobs list' and --namespace (%s here); finished jobs are deleted after the daemons' --retention", c.namespace)
			} else {
				msg += ": check the id with 'leasehold jobs list' (finished jobs are deleted after the daemon's --retention)"
			}
		}
	}
	return &cliError{code: exitFailure, msg: msg, status: resp.StatusCode, outcomeUnknown: unknown}
}

// busy is how the CLI sends again a request that the daemon did not
// process (a 503 marked apicall.NotProcessedHeader, beyond its connection
// bound): nothing was written, so even an enqueue without a unique key is
// safe to send again, and a burst of clients that passes within seconds
// should not fail a script. At most 4 sends, 1 s apart there, within the
// request's deadline: a daemon that stays full is reported within
// seconds, naming the flag that raises its bound.
var busy = apicall.BusyPolicy{Attempts: 4, MinPause: 50 * time.Millisecond, MaxPause: 5 * time.Second}

// times says n times in words ("once", "twice", "3 times").
func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}

// probeTimeout bounds probe (a variable for tests).
var probeTimeout = requestTimeout

// probe checks that the daemon answers (GET /v1/health, which reads no
// store) before a request that may rightly take an hour (a bulk cancel, a
// backup): a daemon that accepts connections but does not answer (stopped
// with SIGSTOP, hung) is reported within probeTimeout, not after the hour.
func (c *client) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return c.call(ctx, http.MethodGet, "/v1/health", nil, nil, nil)
}

func (c *client) getJob(ctx context.Context, id string, wait time.Duration) (*apiserver.JobResponse, error) {
	var q url.Values
	if wait > 0 {
		q = url.Values{"wait": {wait.String()}}
	}
	var out apiserver.JobResponse
	if err := c.call(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), q, nil, &out); err != nil {
		return nil, err
	}
	if out.Job == nil {
		return nil, failf("the daemon at %s answered without a job: is --server a leasehold daemon?", c.server)
	}
	return &out, nil
}

func (c *client) stats(ctx context.Context) (*apiserver.StatsResponse, error) {
	var out apiserver.StatsResponse
	if err := c.call(ctx, http.MethodGet, "/v1/stats", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// getOnce connects to t, GETs path and decodes the answer into out.
func (t *target) getOnce(ctx context.Context, path string, out any) error {
	c, err := t.client(ctx)
	if err != nil {
		return err
	}
	defer c.close()
	return c.call(ctx, http.MethodGet, path, nil, nil, out)
}
