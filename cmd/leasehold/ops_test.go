package main

// Tests of what an operator relies on: metrics after a known workload,
// /readyz when the lease is lost, the API token, TLS, and config files.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
)

// faultStore fails lease requests (Grant, KeepAliveOnce) while cut is
// set: a daemon cut off from its lease but not from reads.
type faultStore struct {
	kv.Store
	cut atomic.Bool
}

var errCut = errors.New("faultStore: lease requests cut")

func (f *faultStore) Grant(ctx context.Context, ttl time.Duration) (kv.LeaseID, error) {
	if f.cut.Load() {
		return 0, errCut
	}
	return f.Store.Grant(ctx, ttl)
}

func (f *faultStore) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	if f.cut.Load() {
		return 0, errCut
	}
	return f.Store.KeepAliveOnce(ctx, id)
}

// opsEnv is a daemon in the test process wired as runDaemon wires it:
// metrics on store, coordinator and worker; the API with its worker,
// metrics and auth.
type opsEnv struct {
	coord *coordinator.Coordinator
	w     *worker.Worker
	fault *faultStore
	m     *apiserver.Metrics
	srv   *httptest.Server
	token string
}

type opsOpts struct {
	token        string
	loopbackOnly bool
	concurrency  int
}

func newOpsEnv(t *testing.T, o opsOpts) *opsEnv {
	t.Helper()
	log := testutil.QuietLogger(t)
	ls, err := localstore.Open(t.TempDir(), localstore.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	e := &opsEnv{fault: &faultStore{Store: ls}, m: apiserver.NewMetrics(), token: o.token}
	store := e.m.WrapStore(e.fault, "pebble")
	ccfg := coordinator.Config{Logger: log}
	e.m.HookCoordinator(&ccfg)
	e.coord, err = coordinator.New(store, ccfg)
	if err != nil {
		_ = ls.Close()
		t.Fatal(err)
	}
	kinds, err := daemonKinds(nil, 0, 0, log)
	if err != nil {
		t.Fatal(err)
	}
	wcfg := worker.Config{Concurrency: max(o.concurrency, 4), Logger: log, Maintain: true, LeaseTTL: 2 * time.Second}
	e.m.HookWorker(&wcfg)
	e.w, err = worker.New(e.coord, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	// hold runs until its context ends on its first run (rescues 0), and
	// returns at once after a lost run.
	kinds["hold"] = kindSpec{handler: func(ctx context.Context, j *worker.Job) error {
		if j.Rescues > 0 {
			return nil
		}
		<-ctx.Done()
		return context.Cause(ctx)
	}}
	for k, s := range kinds {
		e.w.Handle(k, s.handler)
	}
	if err := e.w.Start(context.Background()); err != nil {
		_ = ls.Close()
		t.Fatal(err)
	}
	e.m.RegisterWorker(e.w)
	e.srv = httptest.NewServer(apiserver.New(apiserver.Config{
		Coord: e.coord, Kinds: payloadChecks(kinds), Logger: log, WorkerID: e.w.ID(), Worker: e.w, Metrics: e.m,
		Auth: apiserver.AuthConfig{Token: o.token, LoopbackOnly: o.loopbackOnly},
	}))
	t.Cleanup(func() {
		e.fault.cut.Store(false)
		e.srv.Close()
		// Jobs still running (long sleeps) are interrupted and released.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := e.w.Stop(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("worker stop: %v", err)
		}
		if err := ls.Close(); err != nil {
			t.Errorf("store close: %v", err)
		}
	})
	return e
}

// req sends a request (with the env's token if auth) and returns the
// status and body.
func (e *opsEnv) req(t *testing.T, method, path, body string, hdr ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			r.Host = hdr[i+1]
			continue
		}
		r.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func (e *opsEnv) auth() []string {
	if e.token == "" {
		return nil
	}
	return []string{"Authorization", "Bearer " + e.token}
}

func (e *opsEnv) enqueue(t *testing.T, body string) *coordinator.Job {
	t.Helper()
	code, b := e.req(t, "POST", "/v1/jobs", body, e.auth()...)
	if code != http.StatusCreated {
		t.Fatalf("enqueue %s: %d %s", body, code, b)
	}
	var res apiserver.CreateResponse
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	return res.Job
}

func (e *opsEnv) get(t *testing.T, id string) *coordinator.Job {
	t.Helper()
	j, err := e.coord.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// waitFor polls cond every 20 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *opsEnv) waitState(t *testing.T, id string, st coordinator.State, d time.Duration) *coordinator.Job {
	t.Helper()
	var j *coordinator.Job
	waitFor(t, d, "job "+id+" "+string(st), func() bool {
		j = e.get(t, id)
		return j.State == st
	})
	return j
}

// scrape returns the samples of /metrics by "name{labels}" as printed
// (labels sorted by name).
func (e *opsEnv) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	code, b := e.req(t, "GET", "/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func checkSamples(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			if !ok {
				t.Errorf("metric %s missing, want %g", k, v)
			} else {
				t.Errorf("metric %s = %g, want %g", k, g, v)
			}
		}
	}
}

