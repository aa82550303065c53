package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// TestDaemonTokenFileFromPipe starts the daemon with --api-token-file
// naming a pipe (here its stdin, as with a shell's <(...)): the token can
// be read only once, and the daemon must start with it.
func TestDaemonTokenFileFromPipe(t *testing.T) {
	dir := t.TempDir()
	const token = "pipe-token-0123456789"
	d := startDaemonStdin(t, filepath.Join(dir, "data"), strings.NewReader(token+"\n"), "--api-token-file", "/dev/stdin")
	r := runCLI(t, nil, "", "enqueue", "echo", "--server", d.server)
	checkOneLineError(t, "enqueue without the token", r, 1, "API token")
	okCLI(t, "enqueue", "echo", "--server", d.server, "--api-token", token)
}

// TestConfigFileEtcdSettingsForClients checks that the client commands
// read every etcd-* setting of a config file, as the daemon does: the
// README promises it, and an etcd-max-request-bytes the CLI ignored would
// make it refuse jobs the daemons take.
func TestConfigFileEtcdSettingsForClients(t *testing.T) {
	p := writeFile(t, t.TempDir(), "config.yaml", "etcd: http://127.0.0.1:2379\netcd-max-request-bytes: 4MiB\netcd-user: u\netcd-password: p\n")
	for _, args := range [][]string{{"enqueue", "echo"}, {"jobs", "list"}, {"workers", "list"}} {
		root := newRootCmd(strings.NewReader(""), io.Discard, io.Discard)
		cmd, rest, err := root.Find(args)
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags(append(rest, "--config", p)); err != nil {
			t.Fatal(err)
		}
		if err := applyConfig(cmd); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		for _, k := range []string{"etcd", "etcd-max-request-bytes", "etcd-user", "etcd-password"} {
			if f := cmd.Flags().Lookup(k); f == nil || !f.Changed {
				t.Errorf("%v: setting %s of the config file not applied", args, k)
			}
		}
	}
}

// TestCLIUntrustedServerCertificate checks the advice for a daemon whose
// TLS certificate the CLI does not trust: pass --server-ca, not "check
// that it is running".
func TestCLIUntrustedServerCertificate(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, workersResponse{})
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	defer srv.Close()
	code, out, errs := runInProcess("workers", "list", "--server", srv.URL)
	r := cliResult{stdout: out, stderr: errs, code: code}
	checkOneLineError(t, "untrusted certificate", r, exitFailure, "--server-ca")
}

// TestAPIBadInputReview: more bad input, each refused with a message that
// says what the field or parameter takes, and nothing written.
func TestAPIBadInputReview(t *testing.T) {
	e := newAPIEnv(t, envOpts{})
	cases := []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"bool field given a string", "POST", "/v1/jobs/cancel", `{"all":"yes"}`, 400, `field "all" is a JSON string: want true or false`},
		{"workers with a filter", "GET", "/v1/workers?queue=mail", "", 400, `unknown query parameter "queue": this endpoint takes none`},
		{"stats with a filter", "GET", "/v1/stats?state=running", "", 400, `unknown query parameter "state": this endpoint takes none`},
		{"create with a query", "POST", "/v1/jobs?queue=mail", `{"kind":"echo"}`, 400, `unknown query parameter "queue": this endpoint takes none`},
		{"batch with a query", "POST", "/v1/jobs/batch?queue=mail", `{"jobs":[{"kind":"echo"}]}`, 400, `unknown query parameter "queue": this endpoint takes none`},
		{"bulk cancel with a query", "POST", "/v1/jobs/cancel?queue=mail", `{"all":true}`, 400, `unknown query parameter "queue": this endpoint takes none`},
		{"bulk cancel with all and a filter", "POST", "/v1/jobs/cancel", `{"all":true,"state":"available"}`, 400, `"all":true cancels every unfinished job: send it alone`},
		{"unique bool field given a number", "POST", "/v1/jobs", `{"kind":"echo","unique":{"by_args":1}}`, 400, `field "unique.by_args" is a JSON number: want true or false`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := e.do(t, c.method, c.path, c.body)
			if code != c.status {
				t.Errorf("status %d, want %d; body %.300s", code, c.status, body)
			}
			var er errorResponse
			if err := json.Unmarshal(body, &er); err != nil || er.Error == "" {
				t.Fatalf("body is not a JSON error: %.300s", body)
			}
			if !strings.Contains(er.Error, c.want) {
				t.Errorf("error %q does not contain %q", er.Error, c.want)
			}
		})
	}
	if n := e.total(t); n != 0 {
		t.Errorf("%d jobs written by bad requests, want 0", n)
	}
}

