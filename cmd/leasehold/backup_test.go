package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/internal/apicall"
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
	var res batchResponse
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

	var info backupResponse
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
	if !strings.Contains(d2.log.String(), "re-queued 1 jobs left running") {
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

// backupAPI is the API of an embedded daemon in this process (no worker)
// with an API token, and its store's directory.
func backupAPI(t *testing.T, b func(*localstore.Store) backuper) (http.Handler, string) {
	t.Helper()
	log := quietLogger(t)
	ls := tempLocal(t, log)
	coord, err := coordinator.New(ls, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "echo"}); err != nil {
		t.Fatal(err)
	}
	return newAPI(apiConfig{Coord: coord, Logger: log, Auth: authConfig{Token: "s3cret"}, Backup: b(ls)}), ls.Dir()
}

// apiCall sends one request to h and returns the status and the body.
func apiCall(t *testing.T, h http.Handler, method, path, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, "http://127.0.0.1:7420"+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, err := io.ReadAll(rec.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Code, b
}

// POST /v1/backup writes a backup of the daemon's store, guarded like every
// change, and refuses bad input with 400 saying what to do.
func TestBackupAPI(t *testing.T) {
	h, dataDir := backupAPI(t, func(ls *localstore.Store) backuper { return ls })
	auth := []string{"Authorization", "Bearer s3cret"}
	dir := filepath.Join(t.TempDir(), "b")
	body := `{"dir":"` + dir + `"}`

	// Without the token, or cross-origin: refused, and nothing written.
	if code, b := apiCall(t, h, "POST", "/v1/backup", body); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d %s, want 401", code, b)
	}
	if code, b := apiCall(t, h, "POST", "/v1/backup", body, append(auth, "Sec-Fetch-Site", "cross-site")...); code != http.StatusForbidden {
		t.Errorf("cross-origin: %d %s, want 403", code, b)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused backup request wrote %s (%v)", dir, err)
	}

	for _, c := range []struct{ name, body, want string }{
		{"empty", `{}`, "dir is missing: send"},
		{"relative", `{"dir":"backups/b"}`, "not an absolute path: send an absolute path on the daemon's host"},
		{"unknown field", `{"dir":"` + dir + `","force":true}`, `unknown field "force": the field is dir`},
		{"NUL", `{"dir":"/tmp/a\u0000b"}`, "NUL byte"},
		{"not an object", `"` + dir + `"`, "send a JSON object such as"},
		{"inside the data directory", `{"dir":"` + filepath.Join(dataDir, "b") + `"}`, "overlaps the data directory"},
		{"exists", `{"dir":"` + t.TempDir() + `"}`, "pass a directory that does not exist yet"},
	} {
		code, b := apiCall(t, h, "POST", "/v1/backup", c.body, auth...)
		msg, _ := apicall.ErrorMessage(b)
		if code != http.StatusBadRequest || !strings.Contains(msg, c.want) || strings.Contains(msg, "localstore:") {
			t.Errorf("%s: %d %q, want 400 saying %q", c.name, code, msg, c.want)
		}
	}
	if code, b := apiCall(t, h, "POST", "/v1/backup?force=1", body, auth...); code != http.StatusBadRequest {
		t.Errorf("query parameter: %d %s, want 400", code, b)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused backup request wrote %s (%v)", dir, err)
	}

	code, b := apiCall(t, h, "POST", "/v1/backup", body, auth...)
	if code != http.StatusOK {
		t.Fatalf("backup: %d %s, want 200", code, b)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"revision", "created_at", "source", "dir"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("backup answer %s lacks %q", b, f)
		}
	}
	var res backupResponse
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	got, err := localstore.ReadBackup(dir)
	if err != nil || res.Dir != dir || res.Source != dataDir || got.Revision != res.Revision || res.Revision < 1 {
		t.Errorf("backup answer %+v; on disk %+v, %v", res, got, err)
	}
}

