package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/localstore"
	"go.etcd.io/etcd/server/v3/embed"
)

// compatGolden is golden.json of a stored-format fixture, written by
// scripts/compat-fixture.sh with the old build's CLI.
type compatGolden struct {
	Rev            string              `json:"rev"`
	Commit         string              `json:"commit"`
	Mode           string              `json:"mode"` // embedded (or empty), or shared
	BackupRevision int64               `json:"backup_revision"`
	Differ         map[string][]string `json:"expected_to_differ"`
	Jobs           []struct {
		Role string         `json:"role"`
		Job  map[string]any `json:"job"`
	} `json:"jobs"`
	Queues   []map[string]any `json:"queues"`
	Periodic []map[string]any `json:"periodic"`
}

// compatRetention keeps the fixture's finished jobs, which are older than
// the default retention, for the test.
const compatRetention = "876000h"

// TestCompatFixtures opens, with this build, the data directory that an
// old build left behind (killed with SIGKILL while jobs ran), and restores
// the backup that build took, for every fixture under testdata/compat (or,
// for a shared one, starts anew the etcd member the old daemon used): every
// job reads back as the old build recorded it, the jobs left running are
// re-queued once (or cancelled for their pending request) with one "run
// lost" error, unique keys still hold, the paused queue keeps its pause and
// limit, the schedule its state; then a daemon runs the jobs that can run.
// A change that breaks a stored layout fails it (README, Upgrades).
func TestCompatFixtures(t *testing.T) {
	goldens, err := filepath.Glob(filepath.Join("testdata", "compat", "*", "golden.json"))
	if err != nil || len(goldens) == 0 {
		t.Fatalf("no fixture under testdata/compat (%v)", err)
	}
	for _, gp := range goldens {
		fixture := filepath.Dir(gp)
		t.Run(filepath.Base(fixture), func(t *testing.T) {
			var g compatGolden
			b, err := os.ReadFile(gp)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &g); err != nil {
				t.Fatalf("%s: %v", gp, err)
			}
			root := t.TempDir()
			untarGz(t, filepath.Join(fixture, "fixture.tar.gz"), root)
			if g.Mode == "shared" {
				// The old build's etcd member, started anew as a
				// cluster of one at new addresses.
				srv := etcdtest.Start(t, etcdtest.WithConfig(func(c *embed.Config) {
					c.Dir, c.ForceNewCluster = filepath.Join(root, "etcd"), true
				}))
				ep := strings.Join(srv.Endpoints(), ",")
				checkCompatStore(t, &g, func(t *testing.T, args ...string) *daemonProc {
					return startDaemonCmd(t, exec.Command(binPath, append([]string{"daemon", "--etcd", ep,
						"--listen", "127.0.0.1:0", "--log-format", "json", "--lease-ttl", "2s"}, args...)...))
				}, false)
				return
			}
			embedded := func(dir string) func(*testing.T, ...string) *daemonProc {
				return func(t *testing.T, args ...string) *daemonProc { return startDaemon(t, dir, args...) }
			}
			t.Run("data", func(t *testing.T) {
				checkCompatStore(t, &g, embedded(filepath.Join(root, "data")), false)
			})
			t.Run("backup", func(t *testing.T) {
				restored := filepath.Join(root, "restored")
				okCLI(t, "restore", "--from", filepath.Join(root, "backup"), "--data", restored)
				checkCompatStore(t, &g, embedded(restored), true)
			})
		})
	}
}

