package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// A path under the API with an empty (or . or ..) segment is answered
// with a JSON error, not with the mux's redirect to the cleaned path: a
// client that follows it would turn POST /v1/jobs//cancel (an empty id)
// into the bulk cancel of POST /v1/jobs/cancel. Dashboard pages keep the
// redirect, which a browser follows.
func TestAPIEmptyPathSegmentIsAnError(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	j := e.create(t, apiserver.CreateRequest{Kind: "echo"})
	h := e.srv.Config.Handler
	for _, c := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"POST", "/v1/jobs//cancel", `{"all":true}`, http.StatusBadRequest, "empty job id"},
		{"POST", "/v1/jobs//retry", "", http.StatusBadRequest, "empty job id"},
		{"DELETE", "/v1/jobs//", "", http.StatusBadRequest, "empty job id"},
		{"GET", "/v1/jobs//", "", http.StatusBadRequest, "empty job id"},
		{"GET", "/v1//jobs", "", http.StatusNotFound, "empty, . or .. segment"},
		{"GET", "/v1/jobs/./" + j.ID, "", http.StatusNotFound, "empty, . or .. segment"},
		{"GET", "//v1/stats", "", http.StatusNotFound, "empty, . or .. segment"},
		{"POST", "/v1//jobs", `{"kind":"echo"}`, http.StatusNotFound, "empty, . or .. segment"},
		{"GET", "//readyz", "", http.StatusNotFound, "empty, . or .. segment"},
	} {
		name := c.method + " " + c.path
		req := httptest.NewRequest(c.method, "http://127.0.0.1"+c.path, strings.NewReader(c.body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var er apiserver.ErrorResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &er); rec.Code != c.status || err != nil || !strings.Contains(er.Error, c.want) {
			t.Errorf("%s: %d %q, want %d with a JSON error saying %q", name, rec.Code, rec.Body.String(), c.status, c.want)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q, want application/json", name, ct)
		}
		if loc := rec.Header().Get("Location"); loc != "" {
			t.Errorf("%s: redirected to %s", name, loc)
		}
	}
	if got, err := e.coord.Get(t.Context(), j.ID); err != nil || got.State != coordinator.StateAvailable {
		t.Errorf("job after the refused requests: %v, %v; want it available", got, err)
	}

	req := httptest.NewRequest("GET", "http://127.0.0.1//jobs", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusTemporaryRedirect || rec.Header().Get("Location") != "/jobs" {
		t.Errorf("GET //jobs (a dashboard page): %d Location %q, want the redirect to /jobs", rec.Code, rec.Header().Get("Location"))
	}
}
