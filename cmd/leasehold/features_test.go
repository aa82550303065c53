package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	lhclient "github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/client/clienttest"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// TestClientLibraryOverHTTP runs the client suite on the daemon's API.
func TestClientLibraryOverHTTP(t *testing.T) {
	e := newAPIEnv(t, envOpts{})
	clienttest.Run(t, func(t *testing.T, o *lhclient.Options) *lhclient.Client {
		c, err := lhclient.NewHTTP(e.srv.URL, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	})
}

func TestAPIOperations(t *testing.T) {
	e := newAPIEnv(t, envOpts{})
	// Retry of a running job: 409 with the reason.
	j := e.create(t, apiserver.CreateRequest{Kind: "sleep", Payload: json.RawMessage(`{"ms":3000}`)})
	waitState(t, e, j.ID, coordinator.StateRunning)
	code, body := e.do(t, "POST", "/v1/jobs/"+j.ID+"/retry", "")
	if code != http.StatusConflict || !strings.Contains(string(body), "is running") || strings.Contains(string(body), "wrong state") {
		t.Errorf("retry running: %d %s", code, body)
	}
	code, body = e.do(t, "DELETE", "/v1/jobs/"+j.ID, "")
	if code != http.StatusConflict || !strings.Contains(string(body), "cancel it first") {
		t.Errorf("delete running: %d %s", code, body)
	}
	// Bulk cancel needs a filter.
	code, body = e.do(t, "POST", "/v1/jobs/cancel", `{}`)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "no filter") {
		t.Errorf("bulk cancel without a filter: %d %s", code, body)
	}
	var res coordinator.CancelManyResult
	e.doJSON(t, "POST", "/v1/jobs/cancel", `{"kind":"sleep"}`, http.StatusOK, &res)
	if res.CancelRequested != 1 {
		t.Errorf("bulk cancel: %+v", res)
	}
	if j := e.waitFinal(t, j.ID); j.State != coordinator.StateCancelled {
		t.Errorf("cancelled running job is %s", j.State)
	}
	var jr apiserver.JobResponse
	e.doJSON(t, "POST", "/v1/jobs/"+j.ID+"/retry", nil, http.StatusOK, &jr)
	if jr.Job.State != coordinator.StateAvailable {
		t.Errorf("retry cancelled: %+v", jr.Job)
	}
	// Unique options and metadata on create.
	var cr apiserver.CreateResponse
	e.doJSON(t, "POST", "/v1/jobs", `{"kind":"echo","payload":{"a":1},"delay":"1h","unique":{"by_args":true,"by_period":"1h"},"metadata":{"trace":"t1"}}`, http.StatusCreated, &cr)
	if string(cr.Job.Metadata) != `{"trace":"t1"}` || !strings.Contains(cr.Job.UniqueKey, "args=") {
		t.Errorf("create with unique options: %+v", cr.Job)
	}
	e.doJSON(t, "POST", "/v1/jobs", `{"kind":"echo","payload":{ "a" : 1 },"delay":"1h","unique":{"by_args":true,"by_period":"1h"}}`, http.StatusOK, &cr)
	if !cr.Existed {
		t.Error("same args: not reported as existing")
	}
	for body, want := range map[string]string{
		`{"kind":"echo","unique":{"by_period":"soon"}}`:    "unique.by_period",
		`{"kind":"echo","unique":{"by_state":["done"]}}`:   "unique.by_state",
		`{"kind":"echo","unique":{"by_args":"yes"}}`:       "by_args",
		`{"kind":"echo","metadata":"not an object"}`:       "", // any JSON is metadata
		`{"kind":"echo","unique":{"by_queue":true},"x":1}`: "unknown field",
	} {
		code, b := e.do(t, "POST", "/v1/jobs", body)
		if want == "" {
			if code != http.StatusCreated {
				t.Errorf("%s: %d %s", body, code, b)
			}
			continue
		}
		if code != http.StatusBadRequest || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %s, want 400 with %q", body, code, b, want)
		}
	}
	// Queues.
	code, body = e.do(t, "POST", "/v1/queues/nosuch/pause", "")
	if code != http.StatusBadRequest || !strings.Contains(string(body), "unknown queue nosuch") || !strings.Contains(string(body), "known queues: default") {
		t.Errorf("pause unknown queue: %d %s", code, body)
	}
	var qr apiserver.QueueResponse
	e.doJSON(t, "POST", "/v1/queues/nosuch/pause?force=true", nil, http.StatusOK, &qr)
	if !qr.Changed || !qr.Queue.Paused {
		t.Errorf("forced pause: %+v", qr)
	}
	e.doJSON(t, "PUT", "/v1/queues/default/limit", `{"limit":2}`, http.StatusOK, &qr)
	if qr.Queue.Limit != 2 {
		t.Errorf("limit: %+v", qr)
	}
	code, body = e.do(t, "PUT", "/v1/queues/default/limit", `{}`)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "limit is missing") {
		t.Errorf("limit without a value: %d %s", code, body)
	}
	var qs apiserver.QueuesResponse
	e.doJSON(t, "GET", "/v1/queues", nil, http.StatusOK, &qs)
	if len(qs.Queues) != 2 || qs.Queues[0].Name != "default" || qs.Queues[0].Limit != 2 || len(qs.Queues[0].Workers) != 1 || !qs.Queues[1].Paused {
		t.Errorf("queues: %+v", qs.Queues)
	}
	var pr apiserver.PeriodicResponse
	e.doJSON(t, "GET", "/v1/periodic", nil, http.StatusOK, &pr)
	if pr.Periodic == nil || len(pr.Periodic) != 0 {
		t.Errorf("periodic: %+v", pr)
	}
}

