package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/internal/apicall"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/localstore"
)

// postJobs enqueues jobs (createRequests as JSON) through the daemon's API
// and returns their ids.
func postJobs(t *testing.T, server string, jobs ...string) []string {
	t.Helper()
	resp, err := http.Post(server+"/v1/jobs/batch", "application/json", strings.NewReader(`{"jobs":[`+strings.Join(jobs, ",")+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res apiserver.BatchResponse
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("enqueue: %d %v", resp.StatusCode, err)
	}
	ids := make([]string, len(res.Jobs))
	for i, j := range res.Jobs {
		ids[i] = j.ID
	}
	return ids
}

func repeat(job string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = job
	}
	return out
}

// A backup taken through the CLI from a running daemon, restored with
// 'leasehold restore' after the daemon is killed, holds the jobs of before
// the backup and none of after it; the job running at the backup runs again
// under a new token, and every token the restored daemon hands out is above
// every token the original handed out, after the backup too.
func TestBackupRestoreEndToEnd(t *testing.T) {
	dataDir := t.TempDir()
	backupDir := filepath.Join(t.TempDir(), "backup")
	d := startDaemon(t, dataDir, "--shutdown-timeout", "100ms")

	done := postJobs(t, d.server, repeat(`{"kind":"echo","payload":{"before":true}}`, 5)...)
	// The daemon serves only the default queue: these stay available.
	parked := postJobs(t, d.server, repeat(`{"kind":"echo","queue":"parked"}`, 3)...)
	held := postJobs(t, d.server, `{"kind":"sleep","payload":{"ms":600000}}`)[0]
	okCLI(t, append([]string{"jobs", "wait", "--timeout", "30s", "--server", d.server}, done...)...)
	waitStateCLI(t, d.server, held, coordinator.StateRunning)
	firstRun := getJobCLI(t, d.server, held).Token

	var info apiserver.BackupResponse
	if err := json.Unmarshal([]byte(okCLI(t, "backup", backupDir, "--json", "--server", d.server)), &info); err != nil {
		t.Fatalf("backup --json: %v", err)
	}
	if info.Dir != backupDir || info.Source != dataDir || info.Revision < int64(firstRun) || info.CreatedAt.IsZero() {
		t.Fatalf("backup --json: %+v; want dir %s, source %s, revision at least %d", info, backupDir, dataDir, firstRun)
	}

	// After the backup: jobs that run (and use up revisions), and one that
	// waits.
	after := postJobs(t, d.server, repeat(`{"kind":"echo","payload":{"after":true}}`, 20)...)
	after = append(after, postJobs(t, d.server, `{"kind":"echo","queue":"parked"}`)...)
	okCLI(t, append([]string{"jobs", "wait", "--timeout", "30s", "--server", d.server}, after[:20]...)...)
	var maxToken fence.Token
	for _, j := range listAll(t, d.server) {
		maxToken = max(maxToken, j.Token)
	}
	d.stop(t, syscall.SIGKILL)

	// The backup is not a data directory.
	r := runCLI(t, nil, "", "daemon", "--data", backupDir, "--listen", "127.0.0.1:0", "--log-format", "json")
	if r.code != exitFailure || !strings.Contains(r.stderr, "leasehold restore --from") {
		t.Fatalf("daemon on the backup: exit %d, want 1 saying to restore it\n%s", r.code, r.stderr)
	}

	restored := filepath.Join(t.TempDir(), "restored")
	out := okCLI(t, "restore", "--from", backupDir, "--data", restored)
	wantRev := info.Revision + localstore.DefaultRevisionBump
	if !strings.Contains(out, fmt.Sprintf("raised by %d to %d", int64(localstore.DefaultRevisionBump), wantRev)) ||
		!strings.Contains(out, "start the daemon with --data "+restored) {
		t.Errorf("restore output does not give the new revision %d and what to do next:\n%s", wantRev, out)
	}

	// The held job's kind now ends at once, so that its second run ends.
	d2 := startDaemon(t, restored, "--exec", "sleep=cat >/dev/null")
	if d2.log.requeued() != 1 {
		t.Errorf("the restored daemon did not re-queue the job running at the backup:\n%s", d2.log)
	}
	jobs := listAll(t, d2.server)
	for _, id := range done {
		if j, ok := jobs[id]; !ok || j.State != coordinator.StateCompleted {
			t.Errorf("job %s, completed before the backup, is %+v after the restore", id, j)
		}
	}
	for _, id := range parked {
		if j, ok := jobs[id]; !ok || j.State != coordinator.StateAvailable {
			t.Errorf("job %s, available before the backup, is %+v after the restore", id, j)
		}
	}
	for _, id := range after {
		if _, ok := jobs[id]; ok {
			t.Errorf("job %s, enqueued after the backup, is in the restored store", id)
		}
	}
	okCLI(t, "jobs", "wait", held, "--timeout", "30s", "--server", d2.server)
	j := getJobCLI(t, d2.server, held)
	if j.State != coordinator.StateCompleted || j.Token <= firstRun || j.Token <= maxToken {
		t.Errorf("job running at the backup: %s under token %d; want completed under a token above its first run's %d and above the original's last %d",
			j.State, j.Token, firstRun, maxToken)
	}
	fresh := postJobs(t, d2.server, `{"kind":"echo"}`)[0]
	okCLI(t, "jobs", "wait", fresh, "--timeout", "30s", "--server", d2.server)
	if j := getJobCLI(t, d2.server, fresh); j.Token <= maxToken {
		t.Errorf("new job's token %d is not above %d, handed out by the original daemon after the backup", j.Token, maxToken)
	}
}

