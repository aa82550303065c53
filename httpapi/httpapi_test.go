package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/worker"
	"github.com/prometheus/client_golang/prometheus"
)

// program is a program that embeds the library: a local store, its
// coordinator and a started worker that runs "email" jobs.
type program struct {
	store *localstore.Store
	coord *coordinator.Coordinator
	w     *worker.Worker
	ran   chan json.RawMessage
}

func newProgram(t *testing.T, m *metrics.Metrics) *program {
	t.Helper()
	log := testutil.QuietLogger(t)
	p := &program{store: testutil.TempLocal(t, log), ran: make(chan json.RawMessage, 16)}
	ccfg, wcfg := coordinator.Config{Logger: log}, worker.Config{Concurrency: 4, Maintain: true, Logger: log}
	if m != nil {
		m.HookCoordinator(&ccfg)
		m.HookWorker(&wcfg)
	}
	var err error
	if p.coord, err = coordinator.New(p.store, ccfg); err != nil {
		t.Fatal(err)
	}
	if p.w, err = worker.New(p.coord, wcfg); err != nil {
		t.Fatal(err)
	}
	p.w.Handle("email", func(_ context.Context, j *worker.Job) error {
		p.ran <- j.Payload
		return nil
	})
	if err := p.w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.w.Stop(ctx)
	})
	return p
}

// serve serves h as a program would, on a loopback listener, until the
// test ends.
func serve(t *testing.T, h *httpapi.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.RegisterOnShutdown(h.StopWaits)
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return srv.URL
}

func newClient(t *testing.T, url, token string) *client.Client {
	t.Helper()
	c, err := client.NewHTTP(url, &client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// An embedding program's jobs are enqueued, run and read over its API as
// over a daemon's: the worker's kinds are accepted, other kinds and
// requests without the token are refused with nothing written, and the
// dashboard and /readyz see the program's worker.
func TestServesTheProgramsWorker(t *testing.T) {
	p := newProgram(t, nil)
	h, err := httpapi.New(p.coord, httpapi.Config{Worker: p.w, Token: "s3cret\n", Logger: testutil.QuietLogger(t)}) // as read from a file
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, h)
	c := newClient(t, url, "s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	res, err := c.Insert(ctx, client.RawArgs{KindName: "email", Payload: json.RawMessage(`{"to":"a@example.com"}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(<-p.ran); got != `{"to":"a@example.com"}` {
		t.Errorf("the handler ran with %s", got)
	}
	if j, err := c.Wait(ctx, res.Job.ID); err != nil || j.State != coordinator.StateCompleted {
		t.Fatalf("Wait = %+v, %v; want completed", j, err)
	}

	if _, err := c.Insert(ctx, client.RawArgs{KindName: "sms"}, nil); !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "unknown kind sms") {
		t.Errorf("insert of a kind the worker does not run: %v; want ErrInvalid naming it", err)
	}
	if _, err := newClient(t, url, "").Insert(ctx, client.RawArgs{KindName: "email"}, nil); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("insert without the token: %v; want refused for the token", err)
	}
	page, err := c.List(ctx, client.ListParams{})
	if err != nil || len(page.Jobs) != 1 {
		t.Errorf("jobs after the refused inserts: %d, %v; want the one enqueued", len(page.Jobs), err)
	}

	if code, body := testutil.APICall(t, h, "GET", "/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if code, body := testutil.APICall(t, h, "GET", "/", ""); code != http.StatusOK || !strings.Contains(string(body), p.w.ID()) {
		t.Errorf("dashboard: %d, names the worker %s: %v", code, p.w.ID(), strings.Contains(string(body), p.w.ID()))
	}
	if code, body := testutil.APICall(t, h, "GET", "/jobs/"+res.Job.ID, ""); code != http.StatusOK || !strings.Contains(string(body), "completed") {
		t.Errorf("job page: %d, shows completed: %v", code, strings.Contains(string(body), "completed"))
	}
}

