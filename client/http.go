package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/apicall"
)

// The wire format of the daemon's HTTP API (internal/apiserver/api.go).
type (
	wireUnique struct {
		ByArgs   bool     `json:"by_args,omitempty"`
		ByQueue  bool     `json:"by_queue,omitempty"`
		ByPeriod string   `json:"by_period,omitempty"`
		ByState  []string `json:"by_state,omitempty"`
	}
	wireCreate struct {
		Kind        string          `json:"kind"`
		Payload     json.RawMessage `json:"payload,omitempty"`
		Queue       string          `json:"queue,omitempty"`
		Priority    int             `json:"priority,omitempty"`
		ScheduledAt string          `json:"scheduled_at,omitempty"`
		MaxAttempts int             `json:"max_attempts,omitempty"`
		Timeout     string          `json:"timeout,omitempty"`
		UniqueKey   string          `json:"unique_key,omitempty"`
		Unique      *wireUnique     `json:"unique,omitempty"`
		Metadata    json.RawMessage `json:"metadata,omitempty"`
	}
	wireJob struct {
		Job     *Job `json:"job"`
		Existed bool `json:"existed"`
	}
	wireBatch struct {
		Jobs    []*Job `json:"jobs"`
		Existed []bool `json:"existed"`
	}
	// GET /v1/stats (StatsResponse) and GET /v1/queues (QueuesResponse,
	// internal/apiserver/ops_api.go).
	wireStats struct {
		Counts map[State]int `json:"counts"`
	}
	wireQueues struct {
		Queues []QueueInfo `json:"queues"`
	}
)

// waitPoll is the long-poll of one wait request.
const waitPoll = 30 * time.Second

type httpBackend struct {
	server  string
	base    *url.URL
	hc      *http.Client
	ownHC   bool // hc is not the caller's (Options.HTTPClient)
	token   string
	timeout time.Duration
}

// NewHTTP returns a client of the daemon whose API is at server (e.g.
// http://127.0.0.1:7420): embedded mode, where the daemon owns the data
// directory.
func NewHTTP(server string, o *Options) (*Client, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: server %q is not an http:// or https:// URL: pass the daemon's, e.g. http://127.0.0.1:7420", coordinator.ErrInvalid, server)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	b := &httpBackend{server: server, base: u, hc: &http.Client{}, ownHC: true, timeout: 30 * time.Second}
	if o != nil {
		if o.HTTPClient != nil {
			b.hc, b.ownHC = o.HTTPClient, false
		}
		// As the daemon and the CLI do: a token read from a file ends
		// with a line break.
		b.token = strings.TrimSpace(o.Token)
		if strings.ContainsFunc(b.token, unicode.IsControl) {
			return nil, fmt.Errorf("%w: the API token holds a control character (a line break?): pass the token alone, on one line", coordinator.ErrInvalid)
		}
		if o.HTTPTimeout < 0 {
			return nil, fmt.Errorf("%w: client.Options.HTTPTimeout is negative: want 0 (the default, 30s) or more", coordinator.ErrInvalid)
		}
		if o.HTTPTimeout > 0 {
			b.timeout = o.HTTPTimeout
		}
	}
	return newClient(b, o), nil
}

func (b *httpBackend) close() error {
	if b.ownHC {
		b.hc.CloseIdleConnections()
	}
	return nil
}

// call sends one request and decodes the answer into out, the API's
// error answers too (for what they carry beside the error: a bulk
// cancel's counts so far). The API's errors come back wrapping the
// coordinator's sentinels (ErrInvalid, ErrNotFound, ErrWrongState,
// ErrConflict) as the coordinator returns them; an answer that is not the
// API's wraps none.
func (b *httpBackend) call(ctx context.Context, method, path string, q url.Values, body, out any, timeout time.Duration) error {
	return b.callBatch(ctx, method, path, q, body, out, timeout, 0)
}

