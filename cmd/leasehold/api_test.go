package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
)

// apiEnv is a daemon in the test process: a real localstore in a temporary
// directory, a coordinator, a worker (unless noWorker) and the API on an
// httptest server.
type apiEnv struct {
	t     *testing.T
	coord *coordinator.Coordinator
	w     *worker.Worker
	srv   *httptest.Server
	hc    *http.Client
}

type envOpts struct {
	noWorker bool
	execs    []string
}

func newAPIEnv(t testing.TB, o envOpts) *apiEnv {
	t.Helper()
	log := testutil.QuietLogger(t)
	store, err := localstore.Open(t.TempDir(), localstore.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	coord, err := coordinator.New(store, coordinator.Config{Logger: log})
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	kinds, err := daemonKinds(o.execs, 0, 0, log)
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	e := &apiEnv{coord: coord}
	if tt, ok := t.(*testing.T); ok {
		e.t = tt
	}
	if !o.noWorker {
		w, err := worker.New(coord, worker.Config{Concurrency: 4, Logger: log, Maintain: true, LeaseTTL: 2 * time.Second})
		if err != nil {
			_ = store.Close()
			t.Fatal(err)
		}
		for k, s := range kinds {
			w.Handle(k, s.handler)
		}
		if err := w.Start(context.Background()); err != nil {
			_ = store.Close()
			t.Fatal(err)
		}
		e.w = w
	}
	e.srv = httptest.NewServer(apiserver.New(apiserver.Config{Coord: coord, Kinds: payloadChecks(kinds), MaxPayload: coordinator.DefaultMaxPayloadBytes, Logger: log}))
	e.hc = e.srv.Client()
	t.Cleanup(func() {
		e.srv.Close()
		if e.w != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := e.w.Stop(ctx); err != nil {
				t.Errorf("worker stop: %v", err)
			}
			cancel()
		}
		if err := store.Close(); err != nil {
			t.Errorf("store close: %v", err)
		}
	})
	return e
}

// do sends a request with a raw body and returns the status and body.
func (e *apiEnv) do(t testing.TB, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); path != "/" && path != "/metrics" && ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	return resp.StatusCode, b
}

// doJSON sends body (marshalled unless a string) and decodes the answer
// into out, failing the test unless the status is want.
func (e *apiEnv) doJSON(t testing.TB, method, path string, body any, want int, out any) {
	t.Helper()
	var s string
	switch b := body.(type) {
	case nil:
	case string:
		s = b
	default:
		bb, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		s = string(bb)
	}
	code, resp := e.do(t, method, path, s)
	if code != want {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, code, want, resp)
	}
	if out != nil {
		if err := json.Unmarshal(resp, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, resp, err)
		}
	}
}

func (e *apiEnv) total(t testing.TB) int {
	t.Helper()
	counts, err := e.coord.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func (e *apiEnv) create(t testing.TB, req apiserver.CreateRequest) *coordinator.Job {
	t.Helper()
	var res apiserver.CreateResponse
	e.doJSON(t, "POST", "/v1/jobs", req, http.StatusCreated, &res)
	if res.Job == nil || res.Existed {
		t.Fatalf("create: %+v", res)
	}
	return res.Job
}

// waitFinal long-polls until job id is final.
func (e *apiEnv) waitFinal(t testing.TB, id string) *coordinator.Job {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var res apiserver.JobResponse
		e.doJSON(t, "GET", "/v1/jobs/"+id+"?wait=5s", nil, http.StatusOK, &res)
		if res.Job.State.Final() {
			return res.Job
		}
	}
	t.Fatalf("job %s not final in time", id)
	return nil
}

