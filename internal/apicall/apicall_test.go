package apicall

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"
)

func TestDoSendsTheRequestAndReadsTheAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got := map[string]string{
			"method": r.Method, "path": r.URL.Path, "query": r.URL.RawQuery, "body": string(b),
			"auth": r.Header.Get("Authorization"), "ctype": r.Header.Get("Content-Type"), "accept": r.Header.Get("Accept"),
		}
		w.WriteHeader(http.StatusTeapot)
		_ = json.NewEncoder(w).Encode(got)
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL + "/api")
	resp, data, err := Do(context.Background(), srv.Client(), Request{
		Method: http.MethodPost, Base: base, Path: "/v1/jobs", Query: url.Values{"wait": {"1s"}},
		Body: map[string]int{"n": 1}, Token: "s3cret",
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTeapot {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var got map[string]string
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"method": "POST", "path": "/api/v1/jobs", "query": "wait=1s", "body": `{"n":1}`,
		"auth": "Bearer s3cret", "ctype": "application/json", "accept": "application/json",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if base.Path != "/api" {
		t.Errorf("Do changed the base URL: %s", base)
	}

	// No body, no token: neither header is sent.
	_, data, err = Do(context.Background(), srv.Client(), Request{Method: http.MethodGet, Base: base, Path: "/v1/stats"})
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	_ = json.Unmarshal(data, &got)
	if got["auth"] != "" || got["ctype"] != "" || got["body"] != "" {
		t.Errorf("GET without body or token sent %v", got)
	}
}

func TestDoRefusesWhatCannotBeBuilt(t *testing.T) {
	sent := false
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { sent = true }))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	for name, r := range map[string]Request{
		"a body that does not encode": {Method: http.MethodPost, Base: base, Body: json.RawMessage(`{bad`)},
		"a bad method":                {Method: "BAD METHOD", Base: base},
	} {
		_, _, err := Do(context.Background(), srv.Client(), r)
		var be *BuildError
		if !errors.As(err, &be) || be.Err == nil {
			t.Errorf("%s: error %v, want a *BuildError", name, err)
		}
	}
	if sent {
		t.Error("a request that could not be built reached the server")
	}
}

func TestErrorMessage(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":"job not found: check the id"}`: "job not found: check the id",
		`{"error":""}`: "",
		`not json`:     "",
		`{"job":{}}`:   "",
	} {
		msg, ok := ErrorMessage([]byte(body))
		if msg != want || ok != (want != "") {
			t.Errorf("ErrorMessage(%s) = %q, %v; want %q", body, msg, ok, want)
		}
	}
}

// An answer over the limit is an error that says so, not a body cut short
// that fails to decode.
func TestDoRefusesAnAnswerTooLarge(t *testing.T) {
	old := maxAnswer
	maxAnswer = 1 << 20
	defer func() { maxAnswer = old }()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, 1<<20+1))
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	if _, _, err := Do(context.Background(), srv.Client(), Request{Method: http.MethodGet, Base: base, Path: "/v1/jobs"}); !errors.Is(err, ErrAnswerTooLarge) {
		t.Fatalf("answer of 1 MiB + 1 byte with a 1 MiB limit: %v, want ErrAnswerTooLarge", err)
	}
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, 1<<20))
	}))
	defer srv2.Close()
	base2, _ := url.Parse(srv2.URL)
	if _, data, err := Do(context.Background(), srv2.Client(), Request{Method: http.MethodGet, Base: base2, Path: "/v1/jobs"}); err != nil || len(data) != 1<<20 {
		t.Fatalf("answer of exactly the limit: %d bytes, %v", len(data), err)
	}
}

// Retry-After in seconds or as a date; none, or one that does not parse,
// is false. The mark is "true" only.
func TestRetryAfterAndNotProcessed(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"1": time.Second, "0": 0, " 5 ": 5 * time.Second,
		now.Add(3 * time.Second).Format(http.TimeFormat): 3 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):      0,
		"": -1, "-1": -1, "soon": -1,
	} {
		resp := &http.Response{Header: http.Header{}}
		if v != "" {
			resp.Header.Set("Retry-After", v)
		}
		d, ok := RetryAfter(resp, now)
		if ok != (want >= 0) || ok && d != want {
			t.Errorf("Retry-After %q: %v, %v; want %v", v, d, ok, want)
		}
	}
	for v, want := range map[string]bool{"true": true, "": false, "false": false, "1": false} {
		resp := &http.Response{Header: http.Header{}}
		if v != "" {
			resp.Header.Set(NotProcessedHeader, v)
		}
		if got := NotProcessed(resp); got != want {
			t.Errorf("%s: %q: %v, want %v", NotProcessedHeader, v, got, want)
		}
	}
}

// RefusesParams reads the API's refusal of an unknown query parameter.
func TestRefusesParams(t *testing.T) {
	msg := `unknown query parameter "after": this endpoint takes none`
	if !RefusesParams(msg, "limit", "after") || RefusesParams(msg, "limit") || RefusesParams("bad limit", "limit") {
		t.Errorf("RefusesParams misreads %q", msg)
	}
}

// A change answered 301, 302 or 303 is not followed (net/http would send
// it on as a GET, without its body): the redirect is the answer. A 307 is
// followed with the method kept, and a GET follows any redirect.
func TestDoDoesNotFollowAChangeAsAGet(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			code, _ := strconv.Atoi(r.URL.Query().Get("code"))
			http.Redirect(w, r, "/new", code)
			return
		}
		got = append(got, r.Method)
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	for _, tc := range []struct {
		method string
		code   int
		want   int // status answered
	}{
		{http.MethodDelete, 301, 301}, {http.MethodPost, 302, 302}, {http.MethodPost, 303, 303},
		{http.MethodDelete, 307, 200}, {http.MethodGet, 301, 200},
	} {
		got = nil
		resp, _, err := Do(context.Background(), srv.Client(), Request{Method: tc.method, Base: base, Path: "/old", Query: url.Values{"code": {strconv.Itoa(tc.code)}}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != tc.want || (tc.want == 200) != (len(got) == 1 && got[0] == tc.method) {
			t.Errorf("%s redirected %d: answered %d, the target got %v; want %d", tc.method, tc.code, resp.StatusCode, got, tc.want)
		}
	}
}
