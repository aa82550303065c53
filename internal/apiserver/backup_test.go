package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apicall"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/localstore"
)

// backupAPI is the API of an embedded daemon in this process (no worker)
// with an API token, and its store's directory.
func backupAPI(t *testing.T, b func(*localstore.Store) Backuper) (http.Handler, string) {
	t.Helper()
	log := testutil.QuietLogger(t)
	ls := testutil.TempLocal(t, log)
	coord, err := coordinator.New(ls, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := coord.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "echo"}); err != nil {
		t.Fatal(err)
	}
	return New(Config{Coord: coord, Logger: log, Auth: AuthConfig{Token: "s3cret"}, Backup: b(ls)}), ls.Dir()
}

// POST /v1/backup writes a backup of the daemon's store, guarded like every
// change, and refuses bad input with 400 saying what to do.
func TestBackupAPI(t *testing.T) {
	h, dataDir := backupAPI(t, func(ls *localstore.Store) Backuper { return ls })
	auth := []string{"Authorization", "Bearer s3cret"}
	dir := filepath.Join(t.TempDir(), "b")
	body := `{"dir":"` + dir + `"}`

	// Without the token, or cross-origin: refused, and nothing written.
	if code, b := testutil.APICall(t, h, "POST", "/v1/backup", body); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d %s, want 401", code, b)
	}
	if code, b := testutil.APICall(t, h, "POST", "/v1/backup", body, append(auth, "Sec-Fetch-Site", "cross-site")...); code != http.StatusForbidden {
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
		code, b := testutil.APICall(t, h, "POST", "/v1/backup", c.body, auth...)
		msg, _ := apicall.ErrorMessage(b)
		if code != http.StatusBadRequest || !strings.Contains(msg, c.want) || strings.Contains(msg, "localstore:") {
			t.Errorf("%s: %d %q, want 400 saying %q", c.name, code, msg, c.want)
		}
	}
	if code, b := testutil.APICall(t, h, "POST", "/v1/backup?force=1", body, auth...); code != http.StatusBadRequest {
		t.Errorf("query parameter: %d %s, want 400", code, b)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused backup request wrote %s (%v)", dir, err)
	}

	code, b := testutil.APICall(t, h, "POST", "/v1/backup", body, auth...)
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
	var res BackupResponse
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	got, err := localstore.ReadBackup(dir)
	if err != nil || res.Dir != dir || res.Source != dataDir || got.Revision != res.Revision || res.Revision < 1 {
		t.Errorf("backup answer %+v; on disk %+v, %v", res, got, err)
	}
}

type failingBackuper struct{}

func (failingBackuper) Backup(context.Context, string) (localstore.BackupInfo, error) {
	return localstore.BackupInfo{}, errors.New("localstore: backup to /x: no space left on device")
}

// A backup that fails for another reason than its directory is the
// daemon's failure: 500, logged.
func TestBackupAPIFailure(t *testing.T) {
	h, _ := backupAPI(t, func(*localstore.Store) Backuper { return failingBackuper{} })
	code, b := testutil.APICall(t, h, "POST", "/v1/backup", `{"dir":"/x"}`, "Authorization", "Bearer s3cret")
	if msg, _ := apicall.ErrorMessage(b); code != http.StatusInternalServerError || !strings.Contains(msg, "no space left") {
		t.Errorf("failed backup: %d %q, want 500 naming the cause", code, msg)
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
	log := testutil.QuietLogger(t)
	coord, err := coordinator.New(testutil.TempLocal(t, log), coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var logged testutil.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := New(Config{Coord: coord, Logger: slog.New(slog.NewTextHandler(&logged, nil)), Backup: cancellingBackuper{cancel}})
	req := httptest.NewRequestWithContext(ctx, "POST", "http://127.0.0.1:7420/v1/backup", strings.NewReader(`{"dir":"/x"}`))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if !strings.Contains(logged.String(), "no space left on device") {
		t.Errorf("a backup that failed after its client left: answered %d, logged %q; want the cause logged", rec.Code, logged.String())
	}
}
