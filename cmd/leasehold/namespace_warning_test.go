package main

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// In shared mode, a namespace no live daemon is registered in is most
// often a typo: enqueue still enqueues (exit 0, the id on stdout) but
// warns once on stderr, naming the namespace; workers list says on stderr
// that its bare header means none is live there.
func TestSharedNoDaemonInNamespaceWarns(t *testing.T) {
	ep := strings.Join(etcdtest.Start(t).Endpoints(), ",")

	code, out, errs := runInProcess("enqueue", "work", `{"s":1}`, "--etcd", ep, "--namespace", "dflt")
	if code != 0 || len(strings.Fields(out)) != 1 {
		t.Fatalf("enqueue --namespace dflt: exit %d, stdout %q, stderr %q; want exit 0 and one id", code, out, errs)
	}
	if want := "leasehold: enqueue: warning: no live daemon in namespace dflt: the job waits until one starts there; check --namespace\n"; errs != want {
		t.Errorf("enqueue --namespace dflt: stderr %q, want %q", errs, want)
	}

	code, out, errs = runInProcess("enqueue", "work", "--count", "3", "--etcd", ep)
	if code != 0 || len(strings.Fields(out)) != 3 {
		t.Fatalf("enqueue --count 3: exit %d, stdout %q, stderr %q; want exit 0 and three ids", code, out, errs)
	}
	if want := "leasehold: enqueue: warning: no live daemon in namespace default: the jobs wait until one starts there; check --namespace\n"; errs != want {
		t.Errorf("enqueue --count 3: stderr %q, want %q", errs, want)
	}

	code, out, errs = runInProcess("workers", "list", "--etcd", ep, "--namespace", "dflt")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "ID") {
		t.Errorf("workers list --namespace dflt: exit %d, stdout %q; want exit 0 and the header", code, out)
	}
	if want := "leasehold: workers list: no live daemon in namespace dflt: check --namespace\n"; errs != want {
		t.Errorf("workers list --namespace dflt: stderr %q, want %q", errs, want)
	}

	// A job looked for in another namespace than its own is not found
	// there: the message names the namespace looked in.
	code, out, _ = runInProcess("enqueue", "work", "--etcd", ep, "--namespace", "prod")
	if code != 0 {
		t.Fatalf("enqueue --namespace prod: exit %d", code)
	}
	id := strings.TrimSpace(out)
	for _, args := range [][]string{{"jobs", "get", id}, {"jobs", "cancel", id}, {"jobs", "wait", id}} {
		code, _, errs = runInProcess(append(args, "--etcd", ep)...)
		want := "leasehold: " + strings.Join(args[:2], " ") + ": job not found: " + id + ": check the id with 'leasehold jobs list' and --namespace (default here)"
		if code != exitFailure || !strings.HasPrefix(errs, want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v without its namespace: exit %d, stderr %q; want exit %d and one line starting %q", args, code, errs, exitFailure, want)
		}
	}
	if code, _, errs = runInProcess("jobs", "get", id, "--etcd", ep, "--namespace", "prod"); code != 0 {
		t.Errorf("jobs get --namespace prod: exit %d, stderr %q", code, errs)
	}
}

// Against a daemon's API, a list of no workers says so on stderr too; with
// --json the empty array says it already.
func TestWorkersListNoneRegistered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		apiserver.WriteJSON(w, http.StatusOK, apiserver.WorkersResponse{})
	}))
	defer srv.Close()
	code, out, errs := runInProcess("workers", "list", "--server", srv.URL)
	if code != 0 || strings.Count(out, "\n") != 1 {
		t.Errorf("workers list: exit %d, stdout %q; want exit 0 and the header", code, out)
	}
	if want := "leasehold: workers list: none registered in the store of the daemon at " + srv.URL + "\n"; errs != want {
		t.Errorf("workers list: stderr %q, want %q", errs, want)
	}
	code, out, errs = runInProcess("workers", "list", "--json", "--server", srv.URL)
	if code != 0 || strings.TrimSpace(out) != "[]" || errs != "" {
		t.Errorf("workers list --json: exit %d, stdout %q, stderr %q; want [] and nothing on stderr", code, out, errs)
	}
}

// An empty --namespace (--namespace "$NS" with NS unset, or a config
// file's namespace: "", which config check reports) is refused before
// any request, as an empty --queue or --kind is: read as left out, it was
// the default namespace, so that a team's bulk cancel, or its daemon,
// acted on the jobs of a namespace it did not name. The job of the
// default namespace is left alone. (The daemon is given an etcd that
// refuses connections: one that took the empty namespace fails to reach
// it, exit 1, instead of running.)
func TestEmptyNamespaceRefused(t *testing.T) {
	ep := strings.Join(etcdtest.Start(t).Endpoints(), ",")
	code, out, errs := runInProcess("enqueue", "work", "--etcd", ep)
	if code != 0 {
		t.Fatalf("enqueue in the default namespace: exit %d, stderr %q", code, errs)
	}
	id := strings.TrimSpace(out)
	conf := writeFile(t, t.TempDir(), "config.yaml", "namespace: \"\"\n")
	for _, args := range [][]string{
		{"jobs", "cancel", "--all", "--etcd", ep, "--namespace="},
		{"jobs", "cancel", "--all", "--etcd", ep, "--config", conf},
		{"jobs", "list", "--etcd", ep, "--namespace", ""},
		{"enqueue", "work", "--etcd", ep, "--namespace="},
		{"daemon", "--etcd", "http://" + closedPort(t), "--namespace=", "--listen", "127.0.0.1:0"},
	} {
		// A value from the config file is named by its file and line.
		want := `--namespace is empty: leave it out for the "default" namespace, or name one`
		if slices.Contains(args, "--config") {
			want = conf + `: line 1: namespace is empty: leave it out for the "default" namespace, or name one`
		}
		code, out, errs := runInProcess(args...)
		checkOneLineError(t, strings.Join(args, " "), cliResult{code: code, stdout: out, stderr: errs}, exitUsage, want)
	}
	if code, out, _ := runInProcess("config", "check", conf); code != exitUsage || !strings.Contains(out, conf+`: line 1: namespace is empty: leave it out for the "default" namespace`) {
		t.Errorf("config check of namespace: \"\": exit %d:\n%s", code, out)
	}
	code, out, errs = runInProcess("jobs", "get", id, "--etcd", ep, "--json")
	if code != 0 || !strings.Contains(out, `"state": "available"`) {
		t.Errorf("jobs get %s in the default namespace: exit %d, stdout %q, stderr %q; want it available", id, code, out, errs)
	}
}
