package main

// Backups of the embedded store: 'leasehold backup' asks the daemon for
// one through POST /v1/backup (package apiserver: a Pebble checkpoint,
// taken while it serves); 'leasehold restore', offline, turns one into a
// data directory with its revision counter raised (localstore.Restore, ADR
// 0020). Shared mode backs up etcd itself.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/localstore"
	"github.com/spf13/cobra"
)

// backupTimeout bounds 'leasehold backup': a backup to another filesystem
// copies the whole store rather than link it.
const backupTimeout = time.Hour

// maxRevisionBump bounds --bump-revision far below where the counter
// would overflow.
const maxRevisionBump = 1 << 60

// --- leasehold backup ---

func newBackupCmd() *cobra.Command {
	var tgt target
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "backup DIR",
		Short: "Have the daemon write a backup of its embedded store to DIR",
		Long: `Have the daemon (embedded mode) write a consistent backup of its store to DIR,
an absolute path on the daemon's host that does not exist yet, while it keeps
serving. The backup holds every job change acknowledged before the command;
its files are hard links where DIR is on the store's filesystem. A backup is
not a data directory: the daemon refuses to open one. Restore it with
'leasehold restore --from DIR --data NEWDIR', which raises its revision
counter so that fencing tokens stay above those handed out after the backup.
In shared mode, back up etcd instead ('etcdctl snapshot save').`,
		Example: `  leasehold backup /var/backups/leasehold-$(date +%F)
  leasehold backup /var/backups/leasehold-1 --server http://127.0.0.1:7420 --json`,
		Args: argsBetween(1, 1, "DIR [--server URL] [--json]"),
		RunE: action(func(cmd *cobra.Command, args []string) error { return runBackup(cmd, &tgt, args[0], asJSON) }),
	}
	addTargetFlags(cmd, &tgt)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the backup's description as JSON")
	return cmd
}

func runBackup(cmd *cobra.Command, tgt *target, dir string, asJSON bool) error {
	// The daemon writes DIR: a relative path would be resolved in its
	// working directory, not in the shell's.
	if !filepath.IsAbs(dir) {
		return usagef("DIR %q is not an absolute path: pass an absolute path on the daemon's host (the daemon writes the backup)", dir)
	}
	if tgt.etcd.shared() {
		// No daemon store to ask for: say so without dialing etcd.
		return usagef("%s", apiserver.SharedBackupHint)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), backupTimeout)
	defer cancel()
	c, err := tgt.client(ctx)
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.probe(ctx); err != nil {
		return err
	}
	var res apiserver.BackupResponse
	if err := c.call(ctx, http.MethodPost, "/v1/backup", nil, apiserver.BackupRequest{Dir: dir}, &res); err != nil {
		return err
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), res)
	}
	if _, err := fmt.Fprintf(cmd.OutOrStdout(), "backup written to %s at revision %d; restore it with: leasehold restore --from %s --data NEWDIR\n", res.Dir, res.Revision, res.Dir); err != nil {
		return failf("write output: %v", err)
	}
	return nil
}

// --- leasehold restore ---

// restoreNeeds says what restore works on, for a --data it cannot use.
const restoreNeeds = "pass a data directory put back from a snapshot (bumped in place), or --from BACKUP to restore a backup into a new directory"

type restoreOpts struct {
	data string
	from string
	bump int64
}