// callBatch is call for a batch request whose first job is job first of
// the caller's: the daemon's "job N: ..." errors are renumbered to match.
func (b *httpBackend) callBatch(ctx context.Context, method, path string, q url.Values, body, out any, timeout time.Duration, first int) error {
	// A request the daemon did not process is sent again, within the
	// bounds of busy; timeout bounds each send.
	var resp *http.Response
	var data []byte
	var err error
	attempts := 0
	for waited := time.Duration(0); ; {
		attempts++
		resp, data, err = b.send(ctx, apicall.Request{Method: method, Base: b.base, Path: path, Query: q, Body: body, Token: b.token}, timeout)
		if err != nil {
			break
		}
		d, again := busy.Retry(ctx, resp, attempts, waited)
		if !again {
			break
		}
		if busyPause(ctx, d) != nil {
			break // the caller's context ended: the last answer stands
		}
		waited += d
	}
	// A change whose answer says nothing of its outcome may have been
	// made: said so, and never sent again (ErrOutcomeUnknown).
	write := method != http.MethodGet && method != http.MethodHead
	var be *apicall.BuildError
	switch {
	case errors.As(err, &be):
		return fmt.Errorf("%w: %s %s: %v", coordinator.ErrInvalid, method, path, be.Err)
	case err != nil && write && !notSent(err):
		return fmt.Errorf("leasehold daemon at %s: %w: %w: %s", b.server, err, ErrOutcomeUnknown, unknownAdvice(isInsert(path)))
	case err != nil:
		return fmt.Errorf("leasehold daemon at %s: %w", b.server, err)
	}
	if resp.StatusCode >= 300 {
		if _, ok := apicall.ErrorMessage(data); ok && out != nil {
			// What the API answers beside its error (a bulk cancel's
			// counts so far).
			_ = json.Unmarshal(data, out)
		}
		err := b.statusError(resp, data, attempts, first)
		if write && resp.StatusCode >= 500 && resp.StatusCode != http.StatusInsufficientStorage && !apicall.NotProcessed(resp) {
			// The store's deadline (503 with Retry-After, which also
			// wraps context.DeadlineExceeded), a request the daemon
			// cancelled, a 500, or a proxy's 502 or 504: the change
			// may have been made.
			return fmt.Errorf("%w: %w: %s", err, ErrOutcomeUnknown, unknownAdvice(isInsert(path)))
		}
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		if write {
			// Answered as done, by something that is not the API (a
			// proxy's page?): what was done is unknown.
			return fmt.Errorf("leasehold daemon at %s: answer is not leasehold's JSON: %w: %w: %s", b.server, err, ErrOutcomeUnknown, unknownAdvice(isInsert(path)))
		}
		return fmt.Errorf("leasehold daemon at %s: answer is not leasehold's JSON: %w", b.server, err)
	}
	if write && apicall.ForeignAnswer(data, out) {
		// JSON, but none of the API's (a front answering for it): what
		// was done is unknown.
		return fmt.Errorf("leasehold daemon at %s answered %s with JSON that is not leasehold's answer (%s): %w: %s", b.server, resp.Status, firstLine(data, 200), ErrOutcomeUnknown, unknownAdvice(isInsert(path)))
	}
	return nil
}

