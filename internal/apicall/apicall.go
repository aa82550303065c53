// Package apicall sends one request to a leasehold daemon's HTTP API. The
// command-line client and the client package both use it and map its
// errors their own way: the CLI to exit codes and one-line messages, the
// library to the coordinator's sentinel errors.
package apicall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// BuildError is returned when the request could not be built (a body
// that does not encode, a URL http does not accept); nothing was sent.
type BuildError struct{ Err error }

func (e *BuildError) Error() string { return "build the request: " + e.Err.Error() }
func (e *BuildError) Unwrap() error { return e.Err }

// maxAnswer bounds how much of an answer is read (a variable for tests).
var maxAnswer int64 = 256 << 20

// ErrAnswerTooLarge is returned for an answer over 256 MiB.
var ErrAnswerTooLarge = errors.New("apicall: answer too large")

// A batch request carries at most BatchJobs jobs and, encoded, at most
// BatchBytes of them (one job larger than that goes alone): half of the
// daemon's least body limit of a batch (32 MiB), so that the daemon never
// refuses a batch of valid jobs for its size.
const (
	BatchJobs  = 1000
	BatchBytes = 16 << 20
)

// BatchLen returns how many of n encoded jobs, from the first, one batch
// request carries; size(i) is job i's encoded size. It is at least one
// when n is.
func BatchLen(n int, size func(i int) int) int {
	k, total := 0, 0
	for k < min(BatchJobs, n) && (k == 0 || total+size(k)+1 <= BatchBytes) {
		total += size(k) + 1
		k++
	}
	return k
}

// Request is one call: Method Base+Path?Query, with Body (if not nil) sent
// as JSON and Token (if set) as a bearer token.
type Request struct {
	Method string
	Base   *url.URL
	Path   string
	Query  url.Values
	Body   any
	Token  string
}

// Do sends r with hc and returns the answer (its body closed) and the
// body's bytes. An error is ErrBuild (wrapped) or the transport's:
// connecting, sending or reading the answer.
func Do(ctx context.Context, hc *http.Client, r Request) (*http.Response, []byte, error) {
	u := *r.Base
	u.Path += r.Path
	u.RawQuery = r.Query.Encode()
	var rd io.Reader
	if r.Body != nil {
		b, err := json.Marshal(r.Body)
		if err != nil {
			return nil, nil, &BuildError{Err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), rd)
	if err != nil {
		return nil, nil, &BuildError{Err: err}
	}
	req.Header.Set("Accept", "application/json")
	if r.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	resp, err := keepMethod(hc, r.Method).Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, nil, err
	}
	if int64(len(data)) > maxAnswer {
		return nil, nil, fmt.Errorf("%w: %s %s answered more than %d MiB: ask for less (a smaller --limit, say)", ErrAnswerTooLarge, r.Method, r.Path, maxAnswer>>20)
	}
	return resp, data, nil
}

// keepMethod returns hc, or for a method other than GET and HEAD a copy
// of it that does not follow a redirect that would change the method:
// net/http follows a 301, 302 or 303 as a GET without the body, so that
// a change redirected by a front (http:// to https://, say) read what it
// was to change and was answered as made. The redirect is returned as the
// answer instead; a 307 or 308, which keeps the method and the body, is
// followed as hc would.
func keepMethod(hc *http.Client, method string) *http.Client {
	if method == http.MethodGet || method == http.MethodHead {
		return hc
	}
	c := *hc
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.Method != method {
			return http.ErrUseLastResponse
		}
		if hc.CheckRedirect != nil {
			return hc.CheckRedirect(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
}

// ErrorMessage returns the API's error message in an answer's body
// ({"error": "..."}), and false when the body is not one.
func ErrorMessage(body []byte) (string, bool) {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error == "" {
		return "", false
	}
	return e.Error, true
}

// ForeignAnswer reports whether data, a successful answer already decoded
// into out (a pointer to a struct of the API's answers), is a JSON object
// that holds none of out's fields: {}, or {"status":"ok"}, from a front
// that answers for the daemon (a health shim, a gateway's default route).
// It is not the API's answer, and says nothing of what the daemon did:
// after a change, its outcome is unknown. Every answer of the API to a
// change holds a field of its own.
func ForeignAnswer(data []byte, out any) bool {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return false // not an object: the decode into out said so
	}
	t := reflect.TypeOf(out)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return false
	}
	for key := range obj {
		if holdsField(t.Elem(), key) {
			return false
		}
	}
	return true
}