func newRestoreCmd() *cobra.Command {
	o := &restoreOpts{}
	cmd := &cobra.Command{
		Use:   "restore --data DIR [--from BACKUP] [--bump-revision N]",
		Short: "Make a data directory from a backup (or bump one put back from a snapshot)",
		Long: `Offline, with no daemon on DIR: make DIR a data directory to start the daemon
on in place of a lost or rolled-back store.

With --from, BACKUP (written by 'leasehold backup') is copied into DIR, which
must not exist or be empty; the backup is left as it was. Without it, DIR is
an existing data directory that went back in time (a filesystem or VM
snapshot put back, a copy of a stopped daemon's directory) and is changed
in place.

Either way the revision counter is raised: fencing tokens are revisions, and
the lost store may have handed out tokens above the copy's after the copy was
taken; every token the restored store hands out must be above them. A backup
is raised by 1,000,000,000, or by 10,000,000 for each second since it was
taken if that is more (the lost store may have run on until now); a
directory bumped in place, whose age restore cannot know, by 1,000,000,000,
under three hours of a store at full speed: pass --bump-revision of at least
10,000,000 times the seconds it ran after the snapshot. --bump-revision, when
given, is the bump. The jobs are as they were in
the copy: those that were running are re-queued when the daemon starts, and
those that finished after the copy run again. --data is read from the
command line only (not from LEASEHOLD_DATA). Directories restore cannot use
are refused before anything changes (exit 2); a daemon holding DIR, exit 1.`,
		Example: `  leasehold restore --from /var/backups/leasehold-1 --data /var/lib/leasehold-restored
  leasehold restore --data /var/lib/leasehold    # put back from a VM snapshot`,
		Args: argsBetween(0, 0, "--data DIR [--from BACKUP] [--bump-revision N]"),
		RunE: action(func(cmd *cobra.Command, _ []string) error { return runRestore(cmd, o) }),
	}
	f := cmd.Flags()
	f.StringVar(&o.data, "data", "", "data directory to make (new or empty with --from; an existing, stopped one without)")
	// Restoring over the daemon's store must be asked for by name: an
	// exported LEASEHOLD_DATA does not do it.
	noEnv(cmd, "data")
	f.StringVar(&o.from, "from", "", "backup directory written by 'leasehold backup'")
	f.Int64Var(&o.bump, "bump-revision", localstore.DefaultRevisionBump, "raise the revision counter by this much: more than the revisions the lost store may have made after the copy (a backup: by default more, the older it is)")
	return cmd
}

// checkRestoreDirs refuses, before localstore.Restore does with a vaguer
// message, a --from that does not exist and a --data with nothing to bump.
func checkRestoreDirs(o *restoreOpts) error {
	if o.from != "" {
		fi, err := os.Stat(o.from)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return usagef("--from %s does not exist: pass a backup directory written by 'leasehold backup'", o.from)
		case err == nil && !fi.IsDir():
			return usagef("--from %s is not a directory: pass a backup directory written by 'leasehold backup'", o.from)
		}
		return nil
	}
	ents, err := os.ReadDir(o.data)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return usagef("--data %s does not exist: %s", o.data, restoreNeeds)
	case err == nil && len(ents) == 0:
		return usagef("--data %s is empty: %s", o.data, restoreNeeds)
	}
	return nil
}

func runRestore(cmd *cobra.Command, o *restoreOpts) error {
	switch {
	case o.data == "":
		return usagef("--data is missing: pass the data directory to restore into (a new one with --from BACKUP; the existing, stopped one to bump in place without)")
	case o.bump < 0:
		return usagef("--bump-revision %d is negative: pass a positive number (default %d)", o.bump, int64(localstore.DefaultRevisionBump))
	case o.bump > maxRevisionBump:
		return usagef("--bump-revision %d is over %d: pass a smaller number (default %d)", o.bump, int64(maxRevisionBump), int64(localstore.DefaultRevisionBump))
	case o.bump == 0:
		// 0 would be the library's default; say what is meant instead.
		return usagef("--bump-revision 0 would leave tokens the lost store handed out reusable: pass a positive number (default %d)", int64(localstore.DefaultRevisionBump))
	}
	if err := checkRestoreDirs(o); err != nil {
		return err
	}
	bump := o.bump
	if !cmd.Flags().Changed("bump-revision") {
		bump = 0 // localstore's: more for an older backup
	}
	rev, err := localstore.Restore(o.data, o.from, bump)
	if lerr, ok := lockedf(err); ok {
		return lerr
	}
	switch {
	case errors.Is(err, localstore.ErrBackup):
		// Restore refuses directories it cannot use before it changes
		// anything: bad input (exit 2), as is a backup DIR that exists;
		// another must be passed. A daemon holding --data (ErrLocked) or
		// an I/O error is a failure (exit 1).
		return usagef("%s", strings.TrimPrefix(apiserver.OneLine(err.Error()), "localstore: backup: "))
	case err != nil:
		return failf("%s: check the directories and their permissions, then run it again into a new --data", strings.TrimPrefix(apiserver.OneLine(err.Error()), "localstore: "))
	}
	what := fmt.Sprintf("restored %s into %s", o.from, o.data)
	raised := o.bump
	if o.from == "" {
		what = "bumped " + o.data + " in place"
	} else if info, err := localstore.ReadBackup(o.from); err == nil {
		raised = rev - max(info.Revision, 1) // an empty store is at revision 1
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: revision counter raised by %d to %d\n"+
		"next: start the daemon with --data %s; jobs running in the copy are re-queued at start, and jobs that finished after it will run again\n",
		what, raised, rev, o.data)
	if err != nil {
		return failf("write output: %v", err)
	}
	return nil
}