// notSent reports whether err, a request's failure, came before the
// request could reach a daemon: its connection was not made (nothing
// listens, a name that does not resolve, a certificate refused, an
// HTTPS request to a plain HTTP port). Any other failure may have come
// after the daemon read the request.
func notSent(err error) bool {
	var oe *net.OpError
	var cve *tls.CertificateVerificationError
	return (errors.As(err, &oe) && oe.Op == "dial") || errors.As(err, &cve) ||
		strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

// unknownAdvice says what to do about a change whose outcome is unknown:
// an insert of jobs, or another.
func unknownAdvice(insert bool) string {
	if insert {
		return "the job may or may not have been inserted: insert it again with the same unique key (InsertOpts.UniqueKey; without one it may be inserted twice), or look for it first"
	}
	return "read the job or jobs to see whether the change was made, then send it again if need be"
}

// isInsert reports whether path is the API's insert of jobs.
func isInsert(path string) bool { return path == "/v1/jobs" || path == "/v1/jobs/batch" }

// statusError is the error of an answer resp (body data) that is not a
// success, after attempts sends of its request; first is as callBatch's.
func (b *httpBackend) statusError(resp *http.Response, data []byte, attempts, first int) error {
	msg, ok := apicall.ErrorMessage(data)
	if secure, tls := apicall.HTTPSURL(b.base, resp.StatusCode, data); !ok && tls {
		return fmt.Errorf("leasehold daemon at %s serves HTTPS: use %s (with Options.HTTPClient trusting its certificate if it is private)", b.server, secure)
	}
	if loc, err := resp.Location(); err == nil && !ok && resp.StatusCode < 400 {
		// A change redirected by a front, not followed (as a GET, Go's
		// HTTP client would read instead of change; apicall.Do).
		return fmt.Errorf("leasehold daemon at %s answered %s: it redirects to %s, and a change is not sent on as a GET: nothing was sent on; give the daemon's URL that it leads to as the server", b.server, resp.Status, loc)
	}
	if !ok {
		// Not the API's answer (a proxy, another server, a TLS
		// mismatch): no sentinel, so that a caller does not drop a
		// job as invalid or forget one as not found.
		return fmt.Errorf("leasehold daemon at %s answered %s, not with leasehold's JSON (is it a leasehold daemon, or a proxy in front of one?): %s", b.server, resp.Status, firstLine(data, 200))
	}
	if rest, ok := strings.CutPrefix(msg, "job "); ok && first > 0 {
		num, tail, ok := strings.Cut(rest, ": ")
		if i, err := strconv.Atoi(num); ok && err == nil {
			msg = fmt.Sprintf("job %d: %s", first+i, tail)
		}
	}
	switch {
	case resp.StatusCode == http.StatusBadRequest, resp.StatusCode == http.StatusRequestEntityTooLarge:
		return wrapAPIError(coordinator.ErrInvalid, msg)
	case resp.StatusCode == http.StatusNotFound && strings.HasPrefix(msg, noEndpoint):
		// The daemon serves no such path: the URL is wrong, not the id.
		return fmt.Errorf("leasehold daemon at %s answered %s: %s: check the server URL", b.server, resp.Status, msg)
	case resp.StatusCode == http.StatusNotFound:
		return wrapAPIError(coordinator.ErrNotFound, msg)
	case resp.StatusCode == http.StatusConflict && strings.Contains(msg, conflictMsg):
		return wrapAPIError(coordinator.ErrConflict, msg)
	case resp.StatusCode == http.StatusConflict:
		return wrapAPIError(coordinator.ErrWrongState, msg)
	case resp.StatusCode == http.StatusUnprocessableEntity:
		// An enqueue hook of the daemon's program refused the job:
		// nothing was written.
		return wrapAPIError(coordinator.ErrEnqueueRefused, msg)
	case resp.StatusCode == http.StatusInsufficientStorage:
		// The store has no room for new jobs (etcd: the write that
		// took it over its quota was applied all the same).
		return fmt.Errorf("leasehold daemon at %s: %s: %w", b.server, msg, kv.ErrNoSpace)
	case resp.StatusCode == http.StatusServiceUnavailable && apicall.NotProcessed(resp):
		// Refused before the daemon's API (beyond its connection
		// bound): nothing was written, even by a write.
		return fmt.Errorf("leasehold daemon at %s refused the request (%d attempts): %s: %w", b.server, attempts, msg, ErrBusy)
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
		// The daemon's store did not answer within its deadline: the
		// error a store that does not answer gives in shared mode.
		return fmt.Errorf("leasehold daemon at %s: %s: %w", b.server, msg, context.DeadlineExceeded)
	}
	return fmt.Errorf("leasehold daemon at %s answered %s: %s", b.server, resp.Status, msg)
}

// send sends r once, bounded by timeout.
func (b *httpBackend) send(ctx context.Context, r apicall.Request, timeout time.Duration) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return apicall.Do(ctx, b.hc, r)
}

// What the daemon's error messages say (internal/apiserver/api.go): its 404 for
// a path it does not serve, and the text of coordinator.ErrConflict, which
// it answers with 409 as it does ErrWrongState.
const noEndpoint = "no endpoint "

var conflictMsg = strings.TrimPrefix(coordinator.ErrConflict.Error(), "coordinator: ")

// wrapAPIError wraps the daemon's message msg in sentinel. The daemon
// strips only the "coordinator: " prefixes from its errors, so msg may
// hold the sentinel's own text ("job not found: ID", "cancel job ID: too
// many concurrent changes, try again"): it is said once, where the
// coordinator's errors say it in shared mode.
func wrapAPIError(sentinel error, msg string) error {
	text := strings.TrimPrefix(sentinel.Error(), "coordinator: ")
	if head, rest, ok := strings.Cut(msg, text+": "); ok {
		// At the start, or after a batch's "job N: ".
		return fmt.Errorf("%s%w: %s", head, sentinel, rest)
	}
	if head, ok := strings.CutSuffix(msg, ": "+text); ok {
		return fmt.Errorf("%s: %w", head, sentinel)
	}
	if msg == text {
		return sentinel
	}
	return fmt.Errorf("%w: %s", sentinel, msg)
}

