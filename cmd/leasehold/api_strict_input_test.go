package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/apiserver"
)

// Field names of request bodies match exactly (encoding/json alone takes
// "KIND" for "kind"), and a field or a query parameter given twice is
// refused rather than read once (encoding/json keeps the last field; a
// proxy or a log may read the first): either way nothing is written.
func TestAPIFieldNamesExactAndParametersOnce(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	for _, c := range []struct {
		method, path, body string
		want               string
	}{
		{"POST", "/v1/jobs", `{"KIND":"echo"}`, `unknown field "KIND" (names are case-sensitive: kind): the fields are kind,`},
		{"POST", "/v1/jobs", `{"kind":"echo","Max_Attempts":3}`, `unknown field "Max_Attempts"`},
		{"POST", "/v1/jobs", `{"kind":"echo","unique":{"By_Args":true}}`, `unknown field "unique.By_Args"`},
		{"POST", "/v1/jobs/batch", `{"jobs":[{"kind":"echo"},{"kind":"echo","Queue":"x"}]}`, `unknown field "jobs[1].Queue"`},
		{"POST", "/v1/jobs/batch", `{"JOBS":[{"kind":"echo"}]}`, `unknown field "JOBS"`},
		{"POST", "/v1/jobs/cancel", `{"All":true}`, `unknown field "All"`},
		{"PUT", "/v1/queues/default/limit?force=true", `{"Limit":3}`, `unknown field "Limit"`},
		{"POST", "/v1/jobs", `{"kind":"nope","kind":"echo"}`, `field "kind" is given twice: give each field once`},
		{"POST", "/v1/jobs", `{"kind":"echo","unique":{"by_args":false,"by_args":true}}`, `field "unique.by_args" is given twice`},
		{"POST", "/v1/jobs/batch", `{"jobs":[{"kind":"echo"},{"kind":"echo","queue":"a","queue":"b"}]}`, `field "jobs[1].queue" is given twice`},
		{"POST", "/v1/jobs/batch", `{"jobs":[],"jobs":[{"kind":"echo"}]}`, `field "jobs" is given twice`},
		{"GET", "/v1/jobs?state=running&state=bogus", "", `query parameter "state" is given 2 times`},
		{"GET", "/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV?wait=1s&wait=2s", "", `query parameter "wait" is given 2 times`},
		{"POST", "/v1/queues/default/pause?force=false&force=true", "", `query parameter "force" is given 2 times`},
		{"POST", "/v1/jobs?x=1;y=2", `{"kind":"echo"}`, "bad query string"},
	} {
		code, body := e.do(t, c.method, c.path, c.body)
		var er apiserver.ErrorResponse
		_ = json.Unmarshal(body, &er)
		msg := er.Error
		if code != http.StatusBadRequest || !strings.Contains(msg, c.want) {
			t.Errorf("%s %s %s: %d %s, want 400 saying %q", c.method, c.path, c.body, code, strings.TrimSpace(string(body)), c.want)
		}
	}
	if n := e.total(t); n != 0 {
		t.Errorf("%d jobs written by refused requests", n)
	}
	// Exact names still go through, nested ones and payloads of any shape
	// included (a payload's keys are its handler's business, repeated
	// ones too).
	code, body := e.do(t, "POST", "/v1/jobs/batch", `{"jobs":[{"kind":"echo","payload":{"Any":[{"Case":1}],"a":1,"a":2},"max_attempts":3,"unique":{"by_args":true},"metadata":{"X":1}}]}`)
	if code != http.StatusCreated {
		t.Errorf("batch with exact names: %d %s", code, body)
	}
}
