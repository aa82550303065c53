package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/apiserver"
)

// A body that is not UTF-8 is refused with 400 and writes nothing: decoded
// as it is, a unique key's bad bytes would turn into U+FFFD, so that two
// different keys became one and the second job was silently not enqueued,
// and a payload's would be stored raw and served as text that is not JSON.
func TestAPIRefusesBodyNotUTF8(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	for _, c := range []struct{ path, body string }{
		{"/v1/jobs", "{\"kind\":\"echo\",\"unique_key\":\"k\xff\"}"},
		{"/v1/jobs", "{\"kind\":\"echo\",\"unique_key\":\"k\xfe\"}"},
		{"/v1/jobs", "{\"kind\":\"echo\",\"payload\":{\"a\":\"\xff\"}}"},
		{"/v1/jobs", "{\"kind\":\"echo\",\"metadata\":{\"m\":\"\xc3\"}}"},
		{"/v1/jobs/batch", "{\"jobs\":[{\"kind\":\"echo\",\"payload\":\"\xff\"}]}"},
		{"/v1/jobs/cancel", "{\"queue\":\"default\",\"kind\":\"\xff\"}"},
	} {
		code, body := e.do(t, "POST", c.path, c.body)
		if code != http.StatusBadRequest || !strings.Contains(string(body), "not valid UTF-8") {
			t.Errorf("POST %s %q: %d %s, want 400 saying the body is not UTF-8", c.path, c.body, code, body)
		}
	}
	if n := e.total(t); n != 0 {
		t.Errorf("%d jobs written by requests that were not UTF-8", n)
	}
	// Half of a surrogate pair escaped alone is refused too: decoded, it
	// is U+FFFD, so that "\ud800" and "\udbff" were one unique key.
	for _, c := range []struct{ path, body string }{
		{"/v1/jobs", `{"kind":"echo","unique_key":"k\ud800"}`},
		{"/v1/jobs", `{"kind":"echo","unique_key":"k\udfff"}`},
		{"/v1/jobs", `{"kind":"echo","payload":{"a":"\ud800x"}}`},
		{"/v1/jobs", `{"kind":"echo","metadata":{"\udc00":1}}`},
		{"/v1/jobs/batch", `{"jobs":[{"kind":"echo","payload":"\ud83d"}]}`},
	} {
		code, body := e.do(t, "POST", c.path, c.body)
		if code != http.StatusBadRequest || !strings.Contains(string(body), "surrogate pair escaped alone") {
			t.Errorf("POST %s %s: %d %s, want 400 saying a surrogate is alone", c.path, c.body, code, body)
		}
	}
	if n := e.total(t); n != 0 {
		t.Errorf("%d jobs written by refused requests", n)
	}
	// UTF-8 beyond ASCII is fine, and so is a pair escaped.
	e.create(t, apiserver.CreateRequest{Kind: "echo", UniqueKey: "clé", Payload: []byte(`{"a":"ü"}`)})
	e.create(t, apiserver.CreateRequest{Kind: "echo", Payload: []byte(`{"a":"\ud83d\ude00"}`)})
}

// The CLI refuses a unique key, payload or metadata that is not UTF-8
// (exit 2, nothing written), rather than send a key mangled into U+FFFD
// that may match another job's and enqueue nothing; and a payload or
// metadata with half of a surrogate pair escaped alone.
func TestCLIEnqueueRefusesTextNotUTF8(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "echo", "{}", "--unique-key", "k\xff"}, "--unique-key is not valid UTF-8"},
		{[]string{"enqueue", "echo", "{}", "--unique-key", "k\xfe"}, "--unique-key is not valid UTF-8"},
		{[]string{"enqueue", "echo", "{\"a\":\"\xff\"}"}, "payload is not valid UTF-8 (at byte 6)"},
		{[]string{"enqueue", "echo", "{}", "--metadata", "{\"m\":\"\xff\"}"}, "--metadata is not valid UTF-8"},
		{[]string{"enqueue", "echo", `{"a":"\ud800"}`}, "payload has half of a UTF-16 surrogate pair escaped alone (at byte 6)"},
		{[]string{"enqueue", "echo", "{}", "--metadata", `{"m":"\udfff"}`}, "--metadata has half of a UTF-16 surrogate pair escaped alone"},
	} {
		r := runCLI(t, nil, "", append(c.args, "--server", e.srv.URL)...)
		checkOneLineError(t, strings.Join(c.args, " "), r, exitUsage, c.want)
	}
	if n := e.total(t); n != 0 {
		t.Errorf("%d jobs written by enqueues that were not UTF-8", n)
	}
}

// enqueue --count N --json that fails before any job is enqueued prints
// nothing on stdout, as with one job, not "null", which a script reading
// the job objects cannot take for a list.
func TestCLIEnqueueCountJSONFailurePrintsNoNull(t *testing.T) {
	for _, count := range []string{"1", "2"} {
		r := runCLI(t, nil, "", "enqueue", "echo", "--count", count, "--json", "--server", "http://"+closedPort(t))
		checkOneLineError(t, "enqueue --count "+count+" --json to a closed port", r, exitFailure, "cannot reach the daemon")
	}
}