// TestCLIUnknownJobSaysWhatToDo: an id that names no job is an error that
// also says what to do, as every CLI error does.
func TestCLIUnknownJobSaysWhatToDo(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	const id = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	for _, args := range [][]string{{"jobs", "get", id}, {"jobs", "cancel", id}, {"jobs", "wait", id}, {"jobs", "retry", id}, {"jobs", "delete", id}} {
		code, out, errs := runInProcess(append(args, "--server", e.srv.URL)...)
		r := cliResult{stdout: out, stderr: errs, code: code}
		checkOneLineError(t, strings.Join(args[:2], " "), r, exitFailure, "job not found: "+id+": check the id with 'leasehold jobs list'")
	}
}

// TestCLIUnknownCommandSuggestion: cobra's multi-line suggestion for a
// mistyped command becomes one readable line.
func TestCLIUnknownCommandSuggestion(t *testing.T) {
	code, out, errs := runInProcess("job", "list")
	r := cliResult{stdout: out, stderr: errs, code: code}
	checkOneLineError(t, "mistyped command", r, exitUsage, `unknown command "job" for "leasehold": did you mean jobs? run 'leasehold --help' for usage`)
}

// TestCLIHTTPSToPlainDaemon: an https --server for a daemon that serves
// plain HTTP is told to use http://.
func TestCLIHTTPSToPlainDaemon(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, workersResponse{})
	}))
	defer srv.Close()
	code, out, errs := runInProcess("workers", "list", "--server", strings.Replace(srv.URL, "http://", "https://", 1))
	r := cliResult{stdout: out, stderr: errs, code: code}
	checkOneLineError(t, "https to plain HTTP", r, exitFailure, "serves plain HTTP: use "+srv.URL)
}

// TestJobsWaitTimeoutFromEnvironmentNamed: a timeout that came from
// LEASEHOLD_TIMEOUT (perhaps exported for enqueue's --timeout) is named
// as such when it ends the wait, since no --timeout was given.
func TestJobsWaitTimeoutFromEnvironmentNamed(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	j := e.create(t, createRequest{Kind: "echo"})
	t.Setenv("LEASEHOLD_TIMEOUT", "50ms")
	for _, args := range [][]string{{"jobs", "wait", j.ID}, {"jobs", "wait", "--all"}} {
		code, out, errs := runInProcess(append(args, "--server", e.srv.URL)...)
		r := cliResult{stdout: out, stderr: errs, code: code}
		checkOneLineError(t, strings.Join(args, " "), r, exitFailure, "raise LEASEHOLD_TIMEOUT")
	}
}

// TestJobsWaitAllFromEnvironmentNamed: job ids with an exported
// LEASEHOLD_ALL are refused naming the variable, not a --all nobody typed.
func TestJobsWaitAllFromEnvironmentNamed(t *testing.T) {
	t.Setenv("LEASEHOLD_ALL", "true")
	code, out, errs := runInProcess("jobs", "wait", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "--server", "http://"+closedPort(t))
	r := cliResult{stdout: out, stderr: errs, code: code}
	checkOneLineError(t, "ids with LEASEHOLD_ALL", r, exitUsage, "LEASEHOLD_ALL")
}