func TestMetricsAfterKnownWorkload(t *testing.T) {
	e := newOpsEnv(t, opsOpts{})
	var ids []string
	for i := range 5 {
		ids = append(ids, e.enqueue(t, `{"kind":"echo","payload":{"n":`+strconv.Itoa(i)+`}}`).ID)
	}
	retried := e.enqueue(t, `{"kind":"fail","payload":{"times":1},"max_attempts":3}`)
	discarded := e.enqueue(t, `{"kind":"fail","payload":{"times":5},"max_attempts":1}`)
	sleeper := e.enqueue(t, `{"kind":"sleep","payload":{"ms":60000}}`)
	// A unique key that matches a live job inserts nothing: not counted.
	e.enqueue(t, `{"kind":"sleep","payload":{"ms":1},"delay":"1h","unique_key":"u1"}`)
	if code, b := e.req(t, "POST", "/v1/jobs", `{"kind":"sleep","payload":{"ms":1},"unique_key":"u1"}`); code != http.StatusOK {
		t.Fatalf("duplicate unique enqueue: %d %s", code, b)
	}

	e.waitState(t, sleeper.ID, coordinator.StateRunning, 10*time.Second)
	if code, b := e.req(t, "POST", "/v1/jobs/"+sleeper.ID+"/cancel", ""); code != 200 {
		t.Fatalf("cancel: %d %s", code, b)
	}
	for _, id := range ids {
		e.waitState(t, id, coordinator.StateCompleted, 10*time.Second)
	}
	e.waitState(t, discarded.ID, coordinator.StateDiscarded, 10*time.Second)
	e.waitState(t, sleeper.ID, coordinator.StateCancelled, 10*time.Second)
	// attempt 1 fails, retried after about 1 s (backoff 1⁴ s + jitter).
	e.waitState(t, retried.ID, coordinator.StateCompleted, 15*time.Second)
	// Outcome hooks run after the write: wait for the last one.
	waitFor(t, 5*time.Second, "outcomes counted", func() bool {
		return e.scrape(t)[`leasehold_job_completions_total{kind="fail"}`] == 1
	})

	got := e.scrape(t)
	checkSamples(t, got, map[string]float64{
		`leasehold_enqueued_total{kind="echo",queue="default"}`:           5,
		`leasehold_enqueued_total{kind="fail",queue="default"}`:           2,
		`leasehold_enqueued_total{kind="sleep",queue="default"}`:          2,
		`leasehold_claims_total{queue="default"}`:                         9,
		`leasehold_job_completions_total{kind="echo"}`:                    5,
		`leasehold_job_completions_total{kind="fail"}`:                    1,
		`leasehold_job_failures_total{kind="fail"}`:                       2,
		`leasehold_job_retries_total{kind="fail"}`:                        1,
		`leasehold_job_discards_total{kind="fail",reason="attempts"}`:     1,
		`leasehold_job_cancellations_total{kind="sleep"}`:                 1,
		`leasehold_handler_duration_seconds_count{kind="echo"}`:           5,
		`leasehold_handler_duration_seconds_count{kind="fail"}`:           3,
		`leasehold_handler_duration_seconds_count{kind="sleep"}`:          1,
		`leasehold_queue_latency_seconds_count{queue="default"}`:          9,
		`leasehold_jobs{state="completed"}`:                               6,
		`leasehold_jobs{state="discarded"}`:                               1,
		`leasehold_jobs{state="cancelled"}`:                               1,
		`leasehold_jobs{state="scheduled"}`:                               1,
		`leasehold_jobs{state="running"}`:                                 0,
		`leasehold_queue_jobs{queue="default",state="available"}`:         0,
		`leasehold_queue_jobs{queue="default",state="running"}`:           0,
		`leasehold_http_requests_total{code="201",route="POST /v1/jobs"}`: 9,
		`leasehold_http_requests_total{code="200",route="POST /v1/jobs"}`: 1,
		`leasehold_self_fencing_total`:                                    0,
		`leasehold_callback_panics_total`:                                 0,
		`leasehold_reclaim_delay_seconds_count`:                           0,
		`leasehold_worker_running_jobs`:                                   0,
		`leasehold_jobs_scrape_error`:                                     0,
	})
	for k, v := range got {
		switch {
		case strings.HasPrefix(k, "leasehold_fenced_writes_refused_total"),
			strings.HasPrefix(k, "leasehold_outcome_write_errors_total"),
			strings.HasPrefix(k, "leasehold_store_errors_total"),
			strings.HasPrefix(k, "leasehold_reaped_jobs_total"),
			strings.HasPrefix(k, "leasehold_claim_conflicts_total"):
			if v != 0 {
				t.Errorf("%s = %g, want 0 in a fault-free run", k, v)
			}
		}
	}
	if got["leasehold_lease_renewals_total"] < 1 || got["leasehold_lease_renewal_seconds_count"] < got["leasehold_lease_renewals_total"] {
		t.Errorf("lease renewals: %g renewals, %g timed; want at least one in %s with a 2 s TTL", got["leasehold_lease_renewals_total"], got["leasehold_lease_renewal_seconds_count"], "the run")
	}
	if v := got["leasehold_lease_valid_seconds"]; v <= 0 || v > 2 {
		t.Errorf("leasehold_lease_valid_seconds = %g, want in (0, 2]", v)
	}
	// The Go and process collectors are on the daemon's own registry.
	if _, ok := got["go_goroutines"]; !ok {
		t.Error("go_goroutines missing: the Go collector is not registered")
	}
}