// firstLine returns the first line of b, at most n bytes of it.
func firstLine(b []byte, n int) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if s == "" {
		return "(an empty body)"
	}
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

func toWire(p coordinator.EnqueueParams) wireCreate {
	w := wireCreate{
		Kind: p.Kind, Payload: p.Payload, Queue: p.Queue, Priority: p.Priority, MaxAttempts: p.MaxAttempts,
		UniqueKey: p.UniqueKey, Metadata: p.Metadata,
	}
	if !p.ScheduledAt.IsZero() {
		w.ScheduledAt = p.ScheduledAt.UTC().Format(time.RFC3339Nano)
	}
	// A negative timeout or period is sent too, for the daemon to refuse
	// as the coordinator does.
	if p.Timeout != 0 {
		w.Timeout = p.Timeout.String()
	}
	if u := p.Unique; u != nil {
		w.Unique = &wireUnique{ByArgs: u.ByArgs, ByQueue: u.ByQueue}
		if u.ByPeriod != 0 {
			w.Unique.ByPeriod = u.ByPeriod.String()
		}
		for _, st := range u.ByState {
			w.Unique.ByState = append(w.Unique.ByState, string(st))
		}
	}
	return w
}

func (b *httpBackend) insert(ctx context.Context, ps []coordinator.EnqueueParams) ([]InsertResult, error) {
	for i, p := range ps {
		// JSON encoding would turn its bad bytes into U+FFFD: another
		// key, maybe a live job's, and the insert would find that job.
		if !utf8.ValidString(p.UniqueKey) {
			err := fmt.Errorf("%w: unique key is not valid UTF-8: encode a binary key (hex or base64, say)", coordinator.ErrInvalid)
			if len(ps) > 1 {
				err = fmt.Errorf("job %d: %w", i, err)
			}
			return nil, err
		}
	}
	if len(ps) == 1 {
		var res wireJob
		if err := b.call(ctx, http.MethodPost, "/v1/jobs", nil, toWire(ps[0]), &res, b.timeout); err != nil {
			return nil, err
		}
		if res.Job == nil {
			return nil, fmt.Errorf("leasehold daemon at %s answered without a job", b.server)
		}
		return []InsertResult{{Job: res.Job, Existed: res.Existed}}, nil
	}
	// Encode every job first: one that does not encode sends nothing.
	encs := make([]json.RawMessage, len(ps))
	for i, p := range ps {
		enc, err := json.Marshal(toWire(p))
		if err != nil {
			return nil, fmt.Errorf("%w: job %d: %v", coordinator.ErrInvalid, i, err)
		}
		encs[i] = enc
	}
	out := make([]InsertResult, 0, len(ps))
	for len(encs) > 0 {
		n := apicall.BatchLen(len(encs), func(i int) int { return len(encs[i]) })
		req := struct {
			Jobs []json.RawMessage `json:"jobs"`
		}{Jobs: encs[:n]}
		var res wireBatch
		err := b.callBatch(ctx, http.MethodPost, "/v1/jobs/batch", nil, req, &res, b.timeout, len(out))
		if err == nil && (len(res.Jobs) != n || len(res.Existed) != n) {
			// Answered as done, but not with these jobs.
			err = fmt.Errorf("leasehold daemon at %s answered %d jobs for a batch of %d: %w: %s", b.server, len(res.Jobs), n, ErrOutcomeUnknown, unknownAdvice(true))
		}
		if err != nil {
			// Which jobs are in (those returned), which may be, and
			// which were not sent.
			done, sent := len(out), len(out)+n
			what := ""
			if errors.Is(err, ErrOutcomeUnknown) {
				what = fmt.Sprintf("jobs %d to %d may or may not have been inserted", done, sent-1)
				if sent < len(ps) {
					what += fmt.Sprintf(", jobs %d to %d were not sent", sent, len(ps)-1)
				}
			} else if done > 0 || sent < len(ps) {
				what = fmt.Sprintf("jobs %d to %d were not inserted", done, len(ps)-1)
			}
			switch {
			case done > 0:
				return out, fmt.Errorf("inserted jobs 0 to %d (returned); %s: %w", done-1, what, err)
			case what != "":
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			return nil, err
		}
		for i := range n {
			out = append(out, InsertResult{Job: res.Jobs[i], Existed: res.Existed[i]})
		}
		encs = encs[n:]
	}
	return out, nil
}

func (b *httpBackend) job(ctx context.Context, method, path string, q url.Values, timeout time.Duration) (*Job, error) {
	var res wireJob
	if err := b.call(ctx, method, path, q, nil, &res, timeout); err != nil {
		return nil, err
	}
	if res.Job == nil {
		return nil, fmt.Errorf("leasehold daemon at %s answered without a job", b.server)
	}
	return res.Job, nil
}

func (b *httpBackend) get(ctx context.Context, id string) (*Job, error) {
	return b.job(ctx, http.MethodGet, "/v1/jobs/"+id, nil, b.timeout)
}

func (b *httpBackend) list(ctx context.Context, p ListParams) (ListPage, error) {
	q := url.Values{}
	for k, v := range map[string]string{"state": string(p.State), "kind": p.Kind, "queue": p.Queue, "after": p.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var page ListPage
	err := b.call(ctx, http.MethodGet, "/v1/jobs", q, nil, &page, b.timeout)
	if page.Jobs == nil {
		page.Jobs = []*Job{}
	}
	return page, err
}

func (b *httpBackend) cancel(ctx context.Context, id string) (*Job, error) {
	return b.job(ctx, http.MethodPost, "/v1/jobs/"+id+"/cancel", nil, b.timeout)
}

func (b *httpBackend) cancelMany(ctx context.Context, f CancelFilter) (CancelManyResult, error) {
	var res CancelManyResult
	body := struct {
		CancelFilter
		All bool `json:"all,omitempty"`
	}{CancelFilter: f, All: f == CancelFilter{}}
	err := b.call(ctx, http.MethodPost, "/v1/jobs/cancel", nil, body, &res, b.timeout)
	return res, err
}

func (b *httpBackend) retry(ctx context.Context, id string) (*Job, error) {
	return b.job(ctx, http.MethodPost, "/v1/jobs/"+id+"/retry", nil, b.timeout)
}

func (b *httpBackend) remove(ctx context.Context, id string) (*Job, error) {
	return b.job(ctx, http.MethodDelete, "/v1/jobs/"+id, nil, b.timeout)
}

// wait long-polls the job until it is final.
func (b *httpBackend) wait(ctx context.Context, id string) (*Job, error) {
	for {
		poll := waitPoll
		if dl, ok := ctx.Deadline(); ok {
			poll = min(poll, max(time.Until(dl), time.Millisecond))
		}
		start := time.Now()
		j, err := b.job(ctx, http.MethodGet, "/v1/jobs/"+id, url.Values{"wait": {poll.String()}}, poll+b.timeout)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) && ue.Timeout() {
				continue
			}
			return nil, err
		}
		if j.State.Final() {
			return j, nil
		}
		// A draining daemon answers each long-poll at once with the job
		// as it is (StopWaits), for as long as its drain lasts: pause
		// after an answer that came well before its wait, rather than
		// send request after request.
		if time.Since(start) < poll/2 {
			if err := busyPause(ctx, waitEarlyPause); err != nil {
				return nil, err
			}
		}
	}
}