func TestParsePeriodicFlag(t *testing.T) {
	pj, err := parsePeriodic(`nightly|CRON_TZ=Europe/Paris 0 3 * * *|report|{"a":"x|y"}`)
	if err != nil || pj.Name != "nightly" || pj.Spec != "CRON_TZ=Europe/Paris 0 3 * * *" || pj.Job.Kind != "report" || string(pj.Job.Payload) != `{"a":"x|y"}` {
		t.Fatalf("pipe form: %+v, %v", pj, err)
	}
	pj, err = parsePeriodic(`{"name":"n","spec":"@every 1m","kind":"k","queue":"q","priority":3,"max_attempts":2,"timeout":"5s","catch_up":"10m"}`)
	if err != nil || pj.Job.Queue != "q" || pj.Job.Priority != 3 || pj.Job.MaxAttempts != 2 || pj.Job.Timeout != 5*time.Second || pj.CatchUp != 10*time.Minute {
		t.Fatalf("JSON form: %+v, %v", pj, err)
	}
	for _, bad := range []string{"", "a|b", "a|@daily|bad kind", "a|nope|k", `a|@daily|k|{`, `{"name":"a"`, `{"name":"a","spec":"@daily","kind":"k","catch_up":"-1s"}`} {
		if _, err := parsePeriodic(bad); err == nil || exitCode(err) != exitUsage {
			t.Errorf("parsePeriodic(%q): %v, want a usage error", bad, err)
		}
	}
}