func TestAPICreateGetList(t *testing.T) {
	e := newAPIEnv(t, envOpts{})
	j := e.create(t, apiserver.CreateRequest{Kind: "echo", Payload: json.RawMessage(`{"hello":"world"}`), Queue: "default", Priority: new(2), MaxAttempts: new(3), Timeout: "5s"})
	if j.Kind != "echo" || j.Priority != 2 || j.MaxAttempts != 3 || j.TimeoutMS != 5000 || j.Queue != "default" {
		t.Errorf("created job: %+v", j)
	}
	var got apiserver.JobResponse
	e.doJSON(t, "GET", "/v1/jobs/"+j.ID, nil, http.StatusOK, &got)
	if got.Job.ID != j.ID {
		t.Errorf("get: %+v", got.Job)
	}
	final := e.waitFinal(t, j.ID)
	if final.State != coordinator.StateCompleted || string(final.Result) != `{"hello":"world"}` {
		t.Errorf("final: state %s result %s", final.State, final.Result)
	}

	// A scheduled job is listed as such; filters combine.
	s := e.create(t, apiserver.CreateRequest{Kind: "sleep", Delay: "1h"})
	if s.State != coordinator.StateScheduled || time.Until(s.ScheduledAt) < 59*time.Minute {
		t.Errorf("delayed job: state %s scheduled_at %s", s.State, s.ScheduledAt)
	}
	at := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second)
	s2 := e.create(t, apiserver.CreateRequest{Kind: "sleep", ScheduledAt: at.Format(time.RFC3339)})
	if !s2.ScheduledAt.Equal(at) {
		t.Errorf("scheduled_at: got %s, want %s", s2.ScheduledAt, at)
	}
	var page coordinator.ListPage
	e.doJSON(t, "GET", "/v1/jobs?state=scheduled&kind=sleep", nil, http.StatusOK, &page)
	if len(page.Jobs) != 2 || page.Jobs[0].ID != s.ID || page.Jobs[1].ID != s2.ID {
		t.Errorf("list scheduled: %d jobs", len(page.Jobs))
	}
	var first, second coordinator.ListPage
	e.doJSON(t, "GET", "/v1/jobs?limit=2", nil, http.StatusOK, &first)
	if len(first.Jobs) != 2 || first.Next == "" {
		t.Fatalf("first page: %d jobs, next %q", len(first.Jobs), first.Next)
	}
	e.doJSON(t, "GET", "/v1/jobs?limit=2&after="+first.Next, nil, http.StatusOK, &second)
	if len(second.Jobs) != 1 || second.Jobs[0].ID != s2.ID || second.Next != "" {
		t.Errorf("second page: %+v", second)
	}
	var raw map[string]json.RawMessage
	e.doJSON(t, "GET", "/v1/jobs?state=cancelled", nil, http.StatusOK, &raw)
	if string(raw["jobs"]) != "[]" {
		t.Errorf("empty list: jobs is %s, want []", raw["jobs"])
	}
}

func TestAPIJobJSONIsCoordinatorJob(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	j := e.create(t, apiserver.CreateRequest{Kind: "echo"})
	_, body := e.do(t, "GET", "/v1/jobs/"+j.ID, "")
	var env map[string]json.RawMessage
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(env["job"], &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"id", "kind", "queue", "priority", "state", "payload", "attempt", "max_attempts", "errors",
		"created_at", "scheduled_at", "attempted_at", "finalized_at", "owner", "token", "checkpoint", "result"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("job JSON lacks %q: %s", f, env["job"])
		}
	}
	stored, err := e.coord.Get(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(stored)
	if !bytes.Equal(bytes.TrimSpace(env["job"]), want) {
		t.Errorf("job JSON differs from coordinator.Job's:\n got %s\nwant %s", env["job"], want)
	}
}

