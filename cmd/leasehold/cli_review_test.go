package main

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/apiserver"
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
		apiserver.WriteJSON(w, http.StatusOK, apiserver.WorkersResponse{})
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	defer srv.Close()
	code, out, errs := runInProcess("workers", "list", "--server", srv.URL)
	r := cliResult{stdout: out, stderr: errs, code: code}
	checkOneLineError(t, "untrusted certificate", r, exitFailure, "--server-ca")
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
		apiserver.WriteJSON(w, http.StatusOK, apiserver.WorkersResponse{})
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
	j := e.create(t, apiserver.CreateRequest{Kind: "echo"})
	t.Setenv("LEASEHOLD_TIMEOUT", "50ms")
	for _, c := range []struct {
		args   []string
		stdout string // the jobs as they are: none final; the counts
	}{
		{[]string{"jobs", "wait", j.ID}, ""},
		{[]string{"jobs", "wait", "--all"}, "not all jobs final: completed=0 discarded=0 cancelled=0\n"},
	} {
		code, out, errs := runInProcess(append(c.args, "--server", e.srv.URL)...)
		if out != c.stdout {
			t.Errorf("%s: stdout %q, want %q", strings.Join(c.args, " "), out, c.stdout)
		}
		r := cliResult{stderr: errs, code: code}
		checkOneLineError(t, strings.Join(c.args, " "), r, exitFailure, "raise LEASEHOLD_TIMEOUT")
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