// leasehold backup sends the daemon's token, and prints where the backup
// is and its revision; without the token it is refused.
func TestBackupCLI(t *testing.T) {
	log := testutil.QuietLogger(t)
	ls := testutil.TempLocal(t, log)
	coord, err := coordinator.New(ls, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(apiserver.New(apiserver.Config{Coord: coord, Logger: log, Auth: apiserver.AuthConfig{Token: "s3cret"}, Backup: ls}))
	defer srv.Close()
	dir := filepath.Join(t.TempDir(), "b")

	code, out, errs := runInProcess("backup", dir, "--server", srv.URL)
	if code != exitFailure || out != "" || !strings.Contains(errs, "missing or wrong API token") {
		t.Errorf("backup without the token: exit %d, stdout %q, stderr %q; want 1 asking for the token, nothing printed", code, out, errs)
	}
	code, out, errs = runInProcess("backup", dir, "--server", srv.URL, "--api-token", "s3cret")
	info, err := localstore.ReadBackup(dir)
	if err != nil {
		t.Fatalf("backup: exit %d, stdout %q, stderr %q: %v", code, out, errs, err)
	}
	if want := fmt.Sprintf("backup written to %s at revision %d", dir, info.Revision); code != 0 || !strings.Contains(out, want) {
		t.Errorf("backup: exit %d, stdout %q, stderr %q; want %q", code, out, errs, want)
	}
	code, out, errs = runInProcess("backup", dir, "--server", srv.URL, "--api-token", "s3cret")
	if want := "leasehold: backup: " + dir + " exists: pass a directory that does not exist yet\n"; code != exitUsage || errs != want || out != "" {
		t.Errorf("backup to an existing directory: exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errs, want)
	}
}

// Shared mode, the daemon's API or the CLI's in-process one, has no store
// of its own to back up: POST /v1/backup says how to back up etcd.
func TestBackupAPISharedRefused(t *testing.T) {
	log := testutil.QuietLogger(t)
	coord, err := coordinator.New(testutil.TempLocal(t, log), coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "b")
	for name, h := range map[string]http.Handler{
		"daemon": apiserver.New(apiserver.Config{Coord: coord, Shared: true, Logger: log, Auth: apiserver.AuthConfig{Token: "s3cret"}}),
		"cli":    newCLIAPI(coord),
	} {
		hdr := []string{"Authorization", "Bearer s3cret"}
		code, b := testutil.APICall(t, h, "POST", "/v1/backup", `{"dir":"`+dir+`"}`, hdr...)
		msg, _ := apicall.ErrorMessage(b)
		if code != http.StatusBadRequest || !strings.Contains(msg, "etcdctl snapshot save") ||
			!strings.Contains(msg, "etcdutl snapshot restore FILE --bump-revision 1000000000 --mark-compacted") {
			t.Errorf("%s: %d %q, want 400 saying to use etcdctl and etcdutl", name, code, msg)
		}
	}
	// Still a change: the token is checked first.
	h := apiserver.New(apiserver.Config{Coord: coord, Shared: true, Logger: log, Auth: apiserver.AuthConfig{Token: "s3cret"}})
	if code, b := testutil.APICall(t, h, "POST", "/v1/backup", `{"dir":"`+dir+`"}`); code != http.StatusUnauthorized {
		t.Errorf("shared, without a token: %d %s, want 401", code, b)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused backup wrote %s (%v)", dir, err)
	}
}

// The usage errors of backup and restore, and restore's refusals of the
// directories it is given (bad input too: exit 2), each on one line saying
// what to do; restore takes --data from the command line only.
func TestBackupRestoreCLIErrors(t *testing.T) {
	target := filepath.Join(t.TempDir(), "target")
	t.Setenv("LEASEHOLD_DATA", target)
	closedURL := "http://" + closedPort(t)
	empty := t.TempDir()
	full := t.TempDir()
	writeFile(t, full, "f", "x")
	noStore := t.TempDir()
	writeFile(t, noStore, "f", "x")
	backupDir := filepath.Join(t.TempDir(), "b")
	if err := os.MkdirAll(backupDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, backupDir, "leasehold-backup.json", `{"revision":5}`)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"backup", "backups/b"}, exitUsage, "not an absolute path: pass an absolute path on the daemon's host"},
		{[]string{"backup"}, exitUsage, "missing arguments: usage: leasehold backup DIR"},
		{[]string{"backup", "/a", "/b"}, exitUsage, "too many arguments"},
		{[]string{"backup", "/a", "--etcd", closedURL}, exitUsage, "etcdctl snapshot save"},
		{[]string{"restore"}, exitUsage, "--data is missing: pass the data directory"},
		{[]string{"restore", "--config", writeFile(t, t.TempDir(), "c.yaml", "data: "+target+"\n")}, exitUsage, "--data is missing"},
		{[]string{"restore", "--data", target, "--bump-revision", "-1"}, exitUsage, "--bump-revision -1 is negative"},
		{[]string{"restore", "--data", target, "--bump-revision", "0"}, exitUsage, "pass a positive number"},
		{[]string{"restore", "--data", target, "--from", t.TempDir()}, exitUsage, "is not a backup"},
		{[]string{"restore", "--data", target, "--from", "/nonexistent-backup"}, exitUsage, "--from /nonexistent-backup does not exist: pass a backup directory written by 'leasehold backup'"},
		{[]string{"restore", "--data", full, "--from", backupDir}, exitUsage, full + " is not empty: restore into a new directory"},
		{[]string{"restore", "--data", target}, exitUsage, "--data " + target + " does not exist: " + restoreNeeds},
		{[]string{"restore", "--data", empty}, exitUsage, "--data " + empty + " is empty: " + restoreNeeds},
		{[]string{"restore", "--data", noStore}, exitUsage, "holds no store"},
		{[]string{"restore", "--data", noStore}, exitUsage, "bump in place a data directory put back from a snapshot, or restore a backup by naming it as the source"},
	} {
		code, out, errs := runInProcess(c.args...)
		what := strings.Join(c.args, " ")
		if code != c.code || !strings.Contains(errs, c.want) || strings.Count(errs, "\n") != 1 || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d and one line saying %q", what, code, out, errs, c.code, c.want)
		}
		if strings.Contains(errs, "localstore:") {
			t.Errorf("%s: %q names the package", what, errs)
		}
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused restores created %s (%v)", target, err)
	}
}