func TestAPIBatchAndUniqueKey(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	var res apiserver.BatchResponse
	e.doJSON(t, "POST", "/v1/jobs/batch", apiserver.BatchRequest{Jobs: []apiserver.CreateRequest{
		{Kind: "echo", Payload: json.RawMessage(`1`)},
		{Kind: "sleep", Payload: json.RawMessage(`{"ms":1}`), Queue: "other"},
		{Kind: "fail", UniqueKey: "u1"},
	}}, http.StatusCreated, &res)
	if len(res.Jobs) != 3 || len(res.Existed) != 3 || res.Existed[0] || res.Existed[1] || res.Existed[2] {
		t.Fatalf("batch: %+v", res)
	}
	if res.Jobs[1].Queue != "other" || res.Jobs[2].UniqueKey != "u1" {
		t.Errorf("batch jobs: %+v %+v", res.Jobs[1], res.Jobs[2])
	}

	// The unique key matches the live job: it is returned, nothing written.
	var one apiserver.CreateResponse
	e.doJSON(t, "POST", "/v1/jobs", apiserver.CreateRequest{Kind: "fail", UniqueKey: "u1"}, http.StatusOK, &one)
	if !one.Existed || one.Job.ID != res.Jobs[2].ID {
		t.Errorf("unique create: existed %v id %s, want %s", one.Existed, one.Job.ID, res.Jobs[2].ID)
	}
	var again apiserver.BatchResponse
	e.doJSON(t, "POST", "/v1/jobs/batch", apiserver.BatchRequest{Jobs: []apiserver.CreateRequest{{Kind: "fail", UniqueKey: "u1"}}}, http.StatusOK, &again)
	if !again.Existed[0] || again.Jobs[0].ID != res.Jobs[2].ID {
		t.Errorf("unique batch: %+v", again)
	}
	// Two jobs of one key in a batch: the second is answered with the first.
	var twice apiserver.BatchResponse
	e.doJSON(t, "POST", "/v1/jobs/batch", apiserver.BatchRequest{Jobs: []apiserver.CreateRequest{{Kind: "fail", UniqueKey: "u2"}, {Kind: "echo", UniqueKey: "u2"}}}, http.StatusCreated, &twice)
	if len(twice.Jobs) != 2 || twice.Existed[0] || !twice.Existed[1] || twice.Jobs[1].ID != twice.Jobs[0].ID || twice.Jobs[1].Kind != "fail" {
		t.Errorf("batch with one key twice: %+v", twice)
	}
	if n := e.total(t); n != 4 {
		t.Errorf("%d jobs stored, want 4", n)
	}
	// Once the job is final, its key is free again.
	e.doJSON(t, "POST", "/v1/jobs/"+res.Jobs[2].ID+"/cancel", nil, http.StatusOK, nil)
	e.doJSON(t, "POST", "/v1/jobs", apiserver.CreateRequest{Kind: "fail", UniqueKey: "u1"}, http.StatusCreated, &one)
	if one.Existed || one.Job.ID == res.Jobs[2].ID {
		t.Errorf("key of a cancelled job not reusable: %+v", one)
	}
}

func TestAPICancel(t *testing.T) {
	e := newAPIEnv(t, envOpts{})
	s := e.create(t, apiserver.CreateRequest{Kind: "sleep", Delay: "1h"})
	var res apiserver.JobResponse
	e.doJSON(t, "POST", "/v1/jobs/"+s.ID+"/cancel", nil, http.StatusOK, &res)
	if res.Job.State != coordinator.StateCancelled {
		t.Errorf("cancel scheduled: state %s", res.Job.State)
	}
	var er apiserver.ErrorResponse
	e.doJSON(t, "POST", "/v1/jobs/"+s.ID+"/cancel", nil, http.StatusConflict, &er)
	if !strings.Contains(er.Error, "already cancelled") {
		t.Errorf("second cancel: %q", er.Error)
	}

	// A running job is cancelled by its worker.
	r := e.create(t, apiserver.CreateRequest{Kind: "sleep", Payload: json.RawMessage(`{"ms":60000}`)})
	waitState(t, e, r.ID, coordinator.StateRunning)
	e.doJSON(t, "POST", "/v1/jobs/"+r.ID+"/cancel", nil, http.StatusOK, &res)
	if res.Job.State != coordinator.StateRunning || !res.Job.CancelRequested {
		t.Errorf("cancel running: state %s cancel_requested %v", res.Job.State, res.Job.CancelRequested)
	}
	if j := e.waitFinal(t, r.ID); j.State != coordinator.StateCancelled {
		t.Errorf("cancelled running job ended %s", j.State)
	}
	e.doJSON(t, "POST", "/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel", nil, http.StatusNotFound, &er)
}

func waitState(t *testing.T, e *apiEnv, id string, st coordinator.State) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var res apiserver.JobResponse
		e.doJSON(t, "GET", "/v1/jobs/"+id, nil, http.StatusOK, &res)
		if res.Job.State == st {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("job %s never %s", id, st)
}

