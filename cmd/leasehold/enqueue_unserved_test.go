package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
)

// unservedWarning is the warning of an enqueue to queue mial while the
// live daemons serve default and pdf.
const unservedWarning = `leasehold: enqueue: warning: no live daemon serves queue "mial" (the daemons serve default, pdf): `

// checkUnservedWarning: with daemons serving default and pdf behind
// target, an enqueue to a served queue says nothing on stderr; one to
// mial (a typo, say) is still enqueued, exit 0, ids on stdout as ever, and
// says so in one warning line on stderr, one per command whatever --count.
func checkUnservedWarning(t *testing.T, target ...string) {
	t.Helper()
	enqueue := func(args ...string) cliResult {
		t.Helper()
		r := runCLI(t, nil, "", append(append([]string{"enqueue", "echo", "{}"}, args...), target...)...)
		if r.code != 0 {
			t.Fatalf("enqueue %v: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
		}
		return r
	}
	ids := func(what string, r cliResult, n int) {
		t.Helper()
		f := strings.Fields(r.stdout)
		if len(f) != n || r.stdout != strings.Join(f, "\n")+"\n" {
			t.Errorf("%s: stdout %q, want %d ids, one a line", what, r.stdout, n)
		}
		for _, id := range f {
			if err := coordinator.ValidateID(id); err != nil {
				t.Errorf("%s: stdout line %q: %v", what, id, err)
			}
		}
	}
	warnings := func(r cliResult) int { return strings.Count(r.stderr, "warning") }

	for _, q := range []string{"pdf", "default"} {
		r := enqueue("--queue", q)
		ids("served queue "+q, r, 1)
		if warnings(r) != 0 {
			t.Errorf("enqueue to served queue %s warned: %q", q, r.stderr)
		}
	}
	r := enqueue("--count", "3")
	ids("--count 3 to the default queue", r, 3)
	if warnings(r) != 0 {
		t.Errorf("enqueue --count 3 to the default queue warned: %q", r.stderr)
	}

	r = enqueue("--queue", "mial")
	ids("unserved queue", r, 1)
	if want := unservedWarning + "the job waits until one does\n"; r.stderr != want {
		t.Errorf("enqueue to unserved queue mial: stderr %q, want %q", r.stderr, want)
	}
	if id := strings.TrimSpace(r.stdout); coordinator.ValidateID(id) == nil {
		var j coordinator.Job
		out := okCLI(t, append([]string{"jobs", "get", id, "--json"}, target...)...)
		if err := json.Unmarshal([]byte(out), &j); err != nil || j.Queue != "mial" {
			t.Errorf("jobs get %s: queue %q (%v), want the job written to mial\n%s", id, j.Queue, err, out)
		}
	}

	r = enqueue("--queue", "mial", "--count", "3")
	ids("--count 3 to an unserved queue", r, 3)
	if warnings(r) != 1 || !strings.Contains(r.stderr, unservedWarning+"the jobs wait until one does\n") {
		t.Errorf("enqueue --count 3 to unserved queue mial: stderr %q, want one warning", r.stderr)
	}

	r = enqueue("--queue", "mial", "--json")
	var jobs []coordinator.Job
	if err := json.Unmarshal([]byte(r.stdout), &jobs); err != nil || len(jobs) != 1 || jobs[0].Queue != "mial" {
		t.Errorf("enqueue --json to an unserved queue: stdout %q (%v), want the job as a JSON array", r.stdout, err)
	}
	if warnings(r) != 1 || !strings.HasPrefix(r.stderr, unservedWarning) {
		t.Errorf("enqueue --json to unserved queue mial: stderr %q, want the warning", r.stderr)
	}
}

func TestEnqueueWarnsOfUnservedQueueEmbedded(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "--queues", "default,pdf")
	checkUnservedWarning(t, "--server", d.server)
}

func TestEnqueueWarnsOfUnservedQueueShared(t *testing.T) {
	ep := strings.Join(etcdtest.Start(t).Endpoints(), ",")
	// No live daemon: no queue to compare with (as for kinds), and
	// enqueuing before the daemons start is legitimate; but a namespace
	// without any daemon may be a typo, which is said.
	r := runCLI(t, nil, "", "enqueue", "echo", "{}", "--queue", "mial", "--etcd", ep)
	want := "leasehold: enqueue: warning: no live daemon in namespace default: the job waits until one starts there; check --namespace\n"
	if r.code != 0 || len(strings.Fields(r.stdout)) != 1 || r.stderr != want {
		t.Errorf("enqueue to mial with no daemon: exit %d, stdout %q, stderr %q; want an id and %q", r.code, r.stdout, r.stderr, want)
	}
	p := spStart(t, "daemon", binPath, "daemon", "--etcd", ep, "--queues", "default,pdf",
		"--listen", "127.0.0.1:0", "--log-format", "json", "--shutdown-timeout", "1s")
	p.waitLog(t, 0, "listening line", func(l spLine) bool { return l.Msg == "listening" })
	checkUnservedWarning(t, "--etcd", ep)
}