// restore --from copies the backup with the bump asked for; without
// --from it bumps a stopped data directory in place, and refuses an open
// one.
func TestRestoreCLI(t *testing.T) {
	dataDir := t.TempDir()
	ls, err := localstore.Open(dataDir, localstore.Options{Logger: testutil.QuietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	coord, err := coordinator.New(ls, coordinator.Config{Logger: testutil.QuietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "echo"}); err != nil {
		t.Fatal(err)
	}
	backupDir := filepath.Join(t.TempDir(), "b")
	info, err := ls.Backup(context.Background(), backupDir)
	if err != nil || info.Revision < 1 {
		t.Fatalf("backup: %+v, %v", info, err)
	}
	// Another process holds it, as a running daemon would.
	r := runCLI(t, nil, "", "restore", "--data", dataDir)
	checkOneLineError(t, "restore in place of an open store", r, exitFailure, "is in use by another leasehold process")
	if !strings.Contains(r.stderr, "stop it") || !strings.Contains(r.stderr, "--data") {
		t.Errorf("restore in place of an open store: %q does not say to stop the daemon or pass another --data", r.stderr)
	}
	// So does a restore of a backup into it (not "not empty", exit 2).
	r = runCLI(t, nil, "", "restore", "--from", backupDir, "--data", dataDir)
	checkOneLineError(t, "restore --from into an open store", r, exitFailure, "data directory "+dataDir+" is in use by another leasehold process")
	// bench on it says the same (the library's line names no flag).
	r = runCLI(t, nil, "", "bench", "--data", dataDir, "--jobs", "1")
	if want := "leasehold: bench: data directory " + dataDir + " is in use by another leasehold process"; r.code != exitFailure ||
		!strings.HasPrefix(r.stderr, want) || !strings.HasSuffix(r.stderr, ": stop it, or pass another --data directory\n") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("bench on an open store: exit %d, stderr %q; want exit 1 and one line %q..., saying to stop it or pass another --data", r.code, r.stderr, want)
	}
	if err := ls.Close(); err != nil {
		t.Fatal(err)
	}

	restored := filepath.Join(t.TempDir(), "r")
	code, out, errs := runInProcess("restore", "--from", backupDir, "--data", restored, "--bump-revision", "1000")
	if want := fmt.Sprintf("restored %s into %s: revision counter raised by 1000 to %d", backupDir, restored, info.Revision+1000); code != 0 || !strings.Contains(out, want) {
		t.Errorf("restore --from: exit %d, stdout %q, stderr %q; want %q", code, out, errs, want)
	}
	code, out, errs = runInProcess("restore", "--data", restored, "--bump-revision", "5")
	if want := fmt.Sprintf("bumped %s in place: revision counter raised by 5 to %d", restored, info.Revision+1005); code != 0 || !strings.Contains(out, want) {
		t.Errorf("restore in place: exit %d, stdout %q, stderr %q; want %q", code, out, errs, want)
	}
	rs, err := localstore.Open(restored, localstore.Options{Logger: testutil.QuietLogger(t)})
	if err != nil {
		t.Fatalf("open the restored directory: %v", err)
	}
	if err := rs.Close(); err != nil {
		t.Fatal(err)
	}
}

// restore without --bump-revision raises a day-old backup by more than a
// store at full speed could have issued in that day (about 100,000
// revisions a second measured; the default 1e9 is under three hours of
// it), and says by how much; with the flag, by the flag.
func TestRestoreCLIRaisesAnOldBackupMore(t *testing.T) {
	ls, err := localstore.Open(t.TempDir(), localstore.Options{Logger: testutil.QuietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	backupDir := filepath.Join(t.TempDir(), "b")
	info, err := ls.Backup(context.Background(), backupDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Close(); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(backupDir, "leasehold-backup.json")
	info.CreatedAt = info.CreatedAt.Add(-24 * time.Hour)
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(marker, b, 0o600); err != nil {
		t.Fatal(err)
	}

	const dayAtCeiling = 100_000 * 24 * 60 * 60
	base := max(info.Revision, 1) // an empty store is at revision 1
	restored := filepath.Join(t.TempDir(), "r")
	code, out, errs := runInProcess("restore", "--from", backupDir, "--data", restored)
	var raised, rev int64
	prefix := fmt.Sprintf("restored %s into %s: ", backupDir, restored)
	if _, err := fmt.Sscanf(strings.TrimPrefix(out, prefix), "revision counter raised by %d to %d", &raised, &rev); code != 0 || err != nil ||
		raised <= dayAtCeiling || rev != base+raised {
		t.Errorf("restore of a day-old backup: exit %d, stdout %q, stderr %q; want it raised by more than %d, to the backup's revision %d plus that",
			code, out, errs, int64(dayAtCeiling), base)
	}
	restored = filepath.Join(t.TempDir(), "r")
	code, out, errs = runInProcess("restore", "--from", backupDir, "--data", restored, "--bump-revision", "1000000000")
	if want := fmt.Sprintf("raised by 1000000000 to %d", base+1_000_000_000); code != 0 || !strings.Contains(out, want) {
		t.Errorf("restore --bump-revision 1000000000: exit %d, stdout %q, stderr %q; want %q", code, out, errs, want)
	}
}