// TestCLIFeaturesAsNewUser runs the issue-6 commands as a new user would,
// against a real daemon process, including a restart with a paused queue.
func TestCLIFeaturesAsNewUser(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, "--periodic", `tick|@every 1s|echo|{"n":1}`, "--queues", "default,mail", "--queue-concurrency", "mail=1")
	srv := d.server

	// Periodic: the schedule shows up with its last and next run.
	deadline := time.Now().Add(15 * time.Second)
	var ps []coordinator.PeriodicState
	for time.Now().Before(deadline) {
		if err := json.Unmarshal([]byte(okCLI(t, "periodic", "list", "--json", "--server", srv)), &ps); err != nil {
			t.Fatal(err)
		}
		if len(ps) == 1 && ps[0].Enqueued >= 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(ps) != 1 || ps[0].Name != "tick" || ps[0].Spec != "@every 1s" || ps[0].LastTick == nil || ps[0].NextAt.IsZero() {
		t.Fatalf("periodic list --json: %+v", ps)
	}
	if out := okCLI(t, "periodic", "list", "--server", srv); !strings.Contains(out, "NEXT RUN") || !strings.Contains(out, "tick") {
		t.Errorf("periodic list:\n%s", out)
	}

	// Pause, enqueue, restart: the job stays available; resume runs it.
	if out := okCLI(t, "queues", "pause", "mail", "--server", srv); !strings.Contains(out, "queue mail paused") {
		t.Errorf("queues pause: %q", out)
	}
	id := strings.TrimSpace(okCLI(t, "enqueue", "echo", `{"m":1}`, "--queue", "mail", "--server", srv))
	if out := okCLI(t, "queues", "list", "--server", srv); !strings.Contains(out, "paused since") {
		t.Errorf("queues list:\n%s", out)
	}
	time.Sleep(300 * time.Millisecond)
	if j := getJobCLI(t, srv, id); j.State != coordinator.StateAvailable {
		t.Fatalf("job of a paused queue is %s", j.State)
	}
	if code := d.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("daemon exit %d", code)
	}
	d = startDaemon(t, dir, "--queues", "default,mail")
	srv = d.server
	time.Sleep(500 * time.Millisecond)
	if j := getJobCLI(t, srv, id); j.State != coordinator.StateAvailable {
		t.Fatalf("after a restart, the paused queue's job is %s", j.State)
	}
	if out := okCLI(t, "queues", "resume", "mail", "--server", srv); out != "queue mail resumed\n" {
		t.Errorf("queues resume: %q", out)
	}
	if out := okCLI(t, "jobs", "wait", id, "--timeout", "20s", "--server", srv); out != id+" completed\n" {
		t.Errorf("job after resume: %q", out)
	}
	if out := okCLI(t, "queues", "limit", "mail", "2", "--server", srv); !strings.Contains(out, "at most 2 jobs at once") {
		t.Errorf("queues limit: %q", out)
	}

	// Retry, delete, bulk cancel, and their refusals.
	running := strings.TrimSpace(okCLI(t, "enqueue", "sleep", `{"ms":60000}`, "--server", srv))
	waitStateCLI(t, srv, running, coordinator.StateRunning)
	r := runCLI(t, nil, "", "jobs", "retry", running, "--server", srv)
	checkOneLineError(t, "retry running", r, exitFailure, "is running")
	r = runCLI(t, nil, "", "jobs", "delete", running, "--server", srv)
	checkOneLineError(t, "delete running", r, exitFailure, "cancel it first")
	if out := okCLI(t, "jobs", "cancel", "--kind", "sleep", "--server", srv); !strings.Contains(out, "cancel requested for 1 running") {
		t.Errorf("bulk cancel: %q", out)
	}
	okCLI(t, "jobs", "wait", running, "--timeout", "20s", "--server", srv)
	if out := okCLI(t, "jobs", "retry", running, "--server", srv); !strings.HasPrefix(out, running+" available") {
		t.Errorf("retry cancelled: %q", out)
	}
	okCLI(t, "jobs", "cancel", running, "--server", srv)
	okCLI(t, "jobs", "wait", running, "--timeout", "20s", "--server", srv)
	if out := okCLI(t, "jobs", "delete", running, "--server", srv); out != running+" deleted (it was cancelled)\n" {
		t.Errorf("delete: %q", out)
	}
	r = runCLI(t, nil, "", "jobs", "get", running, "--server", srv)
	checkOneLineError(t, "get deleted", r, exitFailure, "not found")

	// Unique by args.
	first := strings.TrimSpace(okCLI(t, "enqueue", "echo", `{"a":1,"b":2}`, "--unique-by-args", "--delay", "1h", "--server", srv))
	r = runCLI(t, nil, "", "enqueue", "echo", `{"b":2,"a":1}`, "--unique-by-args", "--delay", "1h", "--server", srv)
	if r.code != 0 || strings.TrimSpace(r.stdout) != first || !strings.Contains(r.stderr, "already exists") {
		t.Errorf("unique by args: %+v", r)
	}

	// Bad input: one line, the right exit code, nothing changed.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"queues", "pause", "mial"}, exitUsage, "unknown queue mial"},
		{[]string{"queues", "resume", "nosuch"}, exitUsage, "unknown queue nosuch"},
		{[]string{"queues", "limit", "mail", "lots"}, exitUsage, `limit "lots"`},
		{[]string{"queues", "pause", "bad/name"}, exitUsage, "queue"},
		{[]string{"jobs", "cancel"}, exitUsage, "nothing to cancel"},
		{[]string{"jobs", "cancel", "--state", "completed"}, exitUsage, "finished jobs cannot be cancelled"},
		{[]string{"jobs", "retry", "nope"}, exitUsage, "bad job id"},
		{[]string{"jobs", "delete"}, exitUsage, "missing arguments"},
		{[]string{"enqueue", "echo", "--unique-states", "done"}, exitUsage, `--unique-states "done": want completed, discarded or cancelled`},
	} {
		r := runCLI(t, nil, "", append(c.args, "--server", srv)...)
		checkOneLineError(t, strings.Join(c.args, " "), r, c.code, c.want)
	}
	r = runCLI(t, nil, "", "queues", "frob")
	checkOneLineError(t, "queues frob", r, exitUsage, `unknown command "frob"`)
	r = runCLI(t, nil, "", "periodic", "show")
	checkOneLineError(t, "periodic show", r, exitUsage, `unknown command "show"`)
	r = runCLI(t, nil, "", "daemon", "--data", t.TempDir(), "--periodic", "x|61 * * * *|echo")
	checkOneLineError(t, "malformed cron", r, exitUsage, `cron spec "61 * * * *"`)
	r = runCLI(t, nil, "", "daemon", "--data", t.TempDir(), "--periodic", "x|@daily|resize")
	checkOneLineError(t, "periodic unknown kind", r, exitUsage, "unknown kind resize")
	r = runCLI(t, nil, "", "daemon", "--data", t.TempDir(), "--queue-concurrency", "mail=2")
	checkOneLineError(t, "queue concurrency for a queue not served", r, exitUsage, "does not serve queue mail")
}