func TestAPIWaitExpires(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	j := e.create(t, apiserver.CreateRequest{Kind: "echo"})
	start := time.Now()
	var res apiserver.JobResponse
	e.doJSON(t, "GET", "/v1/jobs/"+j.ID+"?wait=200ms", nil, http.StatusOK, &res)
	if took := time.Since(start); took < 200*time.Millisecond || took > 5*time.Second {
		t.Errorf("wait=200ms took %s", took)
	}
	if res.Job.State != coordinator.StateAvailable {
		t.Errorf("state %s, want available", res.Job.State)
	}
}

func TestAPIFailAndRetry(t *testing.T) {
	e := newAPIEnv(t, envOpts{})
	j := e.create(t, apiserver.CreateRequest{Kind: "fail", Payload: json.RawMessage(`{"times":1}`)})
	final := e.waitFinal(t, j.ID)
	if final.State != coordinator.StateCompleted || final.Attempt != 2 || len(final.Errors) != 1 {
		t.Errorf("fail times=1: state %s attempt %d errors %+v", final.State, final.Attempt, final.Errors)
	}
	d := e.create(t, apiserver.CreateRequest{Kind: "fail", MaxAttempts: new(1)})
	if final := e.waitFinal(t, d.ID); final.State != coordinator.StateDiscarded {
		t.Errorf("fail without times, one attempt: %s", final.State)
	}
}