// holdsField reports whether struct type t decodes the JSON key key into
// one of its fields (or of the structs it embeds), as encoding/json
// matches names: without regard to case.
func holdsField(t reflect.Type, key string) bool {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" && tag == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			if holdsField(f.Type, key) {
				return true
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if strings.EqualFold(name, key) {
			return true
		}
	}
	return false
}

// HTTPSURL returns the https URL to use instead of base when an answer
// (status, body) is Go's net/http refusing a plain HTTP request on a TLS
// port — the daemon serves HTTPS (--tls-cert) — and false otherwise.
func HTTPSURL(base *url.URL, status int, body []byte) (string, bool) {
	if base.Scheme != "http" || status != http.StatusBadRequest ||
		!bytes.Contains(body, []byte("Client sent an HTTP request to an HTTPS server")) {
		return "", false
	}
	secure := *base
	secure.Scheme = "https"
	return secure.String(), true
}

// NotProcessedHeader marks an answer to a request that the daemon refused
// before it reached the API (for now only the 503 of a connection beyond
// --http-max-connections): nothing was done, nothing written, and it is
// safe to send again, after the answer's Retry-After. Answers without it,
// 503s with Retry-After at the store's deadline included, say nothing of
// the kind: a write may then have been made.
const NotProcessedHeader = "Leasehold-Not-Processed"

// NotProcessed reports whether resp is marked NotProcessedHeader.
func NotProcessed(resp *http.Response) bool {
	return resp.Header.Get(NotProcessedHeader) == "true"
}

// RetryAfter returns the pause resp's Retry-After asks for (in seconds or
// an HTTP date), and false when it has none that parses. A date in the
// past is 0.
func RetryAfter(resp *http.Response, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(resp.Header.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil {
		if s < 0 {
			return 0, false
		}
		return time.Duration(min(s, 1<<20)) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// BusyPolicy bounds how a caller sends again a request that the daemon did
// not process (a 503 marked NotProcessedHeader): at most Attempts sends in
// all, pausing between them what the answer's Retry-After asks (1 s when
// it asks nothing), cut to [MinPause, MaxPause], plus up to a quarter more
// so that clients refused together do not come back together; MaxWait
// (if not 0) bounds the pauses of one request, and the context's deadline
// the whole.
type BusyPolicy struct {
	Attempts           int
	MinPause, MaxPause time.Duration
	MaxWait            time.Duration
}

// Retry returns the pause before sending again a request whose answer
// resp came after attempts sends that paused waited in all; and false
// when it should not be sent again: another answer, the attempts or the
// wait used up, or a pause that would outlast ctx's deadline.
func (p BusyPolicy) Retry(ctx context.Context, resp *http.Response, attempts int, waited time.Duration) (time.Duration, bool) {
	if resp.StatusCode != http.StatusServiceUnavailable || !NotProcessed(resp) || attempts >= p.Attempts {
		return 0, false
	}
	d, ok := RetryAfter(resp, time.Now())
	if !ok {
		d = time.Second
	}
	d = min(max(d, p.MinPause), p.MaxPause)
	d += rand.N(d/4 + 1)
	if p.MaxWait > 0 && waited+d > p.MaxWait {
		return 0, false
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return 0, false
	}
	return d, true
}

// RefusesParams reports whether msg, the message of a daemon's 400, refuses
// one of names as an unknown query parameter (internal/apiserver's
// wording, which names the first unknown one in name order): how a caller
// tells a daemon from before those parameters, to say "upgrade it" or to
// ask without them.
func RefusesParams(msg string, names ...string) bool {
	for _, n := range names {
		if strings.Contains(msg, fmt.Sprintf("unknown query parameter %q", n)) {
			return true
		}
	}
	return false
}
