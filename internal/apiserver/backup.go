package apiserver

// POST /v1/backup: a backup of the embedded store (a Pebble checkpoint,
// taken while the daemon serves; 'leasehold backup' asks for one). Shared
// mode backs up etcd itself.

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/leasehold/leasehold/localstore"
)

// Backuper takes backups of the daemon's store: *localstore.Store.
type Backuper interface {
	Backup(ctx context.Context, dir string) (localstore.BackupInfo, error)
}

// BackupRequest is the body of POST /v1/backup.
type BackupRequest struct {
	Dir string `json:"dir"`
}

// BackupResponse answers POST /v1/backup.
type BackupResponse struct {
	localstore.BackupInfo
	Dir string `json:"dir"`
}

// SharedBackupHint is the answer to a backup asked of shared mode, whose
// jobs live in etcd.
const SharedBackupHint = "shared mode keeps the jobs in etcd, which leasehold does not back up: back it up with 'etcdctl snapshot save FILE' and restore with 'etcdutl snapshot restore FILE --bump-revision 1000000000 --mark-compacted'"

var backupBody = bodySpec{
	limit:   64 << 10,
	fields:  "the field is " + jsonFields(BackupRequest{}),
	example: `{"dir":"/var/backups/leasehold-1"}`,
	tooBig:  "send a shorter path",
}

// backup serves POST /v1/backup.
func (a *Handler) backup(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		a.fail(w, r, err)
		return
	}
	if a.cfg.Backup == nil {
		a.fail(w, r, badRequest("%s", cmp.Or(a.cfg.NoBackup, SharedBackupHint)))
		return
	}
	var req BackupRequest
	if err := decodeBody(w, r, backupBody, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	switch {
	case req.Dir == "":
		a.fail(w, r, badRequest(`dir is missing: send %s, an absolute path on the daemon's host that does not exist yet`, backupBody.example))
		return
	case strings.ContainsRune(req.Dir, 0):
		a.fail(w, r, badRequest("dir holds a NUL byte: send a path without it"))
		return
	case !filepath.IsAbs(req.Dir):
		a.fail(w, r, badRequest("dir %q is not an absolute path: send an absolute path on the daemon's host (a relative one would name a place in the daemon's working directory)", TruncateString(req.Dir, 200)))
		return
	}
	info, err := a.cfg.Backup.Backup(r.Context(), req.Dir)
	if ctxErr := r.Context().Err(); err != nil && ctxErr != nil && !errors.Is(err, ctxErr) {
		// The client left during the backup (interrupted, or past its
		// timeout): a.fail logs nothing then, and nobody else would learn
		// that the backup failed.
		a.log.Error("backup failed after its client left", slog.String("dir", req.Dir), slog.Any("err", err))
	}
	if errors.Is(err, localstore.ErrBackup) {
		// "backup: " too: the CLI names its command itself.
		a.fail(w, r, badRequest("%s", strings.TrimPrefix(OneLine(err.Error()), "localstore: backup: ")))
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, BackupResponse{BackupInfo: info, Dir: filepath.Clean(req.Dir)})
}
