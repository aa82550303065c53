package main

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/apiserver"
)

// An http:// --server for a daemon that serves HTTPS (--tls-cert): Go's
// server answers the plain request with a 400 of its own, which is told
// apart from a server that is no leasehold daemon: use https://.
func TestCLIHTTPToTLSDaemon(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		apiserver.WriteJSON(w, http.StatusOK, map[string]any{"jobs": []any{}})
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	plain := strings.Replace(srv.URL, "https://", "http://", 1)
	code, out, errs := runInProcess("jobs", "list", "--server", plain)
	r := cliResult{stdout: out, stderr: errs, code: code}
	checkOneLineError(t, "http to a TLS daemon", r, exitFailure, "the daemon at "+plain+" serves HTTPS: use --server "+srv.URL+" (and --server-ca")
	if strings.Contains(errs, "is --server a leasehold daemon") {
		t.Errorf("stderr %q doubts that it is a daemon", errs)
	}
}