// TestReadyzWhenLeaseLost cuts the daemon's lease requests: /readyz turns
// 503 before the session's deadline passes, the daemon fences itself (its
// running job's outcome is abandoned), and once the cut heals it starts a
// new session, reaps its lost job, runs it again and is ready again.
func TestReadyzWhenLeaseLost(t *testing.T) {
	e := newOpsEnv(t, opsOpts{})
	ready := func() (int, apiserver.ReadyResponse) {
		code, b := e.req(t, "GET", "/readyz", "")
		var r apiserver.ReadyResponse
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("/readyz: %s: %v", b, err)
		}
		return code, r
	}
	if code, r := ready(); code != 200 || r.Status != "ready" || r.Store != "ok" || r.Worker != e.w.ID() {
		t.Fatalf("/readyz before the cut: %d %+v", code, r)
	}
	j := e.enqueue(t, `{"kind":"hold"}`)
	e.waitState(t, j.ID, coordinator.StateRunning, 10*time.Second)

	e.fault.cut.Store(true)
	cutAt := time.Now()
	var unready apiserver.ReadyResponse
	waitFor(t, 3*time.Second, "/readyz 503 after the lease requests were cut", func() bool {
		code, r := ready()
		unready = r
		return code == http.StatusServiceUnavailable
	})
	if unready.Status != "unready" || !strings.Contains(unready.Error, "lease") || unready.Store != "ok" {
		t.Errorf("/readyz while cut: %+v", unready)
	}
	t.Logf("unready %s after the cut: %s", time.Since(cutAt).Round(time.Millisecond), unready.Error)
	waitFor(t, 5*time.Second, "self-fencing counted", func() bool {
		return e.scrape(t)["leasehold_self_fencing_total"] == 1
	})
	waitFor(t, 5*time.Second, "abandoned run counted", func() bool {
		return e.scrape(t)[`leasehold_fenced_writes_refused_total{op="abandon"}`] == 1
	})
	if code, r := ready(); code != http.StatusServiceUnavailable || r.Lease != "lost" {
		t.Errorf("/readyz after self-fencing: %d %+v", code, r)
	}

	e.fault.cut.Store(false)
	waitFor(t, 10*time.Second, "/readyz 200 after the cut healed", func() bool {
		code, _ := ready()
		return code == 200
	})
	done := e.waitState(t, j.ID, coordinator.StateCompleted, 15*time.Second)
	if done.Rescues != 1 || done.Attempt != 1 {
		t.Errorf("job after the lost run: attempt %d, rescues %d; want attempt 1, rescues 1", done.Attempt, done.Rescues)
	}
	waitFor(t, 5*time.Second, "completion counted", func() bool {
		return e.scrape(t)[`leasehold_job_completions_total{kind="hold"}`] == 1
	})
	got := e.scrape(t)
	checkSamples(t, got, map[string]float64{
		`leasehold_self_fencing_total`:                          1,
		`leasehold_fenced_writes_refused_total{op="abandon"}`:   1,
		`leasehold_reaped_jobs_total{state="available"}`:        1,
		`leasehold_reclaim_delay_seconds_count`:                 1,
		`leasehold_claims_total{queue="default"}`:               2,
		`leasehold_handler_duration_seconds_count{kind="hold"}`: 2,
	})
	if got[`leasehold_store_errors_total{backend="pebble",op="keepalive"}`] < 1 {
		t.Errorf("failed renewals not counted as store errors: %v", got[`leasehold_store_errors_total{backend="pebble",op="keepalive"}`])
	}
}