// checkCompatStore checks the store on which start starts a daemon
// against g: the data directory or the etcd member, or (fromBackup) the
// store restored from the backup, which lacks the jobs enqueued after it.
func checkCompatStore(t *testing.T, g *compatGolden, start func(*testing.T, ...string) *daemonProc, fromBackup bool) {
	var want []int // indexes of the jobs the store holds
	for i, gj := range g.Jobs {
		if !fromBackup || gj.Role != "after-backup" {
			want = append(want, i)
		}
	}

	// First a daemon that serves a queue none of the jobs is in: the
	// store as opened, before anything runs.
	d := start(t, "--queues", "compat-idle", "--retention", compatRetention, "--shutdown-timeout", "100ms")
	var left []string
	for _, gj := range g.Jobs {
		if gj.Role == "running" || gj.Role == "cancel-requested" {
			left = append(left, gj.Job["id"].(string))
		}
	}
	if g.Mode == "shared" {
		// The reaper takes them once the old daemon's lease, which
		// the member restarted with its full TTL, has expired.
		for _, id := range left {
			waitNotRunning(t, d.server, id)
		}
	} else if n := d.log.requeued(); n != len(left) {
		t.Errorf("re-queued %d jobs left running at open, want %d:\n%s", n, len(left), d.log)
	}
	if got, wantN := len(listAll(t, d.server)), len(want); got != wantN {
		t.Errorf("the store holds %d jobs, want %d", got, wantN)
	}
	for _, i := range want {
		gj := g.Jobs[i]
		id := gj.Job["id"].(string)
		var got map[string]any
		if err := json.Unmarshal([]byte(okCLI(t, "jobs", "get", id, "--json", "--server", d.server)), &got); err != nil {
			t.Fatalf("jobs get %s --json: %v", id, err)
		}
		diffJSON(t, fmt.Sprintf("job %s (%s)", id, gj.Role), gj.Job, got, g.Differ[gj.Role])
		switch gj.Role {
		case "running":
			checkRunLost(t, id, gj.Job, got, "available")
			if got["attempt"] != gj.Job["attempt"].(float64)-1 || got["owner"] != "" || got["token"] != 0.0 {
				t.Errorf("job %s left running: attempt %v owner %v token %v, want attempt %v given back, no owner or token",
					id, got["attempt"], got["owner"], got["token"], gj.Job["attempt"])
			}
			if errs, _ := got["errors"].([]any); len(errs) > 0 {
				if last, _ := errs[len(errs)-1].(map[string]any); !reflect.DeepEqual(got["scheduled_at"], last["at"]) {
					t.Errorf("job %s left running is scheduled at %v, not when it was re-queued", id, got["scheduled_at"])
				}
			}
		case "retryable":
			// Its next attempt is due: a daemon of either build makes it
			// available, leaving the rest of the record as it was.
			if got["state"] != "retryable" && got["state"] != "available" {
				t.Errorf("job %s, retryable with its next attempt due, is %v", id, got["state"])
			}
		case "cancel-requested":
			checkRunLost(t, id, gj.Job, got, "cancelled")
			if got["finalized_at"] == nil || got["cancel_requested"] == true {
				t.Errorf("job %s, cancel requested while running: finalized_at %v, cancel_requested %v", id, got["finalized_at"], got["cancel_requested"])
			}
		}
	}
	for _, gj := range g.Jobs {
		if fromBackup && gj.Role == "after-backup" {
			r := runCLI(t, nil, "", "jobs", "get", gj.Job["id"].(string), "--server", d.server)
			if r.code != exitFailure || !strings.Contains(r.stderr, "not found") {
				t.Errorf("job %s, enqueued after the backup, is in the restored store: exit %d %s%s", gj.Job["id"], r.code, r.stdout, r.stderr)
			}
		}
	}

	// A second job with a unique key the old build stored, or with the
	// same kind and payload as its job unique by args, is the first one.
	for _, u := range []struct {
		role string
		args []string
	}{
		{"unique-key", []string{"enqueue", "echo", `{"unique":"key"}`, "--queue", "later", "--unique-key", "compat-key"}},
		{"unique-args", []string{"enqueue", "echo", `{"unique":"args"}`, "--unique-by-args", "--unique-states", "completed"}},
	} {
		r := runCLI(t, nil, "", append(u.args, "--server", d.server)...)
		if wantID := compatRole(t, g, u.role)[0]; r.code != 0 || strings.TrimSpace(r.stdout) != wantID || !strings.Contains(r.stderr, "already exists") {
			t.Errorf("leasehold %s: exit %d, printed %q (stderr %q); want the existing job %s", strings.Join(u.args, " "), r.code, r.stdout, r.stderr, wantID)
		}
	}

	// The queues keep their pause and limit (their counts and daemons
	// are of the moment), the schedule its state.
	var queues []map[string]any
	if err := json.Unmarshal([]byte(okCLI(t, "queues", "list", "--json", "--server", d.server)), &queues); err != nil {
		t.Fatal(err)
	}
	for _, gq := range g.Queues {
		i := slices.IndexFunc(queues, func(q map[string]any) bool { return q["name"] == gq["name"] })
		if i < 0 {
			t.Errorf("queue %v is not listed", gq["name"])
			continue
		}
		diffJSON(t, fmt.Sprintf("queue %v", gq["name"]), gq, queues[i], []string{"available", "workers"})
	}
	var periodic []map[string]any
	if err := json.Unmarshal([]byte(okCLI(t, "periodic", "list", "--json", "--server", d.server)), &periodic); err != nil {
		t.Fatal(err)
	}
	for _, gp := range g.Periodic {
		i := slices.IndexFunc(periodic, func(p map[string]any) bool { return p["name"] == gp["name"] })
		if i < 0 {
			t.Errorf("schedule %v is not listed", gp["name"])
			continue
		}
		diffJSON(t, fmt.Sprintf("schedule %v", gp["name"]), gp, periodic[i], nil)
	}
	checkNoErrorLogged(t, d)
	d.stop(t, syscall.SIGTERM)

	// Then a daemon that serves the jobs' queues: every job that can run
	// completes (the re-queued 'sleep' jobs at once, as 'cat'), the paused
	// queue's once it is resumed; the others stay as they were.
	d = start(t, "--queues", "default,later,flaky,paused", "--retention", compatRetention,
		"--shutdown-timeout", "100ms", "--exec", "sleep=cat >/dev/null")
	var runs, paused []string
	for _, i := range want {
		switch gj := g.Jobs[i]; gj.Role {
		case "available", "unique-key", "tick", "after-backup", "running", "retryable":
			runs = append(runs, gj.Job["id"].(string))
		case "paused":
			paused = append(paused, gj.Job["id"].(string))
		}
	}
	okCLI(t, append([]string{"jobs", "wait", "--timeout", "60s", "--server", d.server}, runs...)...)
	for _, id := range paused {
		if st := getJobCLI(t, d.server, id).State; st != "available" {
			t.Errorf("job %s of the paused queue is %s before the queue is resumed", id, st)
		}
	}
	okCLI(t, "queues", "resume", "paused", "--server", d.server)
	okCLI(t, append([]string{"jobs", "wait", "--timeout", "60s", "--server", d.server}, paused...)...)
	for _, i := range want {
		gj := g.Jobs[i]
		id := gj.Job["id"].(string)
		j := getJobCLI(t, d.server, id)
		wantState := gj.Job["state"].(string)
		switch gj.Role {
		case "available", "unique-key", "tick", "after-backup", "running", "retryable", "paused":
			wantState = "completed"
		case "cancel-requested":
			wantState = "cancelled"
		}
		if string(j.State) != wantState {
			t.Errorf("job %s (%s) ended %s, want %s", id, gj.Role, j.State, wantState)
		}
		if ran := wantState == "completed" && gj.Job["state"] != "completed"; ran && fromBackup && int64(j.Token) <= g.BackupRevision+int64(localstore.DefaultRevisionBump) {
			t.Errorf("job %s ran on the restored store under token %d, not above the backup's revision %d raised by the restore", id, j.Token, g.BackupRevision)
		}
		if j.Kind == "echo" && wantState == "completed" {
			var res, pay any
			if json.Unmarshal(j.Result, &res) != nil || json.Unmarshal(j.Payload, &pay) != nil || !reflect.DeepEqual(res, pay) {
				t.Errorf("echo job %s completed with result %s, want its payload %s", id, j.Result, j.Payload)
			}
		}
	}
	checkNoErrorLogged(t, d)
}