// TestAPIBadInputWritesNothing sends every kind of bad request and checks
// that each gets a 4xx JSON error on one line and that nothing is written.
func TestAPIBadInputWritesNothing(t *testing.T) {
	e := newAPIEnv(t, envOpts{})
	big := `{"kind":"echo","payload":"` + strings.Repeat("x", 2*coordinator.DefaultMaxPayloadBytes) + `"}`
	justOver := `{"kind":"echo","payload":"` + strings.Repeat("x", coordinator.DefaultMaxPayloadBytes-1) + `"}`
	cases := []struct {
		name, method, path, body string
		status                   int
		want                     string // in the error
	}{
		{"empty body", "POST", "/v1/jobs", "", 400, "empty"},
		{"malformed JSON", "POST", "/v1/jobs", `{"kind":"echo",`, 400, "JSON"},
		{"malformed payload", "POST", "/v1/jobs", `{"kind":"echo","payload":{ms:1}}`, 400, "not valid JSON"},
		{"not an object", "POST", "/v1/jobs", `["echo"]`, 400, "array"},
		{"trailing data", "POST", "/v1/jobs", `{"kind":"echo"} {"kind":"echo"}`, 400, "exactly one"},
		{"unknown field", "POST", "/v1/jobs", `{"kind":"echo","colour":"red"}`, 400, `unknown field "colour"`},
		{"wrong type", "POST", "/v1/jobs", `{"kind":"echo","priority":"high"}`, 400, `"priority"`},
		{"missing kind", "POST", "/v1/jobs", `{"payload":{}}`, 400, "kind is missing"},
		{"unknown kind", "POST", "/v1/jobs", `{"kind":"resize"}`, 400, "unknown kind resize: this daemon runs echo, fail, sleep"},
		{"bad kind name", "POST", "/v1/jobs", `{"kind":"a b"}`, 400, "kind"},
		{"bad queue", "POST", "/v1/jobs", `{"kind":"echo","queue":"no/slash"}`, 400, "queue"},
		{"bad priority", "POST", "/v1/jobs", `{"kind":"echo","priority":9}`, 400, "priority 9"},
		{"negative max attempts", "POST", "/v1/jobs", `{"kind":"echo","max_attempts":-1}`, 400, "max attempts"},
		{"explicit priority 0", "POST", "/v1/jobs", `{"kind":"echo","priority":0}`, 400, "priority 0: want 1 (first) to 4 (last), or leave it out for 1"},
		{"explicit max attempts 0", "POST", "/v1/jobs", `{"kind":"echo","max_attempts":0}`, 400, "max_attempts 0: want 1 or more, or leave it out for 25"},
		{"batch explicit priority 0", "POST", "/v1/jobs/batch", `{"jobs":[{"kind":"echo"},{"kind":"echo","priority":0}]}`, 400, "job 1: priority 0"},
		{"bad delay", "POST", "/v1/jobs", `{"kind":"echo","delay":"soon"}`, 400, "delay"},
		{"negative delay", "POST", "/v1/jobs", `{"kind":"echo","delay":"-1s"}`, 400, "delay"},
		{"delay and scheduled_at", "POST", "/v1/jobs", `{"kind":"echo","delay":"1s","scheduled_at":"2030-01-02T15:04:05Z"}`, 400, "both"},
		{"bad scheduled_at", "POST", "/v1/jobs", `{"kind":"echo","scheduled_at":"tomorrow"}`, 400, "RFC 3339"},
		{"bad timeout", "POST", "/v1/jobs", `{"kind":"echo","timeout":"-5s"}`, 400, "timeout"},
		{"long unique key", "POST", "/v1/jobs", `{"kind":"echo","unique_key":"` + strings.Repeat("k", 300) + `"}`, 400, "unique key"},
		{"bad sleep payload", "POST", "/v1/jobs", `{"kind":"sleep","payload":{"ms":"long"}}`, 400, "ms is a JSON string"},
		{"sleep payload not object", "POST", "/v1/jobs", `{"kind":"sleep","payload":[1]}`, 400, "object"},
		{"bad fail payload", "POST", "/v1/jobs", `{"kind":"fail","payload":{"times":-1}}`, 400, "negative"},
		{"payload of 2 MiB", "POST", "/v1/jobs", big, 413, "limit"},
		{"payload just over 1 MiB", "POST", "/v1/jobs", justOver, 400, "over the 1048576-byte limit"},
		{"empty batch", "POST", "/v1/jobs/batch", `{"jobs":[]}`, 400, "no jobs"},
		{"batch with one bad job", "POST", "/v1/jobs/batch", `{"jobs":[{"kind":"echo"},{"kind":"resize"}]}`, 400, "job 1: unknown kind resize"},
		{"batch unknown field", "POST", "/v1/jobs/batch", `{"jobs":[{"kind":"echo"}],"x":1}`, 400, "unknown field"},
		// Each endpoint's body errors name its own fields and example.
		{"batch unknown top-level field", "POST", "/v1/jobs/batch", `{"jobs":[{"kind":"echo"}],"x":1}`, 400, `unknown field "x": the field is jobs, a list of jobs whose fields are kind, payload,`},
		{"batch empty body", "POST", "/v1/jobs/batch", "", 400, `send a JSON object such as {"jobs":[{"kind":"echo","payload":{}}]}`},
		{"bulk cancel unknown field", "POST", "/v1/jobs/cancel", `{"bogus":1}`, 400, `unknown field "bogus": the fields are state, kind, queue, all`},
		{"bulk cancel empty body", "POST", "/v1/jobs/cancel", "", 400, `send a JSON object such as {"queue":"default"}`},
		{"bulk cancel not an object", "POST", "/v1/jobs/cancel", `[]`, 400, `{"queue":"default"}`},
		{"limit unknown field", "PUT", "/v1/queues/default/limit", `{"lim":1}`, 400, `unknown field "lim": the field is limit`},
		{"limit empty body", "PUT", "/v1/queues/default/limit", "", 400, `send a JSON object such as {"limit":10}`},
		{"payload of 2 MiB names the payload limit", "POST", "/v1/jobs", big, 413, "a job's payload may be at most 1048576 bytes: send a smaller payload"},
		{"unique by_state unfinished", "POST", "/v1/jobs", `{"kind":"echo","unique":{"by_state":["completed","running"]}}`, 400, `unique.by_state "running": want completed, discarded or cancelled`},
		{"batch unique by_state unfinished", "POST", "/v1/jobs/batch", `{"jobs":[{"kind":"echo","unique":{"by_state":["available"]}}]}`, 400, `job 0: unique.by_state "available": want completed`},
		{"bad id", "GET", "/v1/jobs/nope", "", 400, "bad job id"},
		{"bad id lower case", "GET", "/v1/jobs/01arz3ndektsv4rrffq69g5fav!", "", 400, "bad job id"},
		{"bad id cancel", "POST", "/v1/jobs/nope/cancel", "", 400, "bad job id"},
		{"unknown job", "GET", "/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV", "", 404, "not found"},
		{"unknown job wait", "GET", "/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV?wait=1s", "", 404, "not found"},
		{"bad wait", "GET", "/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV?wait=forever", "", 400, "wait"},
		{"unknown state filter", "GET", "/v1/jobs?state=done", "", 400, `unknown state "done"`},
		{"bad limit", "GET", "/v1/jobs?limit=0", "", 400, "limit"},
		{"huge limit", "GET", "/v1/jobs?limit=1000000", "", 400, "limit"},
		{"unknown query parameter", "GET", "/v1/jobs?stat=running", "", 400, `unknown query parameter "stat"`},
		{"unknown endpoint", "GET", "/v1/nothing", "", 404, "no endpoint"},
		{"wrong method", "PUT", "/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV", "", 405, "not allowed"},
		{"bool field given a string", "POST", "/v1/jobs/cancel", `{"all":"yes"}`, 400, `field "all" is a JSON string: want true or false`},
		{"workers with a filter", "GET", "/v1/workers?queue=mail", "", 400, `unknown query parameter "queue": this endpoint takes none`},
		{"stats with a filter", "GET", "/v1/stats?state=running", "", 400, `unknown query parameter "state": this endpoint takes none`},
		{"create with a query", "POST", "/v1/jobs?queue=mail", `{"kind":"echo"}`, 400, `unknown query parameter "queue": this endpoint takes none`},
		{"batch with a query", "POST", "/v1/jobs/batch?queue=mail", `{"jobs":[{"kind":"echo"}]}`, 400, `unknown query parameter "queue": this endpoint takes none`},
		{"bulk cancel with a query", "POST", "/v1/jobs/cancel?queue=mail", `{"all":true}`, 400, `unknown query parameter "queue": this endpoint takes none`},
		{"bulk cancel with all and a filter", "POST", "/v1/jobs/cancel", `{"all":true,"state":"available"}`, 400, `"all":true cancels every unfinished job: send it alone`},
		{"unique bool field given a number", "POST", "/v1/jobs", `{"kind":"echo","unique":{"by_args":1}}`, 400, `field "unique.by_args" is a JSON number: want true or false`},
		// An explicit empty value is not read as left out: it would
		// match every job, run the job now, drop its unique key.
		{"bulk cancel empty kind", "POST", "/v1/jobs/cancel", `{"kind":"","queue":"default"}`, 400, `field "kind" is empty: leave it out, or give a value`},
		{"empty unique key", "POST", "/v1/jobs", `{"kind":"echo","unique_key":""}`, 400, `field "unique_key" is empty`},
		{"empty scheduled_at", "POST", "/v1/jobs", `{"kind":"echo","scheduled_at":""}`, 400, `field "scheduled_at" is empty`},
		{"empty queue", "POST", "/v1/jobs", `{"kind":"echo","queue" : "" }`, 400, `field "queue" is empty`},
		{"empty by_period", "POST", "/v1/jobs", `{"kind":"echo","unique":{"by_period":""}}`, 400, `field "unique.by_period" is empty`},
		{"batch empty delay", "POST", "/v1/jobs/batch", `{"jobs":[{"kind":"echo"},{"kind":"echo","delay":""}]}`, 400, `field "jobs[1].delay" is empty`},
		{"empty state filter", "GET", "/v1/jobs?state=&kind=echo", "", 400, `query parameter "state" is empty: leave it out, or give a value`},
		{"empty wait", "GET", "/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV?wait=", "", 400, `query parameter "wait" is empty`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := e.do(t, c.method, c.path, c.body)
			if code != c.status {
				t.Errorf("status %d, want %d; body %.300s", code, c.status, body)
			}
			var er apiserver.ErrorResponse
			if err := json.Unmarshal(body, &er); err != nil || er.Error == "" {
				t.Fatalf("body is not a JSON error: %.300s", body)
			}
			if strings.ContainsAny(er.Error, "\r\n") {
				t.Errorf("error is not one line: %q", er.Error)
			}
			if !strings.Contains(er.Error, c.want) {
				t.Errorf("error %q does not contain %q", er.Error, c.want)
			}
			if c.path != "/v1/jobs" && c.path != "/v1/jobs/batch" && strings.Contains(er.Error, `"kind"`) && !strings.Contains(c.body, `"kind"`) {
				t.Errorf("error of %s %s describes a job: %q", c.method, c.path, er.Error)
			}
			if c.path == "/v1/jobs" && strings.Contains(er.Error, "batch") {
				t.Errorf("error of a single create speaks of batches: %q", er.Error)
			}
			if strings.Contains(er.Error, "coordinator:") {
				t.Errorf("error leaks an internal prefix: %q", er.Error)
			}
		})
	}
	if n := e.total(t); n != 0 {
		t.Errorf("%d jobs written by bad requests, want 0", n)
	}
}

