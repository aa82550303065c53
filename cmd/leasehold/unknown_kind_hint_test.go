package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/testutil"
)

// TestUnknownKindSaysWhatToDo: a job of a kind no daemon runs is refused
// in one line that says what to do, as the Go client on etcd already said
// ("register a handler for it or check its spelling"): through the API of
// an embedded daemon, of one that accepts the live daemons' kinds, through
// the CLI, and for a --periodic schedule at the daemon's start (before,
// each only listed the kinds that run).
func TestUnknownKindSaysWhatToDo(t *testing.T) {
	const hint = "register a handler for it or check its spelling"
	e := newAPIEnv(t, envOpts{})
	live := httptest.NewServer(apiserver.New(apiserver.Config{Coord: e.coord, LiveKinds: true, Logger: testutil.QuietLogger(t)}))
	defer live.Close()

	for _, c := range []struct{ name, url, want string }{
		{"embedded", e.srv.URL, "unknown kind resize: this daemon runs echo, fail, sleep: " + hint},
		{"live kinds", live.URL, "unknown kind resize: the live daemons run echo, fail, sleep: " + hint},
	} {
		resp, err := e.hc.Post(c.url+"/v1/jobs", "application/json", strings.NewReader(`{"kind":"resize"}`))
		if err != nil {
			t.Fatal(err)
		}
		var er apiserver.ErrorResponse
		err = json.NewDecoder(resp.Body).Decode(&er)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != 400 || er.Error != c.want {
			t.Errorf("%s: %d %q (%v), want 400 %q", c.name, resp.StatusCode, er.Error, err, c.want)
		}
	}
	if n := e.total(t); n != 0 {
		t.Errorf("%d jobs written, want none", n)
	}

	r := runCLI(t, nil, "", "enqueue", "resize", "--server", e.srv.URL)
	checkOneLineError(t, "enqueue of an unknown kind", r, exitUsage, "unknown kind resize: this daemon runs echo, fail, sleep: "+hint)

	r = runCLI(t, nil, "", "daemon", "--data", t.TempDir(), "--periodic", "x|@daily|resize")
	checkOneLineError(t, "periodic unknown kind", r, exitUsage,
		"--periodic x: unknown kind resize: this daemon runs echo, fail, sleep: add it with --exec resize=COMMAND or check its spelling")
}
