package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// FuzzCreateRequest sends arbitrary bodies to POST /v1/jobs and
// /v1/jobs/batch. The API must never panic or answer 5xx; a refusal is a
// 4xx JSON error on one line and writes nothing; an acceptance returns a job
// that is stored.
func FuzzCreateRequest(f *testing.F) {
	for _, seed := range []string{
		`{"kind":"echo"}`,
		`{"kind":"sleep","payload":{"ms":10},"queue":"q1","priority":3,"delay":"1h","max_attempts":2,"timeout":"1s","unique_key":"k"}`,
		`{"kind":"fail","payload":{"times":2},"scheduled_at":"2030-01-02T15:04:05Z"}`,
		`{"kind":"echo","payload":[1,2,{"a":null}]}`,
		`{"kind":"echo","payload":null}`,
		`{"kind":"sleep","payload":{"ms":-1}}`,
		`{"kind":"sleep","payload":{"ms":1e400}}`,
		`{"kind":"nope"}`,
		`{"kind":""}`,
		`{"kind":"echo","delay":"1s","scheduled_at":"x"}`,
		`{"kind":"echo","priority":-9223372036854775808}`,
		`{"kind":"echo","max_attempts":1e20}`,
		`{"kind":"echo","timeout":"9999999999h"}`,
		`{"kind":"echo","delay":"2562047h"}`,
		`{"kind":"echo","scheduled_at":"9999-12-31T23:59:59Z"}`,
		`{"kind":"echo","queue":"` + strings.Repeat("q", 200) + `"}`,
		`{"kind":"echo","unique_key":"\u0000"}`,
		`{"jobs":[{"kind":"echo"}]}`,
		`{"kind":"echo"}garbage`,
		`{"kind":"echo",}`,
		`[]`, `null`, `""`, `{`, ``, "\xff\xfe",
	} {
		f.Add(seed, false)
		f.Add(`{"jobs":[`+seed+`]}`, true)
	}
	e := newAPIEnv(f, envOpts{noWorker: true})
	handler := e.srv.Config.Handler
	f.Fuzz(func(t *testing.T, body string, batch bool) {
		path := "/v1/jobs"
		if batch {
			path = "/v1/jobs/batch"
		}
		before := e.total(t)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		code := rec.Code
		if code >= 500 || code < 200 || (code >= 300 && code < 400) {
			t.Fatalf("status %d for %q: %s", code, body, rec.Body)
		}
		if code >= 400 {
			if code != http.StatusBadRequest && code != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d for %q", code, body)
			}
			var er apiserver.ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil || er.Error == "" || strings.ContainsAny(er.Error, "\r\n") {
				t.Fatalf("bad error body %q for %q", rec.Body, body)
			}
			if after := e.total(t); after != before {
				t.Fatalf("refused request %q wrote %d jobs", body, after-before)
			}
			return
		}
		var ids []string
		if batch {
			var res apiserver.BatchResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || len(res.Jobs) == 0 || len(res.Jobs) != len(res.Existed) {
				t.Fatalf("bad batch answer %q: %v", rec.Body, err)
			}
			for _, j := range res.Jobs {
				ids = append(ids, j.ID)
			}
		} else {
			var res apiserver.CreateResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || res.Job == nil {
				t.Fatalf("bad answer %q: %v", rec.Body, err)
			}
			ids = append(ids, res.Job.ID)
		}
		for _, id := range ids {
			j, err := e.coord.Get(context.Background(), id)
			if err != nil {
				t.Fatalf("accepted job %s not stored: %v", id, err)
			}
			if _, ok := builtinKinds()[j.Kind]; !ok || !json.Valid(j.Payload) {
				t.Fatalf("stored job has kind %q payload %q", j.Kind, j.Payload)
			}
			if j.State != coordinator.StateAvailable && j.State != coordinator.StateScheduled {
				t.Fatalf("new job in state %s", j.State)
			}
		}
	})
}