func TestAPIWorkersStatsHealthMetricsDashboard(t *testing.T) {
	e := newAPIEnv(t, envOpts{})
	j := e.create(t, apiserver.CreateRequest{Kind: "echo", Payload: json.RawMessage(`{"<script>":"x"}`)})
	e.waitFinal(t, j.ID)

	var ws apiserver.WorkersResponse
	e.doJSON(t, "GET", "/v1/workers", nil, http.StatusOK, &ws)
	if len(ws.Workers) != 1 || ws.Workers[0].ID != e.w.ID() || strings.Join(ws.Workers[0].Kinds, ",") != "echo,fail,sleep" {
		t.Errorf("workers: %+v", ws.Workers)
	}
	var st apiserver.StatsResponse
	e.doJSON(t, "GET", "/v1/stats", nil, http.StatusOK, &st)
	if st.Total != 1 || st.Counts[coordinator.StateCompleted] != 1 || len(st.Counts) != len(coordinator.States) {
		t.Errorf("stats: %+v", st)
	}
	for _, p := range []string{"/v1/health", "/healthz"} {
		var h map[string]string
		e.doJSON(t, "GET", p, nil, http.StatusOK, &h)
		if h["status"] != "ok" {
			t.Errorf("%s: %v", p, h)
		}
	}
	code, body := e.do(t, "GET", "/metrics", "")
	if code != 200 || !bytes.Contains(body, []byte(`leasehold_jobs{state="completed"} 1`)) || !bytes.Contains(body, []byte("leasehold_http_requests_total")) {
		t.Errorf("metrics: %d\n%.2000s", code, body)
	}
	code, body = e.do(t, "GET", "/", "")
	if code != 200 || !bytes.Contains(body, []byte(j.ID)) || !bytes.Contains(body, []byte(e.w.ID())) {
		t.Errorf("dashboard: %d\n%.2000s", code, body)
	}
	if bytes.Contains(body, []byte("<script>")) {
		t.Error("dashboard does not escape job data")
	}
}