// waitEarlyPause is how long Wait pauses after a long-poll that the daemon
// answered early, not final (it is draining).
const waitEarlyPause = time.Second

func (b *httpBackend) counts(ctx context.Context) (map[State]int, error) {
	var res wireStats
	if err := b.call(ctx, http.MethodGet, "/v1/stats", nil, nil, &res, b.timeout); err != nil {
		return nil, err
	}
	if res.Counts == nil {
		return nil, fmt.Errorf("leasehold daemon at %s answered without counts", b.server)
	}
	// As the coordinator's: every state, 0 when none is in it.
	for _, st := range coordinator.States {
		if _, ok := res.Counts[st]; !ok {
			res.Counts[st] = 0
		}
	}
	return res.Counts, nil
}

func (b *httpBackend) queues(ctx context.Context) ([]QueueInfo, error) {
	var res wireQueues
	if err := b.call(ctx, http.MethodGet, "/v1/queues", nil, nil, &res, b.timeout); err != nil {
		return nil, err
	}
	return emptyNotNil(res.Queues), nil
}

// emptyNotNil gives qs and their daemon lists as the coordinator's are:
// empty, not nil.
func emptyNotNil(qs []QueueInfo) []QueueInfo {
	if qs == nil {
		qs = []QueueInfo{}
	}
	for i := range qs {
		if qs[i].Workers == nil {
			qs[i].Workers = []string{}
		}
	}
	return qs
}