func TestAPITokenRequiredForChanges(t *testing.T) {
	e := newOpsEnv(t, opsOpts{token: "s3cret-token-for-tests", loopbackOnly: true})
	body := `{"kind":"sleep","payload":{"ms":60000}}`
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "s3cret-token-for-tests"}, {"Authorization", "Basic czNjcmV0"}} {
		code, b := e.req(t, "POST", "/v1/jobs", body, hdr...)
		if code != http.StatusUnauthorized || !strings.Contains(string(b), "API token") {
			t.Errorf("enqueue with %v: %d %s, want 401", hdr, code, b)
		}
		if code, _ := e.req(t, "POST", "/v1/jobs/batch", `{"jobs":[`+body+`]}`, hdr...); code != http.StatusUnauthorized {
			t.Errorf("batch with %v: %d, want 401", hdr, code)
		}
	}
	if n, err := e.coord.Counts(context.Background()); err != nil || n[coordinator.StateAvailable]+n[coordinator.StateRunning] != 0 {
		t.Fatalf("refused requests wrote jobs: %v %v", n, err)
	}
	j := e.enqueue(t, body) // with the token
	e.waitState(t, j.ID, coordinator.StateRunning, 10*time.Second)

	// Reads stay open.
	for _, p := range []string{"/v1/jobs", "/v1/jobs/" + j.ID, "/v1/stats", "/v1/workers", "/", "/jobs", "/jobs/" + j.ID, "/metrics", "/healthz", "/readyz"} {
		if code, b := e.req(t, "GET", p, ""); code != 200 {
			t.Errorf("GET %s without a token: %d %.200s", p, code, b)
		}
	}
	// Cancel: refused without the token, from another site even with it,
	// and for a Host that is not loopback.
	if code, _ := e.req(t, "POST", "/v1/jobs/"+j.ID+"/cancel", ""); code != http.StatusUnauthorized {
		t.Errorf("cancel without token: %d, want 401", code)
	}
	cross := append(e.auth(), "Sec-Fetch-Site", "cross-site")
	if code, b := e.req(t, "POST", "/v1/jobs/"+j.ID+"/cancel", "", cross...); code != http.StatusForbidden {
		t.Errorf("cross-site cancel: %d %s, want 403", code, b)
	}
	origin := append(e.auth(), "Origin", "http://evil.example")
	if code, b := e.req(t, "POST", "/v1/jobs/"+j.ID+"/cancel", "", origin...); code != http.StatusForbidden {
		t.Errorf("cancel from another origin: %d %s, want 403", code, b)
	}
	rebind := append(e.auth(), "Host", "evil.example:7420")
	if code, b := e.req(t, "POST", "/v1/jobs/"+j.ID+"/cancel", "", rebind...); code != http.StatusForbidden {
		t.Errorf("cancel with a foreign Host: %d %s, want 403", code, b)
	}
	if code, _ := e.req(t, "GET", "/v1/jobs/"+j.ID, "", "Host", "evil.example"); code != http.StatusForbidden {
		t.Errorf("read with a foreign Host: %d, want 403", code)
	}
	if got := e.get(t, j.ID); got.State != coordinator.StateRunning || got.CancelRequested {
		t.Fatalf("a refused cancel changed the job: %+v", got)
	}
	same := append(e.auth(), "Sec-Fetch-Site", "same-origin", "Origin", e.srv.URL)
	if code, b := e.req(t, "POST", "/v1/jobs/"+j.ID+"/cancel", "", same...); code != 200 {
		t.Fatalf("cancel with the token from the same origin: %d %s", code, b)
	}
	e.waitState(t, j.ID, coordinator.StateCancelled, 10*time.Second)
	if n := e.scrape(t)[`leasehold_http_requests_total{code="401",route="POST /v1/jobs"}`]; n != 4 {
		t.Errorf("401s counted: %g, want 4", n)
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:7420": true, "localhost": true, "LOCALHOST:80": true, "[::1]:7420": true, "127.8.9.1": true,
		"app.localhost:1": true, "evil.example": false, "10.0.0.1:7420": false, "": false, "127.0.0.1.evil.example": false,
	} {
		if got := apiserver.LoopbackHost(host); got != want {
			t.Errorf("apiserver.LoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
	ln, err := net.Listen("tcp", "localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	if !loopbackListener(ln) {
		t.Errorf("loopbackListener(localhost:0, bound to %s) = false", ln.Addr())
	}
	// What a listener bound beyond loopback reports (not bound here: tests
	// listen on loopback only).
	for _, ip := range []string{"0.0.0.0", "::", "10.0.0.1"} {
		if loopbackListener(boundTo{net.ParseIP(ip)}) {
			t.Errorf("loopbackListener(bound to %s) = true", ip)
		}
	}
}

// boundTo is a net.Listener that only tells the address it is bound to.
type boundTo struct{ ip net.IP }

func (b boundTo) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (b boundTo) Close() error              { return nil }
func (b boundTo) Addr() net.Addr            { return &net.TCPAddr{IP: b.ip, Port: 7420} }

// TestCLITokenAndTLS runs the daemon binary over HTTPS with a token file
// and checks that the CLI is refused without the token and served with it
// (flag or LEASEHOLD_API_TOKEN), and that the token is not logged.
func TestCLITokenAndTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := testutil.WriteCert(t, dir)
	const token = "tls-test-token-0123456789"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, filepath.Join(dir, "data"), "--tls-cert", cert, "--tls-key", key, "--api-token-file", tokenFile)
	server := strings.Replace(d.server, "http://", "https://", 1)

	r := runCLI(t, nil, "", "enqueue", "echo", "--server", server, "--server-ca", cert)
	checkOneLineError(t, "enqueue without token", r, 1, "API token")
	r = runCLI(t, nil, "", "enqueue", "echo", "--server", server)
	if r.code != 1 || !strings.Contains(r.stderr, "certificate") {
		t.Errorf("enqueue over TLS without --server-ca: exit %d, stderr %q; want a certificate error", r.code, r.stderr)
	}
	id := strings.TrimSpace(okCLI(t, "enqueue", "echo", `{"secret-payload":"p4yl0ad"}`, "--server", server, "--server-ca", cert, "--api-token", token))
	r = runCLI(t, []string{"LEASEHOLD_API_TOKEN=" + token, "LEASEHOLD_SERVER_CA=" + cert}, "", "jobs", "wait", id, "--server", server)
	if r.code != 0 || !strings.Contains(r.stdout, id+" completed") {
		t.Errorf("jobs wait with the token from the environment: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, []string{"LEASEHOLD_API_TOKEN=" + token, "LEASEHOLD_SERVER_CA=" + cert}, "", "jobs", "cancel", id, "--server", server)
	checkOneLineError(t, "cancel of a completed job", r, 1, "already completed")
	// Plain HTTP to the TLS port is refused by the server.
	r = runCLI(t, nil, "", "jobs", "list", "--server", d.server)
	if r.code == 0 {
		t.Error("plain HTTP to the TLS listener succeeded")
	}
	d.stop(t, syscall.SIGTERM)
	for _, secret := range []string{token, "p4yl0ad"} {
		if strings.Contains(d.log.String(), secret) {
			t.Errorf("the daemon's log holds %q:\n%s", secret, d.log)
		}
	}
}

func TestDashboardPages(t *testing.T) {
	e := newOpsEnv(t, opsOpts{})
	done := e.enqueue(t, `{"kind":"echo","payload":{"<script>alert(1)</script>":"x"}}`)
	failed := e.enqueue(t, `{"kind":"fail","payload":{"times":9},"max_attempts":1}`)
	e.waitState(t, done.ID, coordinator.StateCompleted, 10*time.Second)
	e.waitState(t, failed.ID, coordinator.StateDiscarded, 10*time.Second)
	page := func(path string, want int) string {
		t.Helper()
		r, err := http.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		if r.StatusCode != want {
			t.Errorf("GET %s: %d, want %d: %.300s", path, r.StatusCode, want, b)
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Errorf("GET %s: Content-Type %q", path, ct)
		}
		if csp := r.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'nonce-") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		return string(b)
	}
	body := page("/jobs/"+done.ID, 200)
	if strings.Contains(body, "<script>alert") || !strings.Contains(body, "script") {
		t.Error("job page does not escape the payload")
	}
	if strings.Count(body, "<script") != 1 {
		t.Errorf("job page has %d scripts, want its own one", strings.Count(body, "<script"))
	}
	body = page("/jobs/"+failed.ID, 200)
	if !strings.Contains(body, "fail: attempt 1 of 9 planned failures") || !strings.Contains(body, `id="errors"`) {
		t.Error("job page lacks the attempt's error")
	}
	body = page("/jobs?state=discarded&refresh=0", 200)
	if !strings.Contains(body, failed.ID) || strings.Contains(body, done.ID) {
		t.Error("/jobs?state=discarded does not list exactly the discarded job")
	}
	body = page("/jobs?kind=echo", 200)
	if !strings.Contains(body, done.ID) || strings.Contains(body, failed.ID) {
		t.Error("/jobs?kind=echo does not list exactly the echo job")
	}
	if body = page("/jobs", 200); !strings.Contains(body, done.ID) || !strings.Contains(body, failed.ID) {
		t.Error("/jobs does not list the latest jobs")
	}
	if body = page("/jobs?state=bogus", 400); !strings.Contains(body, "unknown state") {
		t.Errorf("bad filter: %.500s", body)
	}
	page("/jobs/not-an-id", 400)
	if body = page("/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV", 404); !strings.Contains(body, "No job 01ARZ3NDEKTSV4RRFFQ69G5FAV") {
		t.Errorf("unknown job: %.500s", body)
	}
	if body = page("/", 200); !strings.Contains(body, `id="queue-default"`) || !strings.Contains(body, e.w.ID()) {
		t.Errorf("overview: %.500s", body)
	}
}