func TestExecKinds(t *testing.T) {
	old := execKillGrace
	execKillGrace = 300 * time.Millisecond
	t.Cleanup(func() { execKillGrace = old })
	pidFile := filepath.Join(t.TempDir(), "pid")
	e := newAPIEnv(t, envOpts{execs: []string{
		`upper=tr a-z A-Z`,
		`env=printf '{"id":"%s","attempt":%s,"token":%s,"kind":"%s"}' "$LEASEHOLD_JOB_ID" "$LEASEHOLD_ATTEMPT" "$LEASEHOLD_TOKEN" "$LEASEHOLD_KIND"`,
		`text=echo plain text`,
		`broken=echo first >&2; echo oops >&2; exit 3`,
		`stubborn=trap "" TERM; sleep 30 & echo $! > ` + pidFile + `; wait`,
		`echo=cat`, // replaces the built-in
	}})
	up := e.create(t, apiserver.CreateRequest{Kind: "upper", Payload: json.RawMessage(`"hello"`)})
	if j := e.waitFinal(t, up.ID); j.State != coordinator.StateCompleted || string(j.Result) != `"HELLO"` {
		t.Errorf("upper: %s %s", j.State, j.Result)
	}
	env := e.create(t, apiserver.CreateRequest{Kind: "env"})
	j := e.waitFinal(t, env.ID)
	want := fmt.Sprintf(`{"id":"%s","attempt":1,"token":%d,"kind":"env"}`, env.ID, j.Token)
	if j.State != coordinator.StateCompleted || string(j.Result) != want || j.Token == 0 {
		t.Errorf("env: %s %s, want %s", j.State, j.Result, want)
	}
	txt := e.create(t, apiserver.CreateRequest{Kind: "text"})
	if j := e.waitFinal(t, txt.ID); string(j.Result) != `"plain text"` {
		t.Errorf("text result: %s", j.Result)
	}
	cat := e.create(t, apiserver.CreateRequest{Kind: "echo", Payload: json.RawMessage(`{"a":1}`)})
	if j := e.waitFinal(t, cat.ID); string(j.Result) != `{"a":1}` {
		t.Errorf("echo replaced by cat: %s", j.Result)
	}
	br := e.create(t, apiserver.CreateRequest{Kind: "broken", MaxAttempts: new(1)})
	j = e.waitFinal(t, br.ID)
	if j.State != coordinator.StateDiscarded || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "exited with status 3: first | oops") {
		t.Errorf("broken: %s %+v", j.State, j.Errors)
	}

	// A command that ignores SIGTERM is killed with its process group.
	st := e.create(t, apiserver.CreateRequest{Kind: "stubborn"})
	waitState(t, e, st.ID, coordinator.StateRunning)
	var pid int
	deadline := time.Now().Add(5 * time.Second)
	for pid == 0 && time.Now().Before(deadline) {
		b, _ := os.ReadFile(pidFile)
		_, _ = fmt.Sscan(string(b), &pid)
		time.Sleep(10 * time.Millisecond)
	}
	if pid == 0 {
		t.Fatal("stubborn command did not start")
	}
	start := time.Now()
	e.doJSON(t, "POST", "/v1/jobs/"+st.ID+"/cancel", nil, http.StatusOK, nil)
	j = e.waitFinal(t, st.ID)
	if j.State != coordinator.StateCancelled {
		t.Errorf("stubborn: %s", j.State)
	}
	if took := time.Since(start); took < execKillGrace || took > 5*time.Second {
		t.Errorf("stubborn command stopped after %s; want SIGKILL after %s", took, execKillGrace)
	}
	for !processGone(pid) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("grandchild %d survived the kill of its process group", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && strings.HasPrefix(rest, "Z")
}

