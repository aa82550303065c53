package localstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// copyTree copies the directories and regular files under from to to: what
// the disk holds if the process dies at that moment (every step of Backup
// and Restore is synced before it is taken).
func copyTree(t *testing.T, to, from string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", from, err)
	}
}

// captureCrashImages makes crashPoint copy the directory being written at
// each of its steps, and returns the copies by step.
func captureCrashImages(t *testing.T) map[string]string {
	t.Helper()
	root := t.TempDir()
	images := map[string]string{}
	var mu sync.Mutex
	crashPoint = func(dir, step string) {
		mu.Lock()
		defer mu.Unlock()
		img := filepath.Join(root, fmt.Sprintf("%02d", len(images)))
		copyTree(t, img, dir)
		images[step] = img
	}
	t.Cleanup(func() { crashPoint = func(string, string) {} })
	return images
}

// A backup or restore cut short by a crash is never opened as a data
// directory: it would hand out the fencing tokens the lost store handed
// out after the copy (an unbumped copy), or tokens from 1 (an empty one).
func TestInterruptedBackupOrRestoreIsNotOpened(t *testing.T) {
	s := openTemp(t, Options{})
	for i := range 20 {
		mustPut(t, s, fmt.Sprintf("k%02d", i), "v", 0)
	}
	backupDir := filepath.Join(t.TempDir(), "b")
	images := captureCrashImages(t)
	if _, err := s.Backup(ctxT(t), backupDir); err != nil {
		t.Fatal(err)
	}
	backupImages := len(images)
	if backupImages == 0 {
		t.Fatal("Backup passed no crash point")
	}
	restored := filepath.Join(t.TempDir(), "r")
	if _, err := Restore(restored, backupDir, 1000); err != nil {
		t.Fatal(err)
	}
	if len(images) == backupImages {
		t.Fatal("Restore passed no crash point")
	}
	for step, img := range images {
		r, err := Open(img, Options{})
		if err == nil {
			_ = r.Close()
			t.Errorf("crash at %q: the directory left opens as a data directory", step)
			continue
		}
		if !errors.Is(err, ErrBackup) {
			t.Errorf("crash at %q: Open: %v, want ErrBackup", step, err)
		}
		// Nor bumped in place as if it were a whole data directory.
		if _, err := Restore(img, "", 1000); !errors.Is(err, ErrBackup) {
			t.Errorf("crash at %q: Restore in place: %v, want ErrBackup", step, err)
		}
		// Nor is an unfinished backup restored from.
		if _, rerr := ReadBackup(img); rerr == nil {
			if _, err := Restore(filepath.Join(t.TempDir(), "again"), img, 1000); err != nil {
				t.Errorf("crash at %q: ReadBackup accepts it, but Restore from it: %v", step, err)
			}
		} else if _, err := Restore(filepath.Join(t.TempDir(), "again"), img, 1000); !errors.Is(err, ErrBackup) {
			t.Errorf("crash at %q: Restore from it: %v, want ErrBackup", step, err)
		}
	}
	// The finished ones open.
	r := openDir(t, restored, Options{})
	if mustGet(t, r, "k19") == nil {
		t.Fatal("restored store lost k19")
	}
}