// waitNotRunning waits until the job is no longer running.
func waitNotRunning(t *testing.T, server, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for getJobCLI(t, server, id).State == "running" {
		if time.Now().After(deadline) {
			t.Fatalf("job %s left running by the old build's daemon is still running after 30s", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// compatRole returns the ids of g's jobs of role.
func compatRole(t *testing.T, g *compatGolden, role string) []string {
	t.Helper()
	var ids []string
	for _, gj := range g.Jobs {
		if gj.Role == role {
			ids = append(ids, gj.Job["id"].(string))
		}
	}
	if len(ids) == 0 {
		t.Fatalf("the fixture has no job of role %s", role)
	}
	return ids
}

// checkRunLost checks that the job left running, was, as this build
// read it, moved to state with one more lost run and one more error
// naming the run that was lost.
func checkRunLost(t *testing.T, id string, old, got map[string]any, state string) {
	t.Helper()
	oldErrs, _ := old["errors"].([]any)
	gotErrs, _ := got["errors"].([]any)
	oldRescues, _ := old["rescues"].(float64)
	if got["state"] != state || got["rescues"] != oldRescues+1 || len(gotErrs) != len(oldErrs)+1 ||
		!reflect.DeepEqual(gotErrs[:len(oldErrs)], oldErrs) {
		t.Errorf("job %s left running: state %v, rescues %v, errors %v; want %s, %v, the old errors and one more",
			id, got["state"], got["rescues"], got["errors"], state, oldRescues+1)
		return
	}
	last, _ := gotErrs[len(oldErrs)].(map[string]any)
	msg, _ := last["error"].(string)
	if wantMsg := fmt.Sprintf("run lost: owner %s (token %v)", old["owner"], old["token"]); !strings.HasPrefix(msg, wantMsg) || last["attempt"] != old["attempt"] {
		t.Errorf("job %s left running: last error %v, want attempt %v and %q", id, last, old["attempt"], wantMsg)
	}
}

// diffJSON reports every field of want that got lacks or holds otherwise,
// but for the fields in differ (changed on purpose, checked apart). Times
// compare as instants; fields only in got are additions, allowed.
func diffJSON(t *testing.T, what string, want, got map[string]any, differ []string) {
	t.Helper()
	for k, w := range want {
		if slices.Contains(differ, k) {
			continue
		}
		v, ok := got[k]
		if !ok {
			t.Errorf("%s: field %q is missing (old build: %v)", what, k, w)
			continue
		}
		if !reflect.DeepEqual(v, w) && !sameInstant(v, w) {
			t.Errorf("%s: field %q is %v, the old build read %v", what, k, v, w)
		}
	}
}

// sameInstant reports whether a and b are RFC 3339 texts of one instant.
func sameInstant(a, b any) bool {
	as, ok1 := a.(string)
	bs, ok2 := b.(string)
	if !ok1 || !ok2 {
		return false
	}
	at, err1 := time.Parse(time.RFC3339Nano, as)
	bt, err2 := time.Parse(time.RFC3339Nano, bs)
	return err1 == nil && err2 == nil && at.Equal(bt)
}

// checkNoErrorLogged fails the test if the daemon logged an error (a
// record it could not decode, say).
func checkNoErrorLogged(t *testing.T, d *daemonProc) {
	t.Helper()
	for line := range strings.Lines(d.log.String()) {
		var rec struct{ Level string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "ERROR" {
			t.Errorf("the daemon logged an error: %s", line)
		}
	}
}

// untarGz extracts the gzipped tar file src into dir (directories and
// regular files only, with their modes).
func untarGz(t *testing.T, src, dir string) {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsLocal(h.Name) {
			t.Fatalf("%s: %q is not a local path", src, h.Name)
		}
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, h.FileInfo().Mode().Perm())
		case tar.TypeReg:
			var out *os.File
			if out, err = os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, h.FileInfo().Mode().Perm()); err == nil {
				_, err = io.Copy(out, tr)
				err = errors.Join(err, out.Close())
			}
		default:
			t.Fatalf("%s: %q: unexpected entry type %c", src, h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