func TestParseExec(t *testing.T) {
	for _, bad := range []string{"", "kind", "=cmd", "kind=", "a b=cmd"} {
		if _, err := parseExec(bad); err == nil || exitCode(err) != exitUsage {
			t.Errorf("parseExec(%q): %v, want a usage error", bad, err)
		}
	}
	s, err := parseExec("resize = ./resize.sh --w=100")
	if err != nil || s.kind != "resize" || s.command != "./resize.sh --w=100" {
		t.Errorf("parseExec: %+v %v", s, err)
	}
	if _, err := daemonKinds([]string{"a=x", "a=y"}, 0, 0, slog.Default()); err == nil {
		t.Error("duplicate --exec kind accepted")
	}
}

func TestSizeValue(t *testing.T) {
	for in, want := range map[string]int{"1048576": 1 << 20, "1MiB": 1 << 20, "512KiB": 512 << 10, "2MB": 2000000, "64k": 64 << 10, "10B": 10} {
		var s sizeValue
		if err := s.Set(in); err != nil || int(s) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, s, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "1.5MiB", "1TiB"} {
		var s sizeValue
		if err := s.Set(in); err == nil {
			t.Errorf("Set(%q) accepted", in)
		}
	}
	// A size over the bound is a size: the error says it is too large,
	// not that it is no size at all.
	var s sizeValue
	if err := s.Set("1024GiB"); err != nil || int64(s) != 1<<40 {
		t.Errorf("Set(1024GiB) = %d, %v", s, err)
	}
	for _, in := range []string{"1025GiB", "2000000MB", "99999999999999999999"} {
		var s sizeValue
		if err := s.Set(in); err == nil || !strings.Contains(err.Error(), "over 1024GiB, the largest size accepted") {
			t.Errorf("Set(%q): %v, want it refused as over 1024GiB", in, err)
		}
	}
}