// leasehold backup sends the daemon's token, and prints where the backup
// is and its revision; without the token it is refused.
func TestBackupCLI(t *testing.T) {
	h, _ := backupAPI(t, func(ls *localstore.Store) backuper { return ls })
	srv := httptest.NewServer(h)
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

type failingBackuper struct{}

func (failingBackuper) Backup(context.Context, string) (localstore.BackupInfo, error) {
	return localstore.BackupInfo{}, errors.New("localstore: backup to /x: no space left on device")
}

// A backup that fails for another reason than its directory is the
// daemon's failure: 500, logged.
func TestBackupAPIFailure(t *testing.T) {
	h, _ := backupAPI(t, func(*localstore.Store) backuper { return failingBackuper{} })
	code, b := apiCall(t, h, "POST", "/v1/backup", `{"dir":"/x"}`, "Authorization", "Bearer s3cret")
	if msg, _ := apicall.ErrorMessage(b); code != http.StatusInternalServerError || !strings.Contains(msg, "no space left") {
		t.Errorf("failed backup: %d %q, want 500 naming the cause", code, msg)
	}
}

// Shared mode, the daemon's API or the CLI's in-process one, has no store
// of its own to back up: POST /v1/backup says how to back up etcd.
func TestBackupAPISharedRefused(t *testing.T) {
	log := quietLogger(t)
	coord, err := coordinator.New(tempLocal(t, log), coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "b")
	for name, h := range map[string]http.Handler{
		"daemon": newAPI(apiConfig{Coord: coord, Shared: true, Logger: log, Auth: authConfig{Token: "s3cret"}}),
		"cli":    newCLIAPI(coord),
	} {
		hdr := []string{"Authorization", "Bearer s3cret"}
		code, b := apiCall(t, h, "POST", "/v1/backup", `{"dir":"`+dir+`"}`, hdr...)
		msg, _ := apicall.ErrorMessage(b)
		if code != http.StatusBadRequest || !strings.Contains(msg, "etcdctl snapshot save") ||
			!strings.Contains(msg, "etcdutl snapshot restore FILE --bump-revision 1000000000 --mark-compacted") {
			t.Errorf("%s: %d %q, want 400 saying to use etcdctl and etcdutl", name, code, msg)
		}
	}
	// Still a change: the token is checked first.
	h := newAPI(apiConfig{Coord: coord, Shared: true, Logger: log, Auth: authConfig{Token: "s3cret"}})
	if code, b := apiCall(t, h, "POST", "/v1/backup", `{"dir":"`+dir+`"}`); code != http.StatusUnauthorized {
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
	ls, err := localstore.Open(dataDir, localstore.Options{Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	coord, err := coordinator.New(ls, coordinator.Config{Logger: quietLogger(t)})
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
	if !strings.Contains(r.stderr, "stop it") {
		t.Errorf("restore in place of an open store: %q does not say to stop the daemon", r.stderr)
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
	rs, err := localstore.Open(restored, localstore.Options{Logger: quietLogger(t)})
	if err != nil {
		t.Fatalf("open the restored directory: %v", err)
	}
	if err := rs.Close(); err != nil {
		t.Fatal(err)
	}
}

// cancellingBackuper fails as a backup would after its client went away
// mid-way (the request's context is cancelled by then).
type cancellingBackuper struct{ cancel context.CancelFunc }

func (b cancellingBackuper) Backup(context.Context, string) (localstore.BackupInfo, error) {
	b.cancel()
	return localstore.BackupInfo{}, errors.New("localstore: backup to /x: no space left on device")
}

// A backup that fails after its client disconnected (a CLI interrupted, or
// past its timeout) still leaves a trace in the daemon's log: nobody else
// learns that it failed.
func TestBackupAPIFailureAfterClientLeftIsLogged(t *testing.T) {
	log := quietLogger(t)
	coord, err := coordinator.New(tempLocal(t, log), coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var logged syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newAPI(apiConfig{Coord: coord, Logger: slog.New(slog.NewTextHandler(&logged, nil)), Backup: cancellingBackuper{cancel}})
	req := httptest.NewRequestWithContext(ctx, "POST", "http://127.0.0.1:7420/v1/backup", strings.NewReader(`{"dir":"/x"}`))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if !strings.Contains(logged.String(), "no space left on device") {
		t.Errorf("a backup that failed after its client left: answered %d, logged %q; want the cause logged", rec.Code, logged.String())
	}
}