// Config.Kinds accepts kinds that workers elsewhere run and checks their
// payloads (and the worker's) before anything is written; AnyLiveKind
// accepts any kind while no worker is live.
func TestKindsAndPayloadChecks(t *testing.T) {
	p := newProgram(t, nil)
	noTo := func(payload json.RawMessage) error {
		var v struct{ To string }
		if err := json.Unmarshal(payload, &v); err != nil || v.To == "" {
			return errors.New(`"to" is missing: set it to an address`)
		}
		return nil
	}
	h, err := httpapi.New(p.coord, httpapi.Config{Worker: p.w, Kinds: map[string]httpapi.PayloadCheck{"email": noTo, "pdf": nil}})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, serve(t, h), "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Insert(ctx, client.RawArgs{KindName: "email", Payload: json.RawMessage(`{}`)}, nil); !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), `"to" is missing`) {
		t.Errorf("email without to: %v; want the check's error", err)
	}
	if _, err := c.Insert(ctx, client.RawArgs{KindName: "pdf", Payload: json.RawMessage(`{"any":1}`)}, nil); err != nil {
		t.Errorf("pdf, a kind of Config.Kinds: %v", err)
	}
	if page, err := c.List(ctx, client.ListParams{}); err != nil || len(page.Jobs) != 1 || page.Jobs[0].Kind != "pdf" {
		t.Errorf("jobs: %+v, %v; want the pdf job only", page.Jobs, err)
	}

	// No worker of its own and none live: any kind waits for one.
	q := newProgram(t, nil)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if err := q.w.Stop(ctx2); err != nil {
		t.Fatal(err)
	}
	h2, err := httpapi.New(q.coord, httpapi.Config{AnyLiveKind: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, serve(t, h2), "").Insert(ctx, client.RawArgs{KindName: "anything"}, nil); err != nil {
		t.Errorf("AnyLiveKind with no live worker: %v", err)
	}
	// Neither a worker nor kinds: everything but enqueueing.
	h3, err := httpapi.New(q.coord, httpapi.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c3 := newClient(t, serve(t, h3), "")
	if _, err := c3.Insert(ctx, client.RawArgs{KindName: "anything"}, nil); !errors.Is(err, coordinator.ErrInvalid) || !strings.Contains(err.Error(), "takes no kinds") {
		t.Errorf("insert through an API with no kinds: %v; want ErrInvalid saying it takes none", err)
	}
	if page, err := c3.List(ctx, client.ListParams{}); err != nil || len(page.Jobs) != 1 {
		t.Errorf("list through an API with no kinds: %d jobs, %v; want the one enqueued", len(page.Jobs), err)
	}
}

// With the program's registry and metrics, /metrics serves the program's
// series with the API's: the jobs the API enqueued are counted in the
// program's metrics, nothing is registered twice, and a second Handler on
// the same registry is refused.
func TestMetricsOnTheProgramsRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	p := newProgram(t, m)
	m.RegisterWorker(p.w)
	m.RegisterJobs(p.coord, testutil.QuietLogger(t))
	h, err := httpapi.New(p.coord, httpapi.Config{Worker: p.w, Registry: reg, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t, url, "")
	res, err := c.Insert(ctx, client.RawArgs{KindName: "email"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, res.Job.ID); err != nil {
		t.Fatal(err)
	}
	_, body := testutil.APICall(t, h, "GET", "/metrics", "")
	for _, want := range []string{
		`leasehold_enqueued_total{kind="email",queue="default"} 1`,
		`leasehold_http_requests_total{code="201",route="POST /v1/jobs"} 1`,
		`leasehold_jobs{state="completed"} 1`,
		`leasehold_claims_total{queue="default"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if _, err := httpapi.New(p.coord, httpapi.Config{Registry: reg, Metrics: m}); !errors.Is(err, httpapi.ErrConfig) {
		t.Errorf("a second Handler on the registry: %v; want ErrConfig", err)
	}

	// A registry without the program's metrics (here: made on it, not
	// passed): the API adds its HTTP series only, registers nothing twice,
	// and serves no library series that nothing updates.
	bare := prometheus.NewRegistry()
	if _, err := httpapi.New(p.coord, httpapi.Config{Registry: bare}); err != nil {
		t.Fatal(err)
	}
	if mf, err := bare.Gather(); err != nil || len(mf) != 0 {
		t.Errorf("a registry without metrics holds %d families before a request (%v); want none", len(mf), err)
	}
	made := prometheus.NewRegistry()
	metrics.New(made)
	h3, err := httpapi.New(p.coord, httpapi.Config{Registry: made})
	if err != nil {
		t.Fatalf("a registry with metrics made but not passed: %v", err)
	}
	testutil.APICall(t, h3, "GET", "/healthz", "")
	if _, body := testutil.APICall(t, h3, "GET", "/metrics", ""); !strings.Contains(string(body), "leasehold_http_requests_total") {
		t.Errorf("/metrics lacks the HTTP series")
	}
}

// POST /v1/backup backs up the store given as Config.Backup; without one
// it is refused.
func TestBackup(t *testing.T) {
	p := newProgram(t, nil)
	for _, tc := range []struct {
		name   string
		backup httpapi.Backuper
		code   int
		msg    string
	}{
		{"with the store", p.store, http.StatusOK, `"revision"`},
		{"without", nil, http.StatusBadRequest, "this program serves no backups"},
		{"a nil store", (*localstore.Store)(nil), http.StatusBadRequest, "this program serves no backups"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := httpapi.New(p.coord, httpapi.Config{Backup: tc.backup})
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "b")
			code, body := testutil.APICall(t, h, "POST", "/v1/backup", `{"dir":"`+dir+`"}`)
			if code != tc.code || !strings.Contains(string(body), tc.msg) {
				t.Fatalf("POST /v1/backup: %d %s; want %d and %s", code, body, tc.code, tc.msg)
			}
			if _, err := localstore.ReadBackup(dir); (err == nil) != (tc.code == http.StatusOK) {
				t.Errorf("ReadBackup: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := h.Close(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}

// New refuses a config it cannot serve, saying what to pass.
func TestConfigErrors(t *testing.T) {
	p := newProgram(t, nil)
	bare, err := worker.New(p.coord, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	other := newProgram(t, nil)
	for _, tc := range []struct {
		name  string
		coord *coordinator.Coordinator
		cfg   httpapi.Config
		want  string
	}{
		{"no coordinator", nil, httpapi.Config{}, "no coordinator"},
		{"metrics without their registry", p.coord, httpapi.Config{Metrics: metrics.New(prometheus.NewRegistry())}, "Metrics without Registry"},
		{"a bad kind", p.coord, httpapi.Config{Kinds: map[string]httpapi.PayloadCheck{"a b": nil}}, "kind"},
		{"metrics of another registry", p.coord, httpapi.Config{Registry: prometheus.NewRegistry(), Metrics: metrics.New(prometheus.NewRegistry())}, "another registry"},
		{"a token of spaces", p.coord, httpapi.Config{Token: " \n"}, "Token"},
		{"a token with a space", p.coord, httpapi.Config{Token: "s3 cret"}, "Token"},
		{"a worker without handlers", p.coord, httpapi.Config{Worker: bare}, "register them (Handle) before New"},
		{"a worker of another coordinator", other.coord, httpapi.Config{Worker: p.w}, "another coordinator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := httpapi.New(tc.coord, tc.cfg)
			if !errors.Is(err, httpapi.ErrConfig) || !strings.Contains(err.Error(), tc.want) || h != nil {
				t.Errorf("New = %v, %v; want ErrConfig saying %q", h, err, tc.want)
			}
		})
	}
}

// Under Config.Prefix on a program's mux: the client and the CLI's
// requests reach the API through the prefix, the dashboard's links stay
// under it, and a path outside it is not served.
func TestServedUnderAPrefix(t *testing.T) {
	p := newProgram(t, nil)
	h, err := httpapi.New(p.coord, httpapi.Config{Worker: p.w, Prefix: "/leasehold/"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/leasehold/", h)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "the program's own", http.StatusTeapot) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t, srv.URL+"/leasehold", "")
	res, err := c.Insert(ctx, client.RawArgs{KindName: "email"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j, err := c.Wait(ctx, res.Job.ID); err != nil || j.State != coordinator.StateCompleted {
		t.Fatalf("Wait under the prefix = %+v, %v", j, err)
	}
	code, body := testutil.APICall(t, h, "GET", "/leasehold/jobs/"+res.Job.ID, "")
	for _, want := range []string{`<base href="/leasehold/">`, `href="jobs"`, `href="v1/jobs/` + res.Job.ID + `"`} {
		if code != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("job page under the prefix: %d, lacks %s", code, want)
		}
	}
	if code, _ := testutil.APICall(t, h, "GET", "/leasehold", ""); code != http.StatusOK {
		t.Errorf("GET /leasehold: %d, want the overview", code)
	}
	if code, body := testutil.APICall(t, h, "GET", "/v1/jobs", ""); code != http.StatusNotFound || !strings.Contains(string(body), "served under /leasehold/") {
		t.Errorf("GET /v1/jobs outside the prefix: %d %s", code, body)
	}
	if code, _ := testutil.APICall(t, h, "GET", "/leaseholdx/v1/jobs", ""); code != http.StatusNotFound {
		t.Errorf("GET /leaseholdx/v1/jobs: %d, want 404", code)
	}
	if _, err := httpapi.New(p.coord, httpapi.Config{Prefix: "leasehold"}); !errors.Is(err, httpapi.ErrConfig) {
		t.Errorf("Prefix without its leading /: %v, want ErrConfig", err)
	}
}

// A program's API on loopback is guarded as a daemon's: with
// LoopbackOnly, a request for a Host that is not loopback (a web page
// reaching it through DNS rebinding) is refused, reads too, since reads
// need no token and show every payload; a browser's cross-site write is
// refused whatever the token.
func TestLoopbackOnlyAndCrossOrigin(t *testing.T) {
	p := newProgram(t, nil)
	h, err := httpapi.New(p.coord, httpapi.Config{Worker: p.w, Token: "s3cret", LoopbackOnly: true, Logger: testutil.QuietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, host, path, body string, hdr ...string) int {
		t.Helper()
		req := httptest.NewRequest(method, "http://"+host+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	auth := []string{"Authorization", "Bearer s3cret"}
	const job = `{"kind":"email","payload":{"to":"a@example.com"}}`
	if code := call("GET", "rebound.example:7420", "/v1/jobs", ""); code != http.StatusForbidden {
		t.Errorf("read for a Host beyond loopback: %d, want 403", code)
	}
	if code := call("GET", "rebound.example:7420", "/", ""); code != http.StatusForbidden {
		t.Errorf("dashboard for a Host beyond loopback: %d, want 403", code)
	}
	if code := call("POST", "rebound.example:7420", "/v1/jobs", job, auth...); code != http.StatusForbidden {
		t.Errorf("enqueue for a Host beyond loopback: %d, want 403", code)
	}
	if code := call("POST", "127.0.0.1:7420", "/v1/jobs", job, append(auth, "Content-Type", "text/plain", "Sec-Fetch-Site", "cross-site")...); code != http.StatusForbidden {
		t.Errorf("cross-site enqueue with the token: %d, want 403", code)
	}
	if code := call("POST", "127.0.0.1:7420", "/v1/jobs", job, "Origin", "http://127.0.0.1:7420"); code != http.StatusUnauthorized {
		t.Errorf("same-origin enqueue without the token: %d, want 401", code)
	}
	page, err := p.coord.List(context.Background(), coordinator.ListParams{})
	if err != nil || len(page.Jobs) != 0 {
		t.Fatalf("jobs after refused enqueues: %d, %v; want none", len(page.Jobs), err)
	}
	if code := call("GET", "localhost:7420", "/v1/jobs", ""); code != http.StatusOK {
		t.Errorf("read for localhost: %d, want 200", code)
	}
	if code := call("POST", "[::1]:7420", "/v1/jobs", job, append(auth, "Origin", "http://[::1]:7420")...); code != http.StatusCreated {
		t.Errorf("same-origin enqueue with the token: %d, want 201", code)
	}
}
