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
	// UTF-8 beyond ASCII is fine.
	e.create(t, apiserver.CreateRequest{Kind: "echo", UniqueKey: "clé", Payload: []byte(`{"a":"ü"}`)})
}

// The CLI refuses a unique key, payload or metadata that is not UTF-8
// (exit 2, nothing written), rather than send a key mangled into U+FFFD
// that may match another job's and enqueue nothing.
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
