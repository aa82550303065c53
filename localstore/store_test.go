package localstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
)

func TestConformance(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kv.Store { return openForSuite(t) })
}

// openForSuite opens a store that the suite closes itself.
func openForSuite(t *testing.T) kv.Store {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestOpenCreatesDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	s := openDir(t, dir, Options{})
	if _, err := os.Stat(filepath.Join(dir, lockFileName)); err != nil {
		t.Fatalf("lock file: %v", err)
	}
	if s.Dir() != dir {
		t.Fatalf("Dir() = %q, want %q", s.Dir(), dir)
	}
}

// A directory that cannot be created says what to do.
func TestOpenUnderAFileSaysWhatToDo(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(filepath.Join(file, "data"), Options{})
	if err == nil || !strings.Contains(err.Error(), "not a directory: pass a directory whose parent the daemon's user can write") {
		t.Fatalf("Open under a file: %v, want a line saying what to do", err)
	}
}

func TestLockSameProcess(t *testing.T) {
	dir := t.TempDir()
	first := openDir(t, dir, Options{})
	rev := mustPut(t, first, "k", "v", 0)

	// Also through another spelling of the same path.
	for _, d := range []string{dir, dir + "/", filepath.Join(dir, "x", "..")} {
		s, err := Open(d, Options{})
		if err == nil {
			_ = s.Close()
			t.Fatalf("second Open of %q succeeded", d)
		}
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("second Open: %v, want ErrLocked", err)
		}
		checkLockedMessage(t, err.Error(), dir)
		if le := (*LockedError)(nil); !errors.As(err, &le) || !le.InProcess || le.PID != os.Getpid() {
			t.Fatalf("second Open: %+v, want a LockedError held in this process", le)
		}
	}
	// And through a symlink.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(link, Options{}); !errors.Is(err, ErrLocked) {
		if err == nil {
			_ = s.Close()
		}
		t.Fatalf("Open through a symlink: %v, want ErrLocked", err)
	} else if !strings.Contains(err.Error(), "already open in this process") {
		t.Fatalf("Open through a symlink: %v, want the in-process message", err)
	}
	// The first store is untouched: it reads, writes and keeps its lock
	// against other processes.
	if got := mustGet(t, first, "k"); got == nil || got.ModRevision != rev {
		t.Fatalf("first store lost its key: %+v", got)
	}
	mustPut(t, first, "k2", "v", 0)
	out, code := runHelper(t, "try", dir)
	if code != exitLocked {
		t.Fatalf("other process after a refused in-process Open: exit %d, want %d (locked)", code, exitLocked)
	}
	checkLockedMessage(t, out, dir)

	// After Close, the directory opens again.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again := openDir(t, dir, Options{})
	if got := mustGet(t, again, "k2"); got == nil {
		t.Fatalf("reopened store lost k2")
	}
}

// checkLockedMessage: the refusal is one line naming dir and what a
// library caller can do, not the CLI's --data flag (the CLI adds that).
func checkLockedMessage(t *testing.T, msg, dir string) {
	t.Helper()
	msg = strings.TrimSpace(msg)
	if strings.Contains(msg, "\n") || !strings.Contains(msg, dir) || !strings.HasSuffix(msg, ", or open another directory") ||
		strings.Contains(msg, "--data") {
		t.Fatalf("locked message %q: want one line naming %s and saying what to do, in the library's terms", msg, dir)
	}
}

func runHelper(t *testing.T, mode, dir string) (string, int) {
	t.Helper()
	out, err := helper(t, mode, dir).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	if err != nil {
		t.Fatalf("helper %s: %v", mode, err)
	}
	return string(out), 0
}

func TestLockOtherProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := helper(t, "hold", dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("holder: %q, %v", line, err)
	}

	s, err := Open(dir, Options{})
	if err == nil {
		_ = s.Close()
		t.Fatalf("Open of a directory held by pid %d succeeded", cmd.Process.Pid)
	}
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Open: %v, want ErrLocked", err)
	}
	checkLockedMessage(t, err.Error(), dir)
	if !strings.Contains(err.Error(), fmt.Sprintf("pid %d", cmd.Process.Pid)) {
		t.Errorf("message %q does not name the holder's pid %d", err, cmd.Process.Pid)
	}
	// A program that says what to do in its own terms (the daemon names
	// its --data flag) gets the directory and the holder.
	var le *LockedError
	if !errors.As(err, &le) || le.Dir != dir || le.PID != cmd.Process.Pid || le.InProcess ||
		le.Holder() != fmt.Sprintf("data directory %s is in use by another leasehold process (pid %d)", dir, cmd.Process.Pid) {
		t.Errorf("errors.As(%v): %+v, want the directory and the holder", err, le)
	}

	// The holder is untouched by the refusal: it closes cleanly.
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	openDir(t, dir, Options{}) // free again
}

func TestRevisionPersistsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, Options{})
	var last int64
	for i := range 5 {
		last = mustPut(t, s, "k", strconv.Itoa(i), 0)
	}
	mustTxn(t, s, kv.Txn{Then: []kv.Op{kv.Delete("k")}})
	last++
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir, Options{})
	if s.StartRevision() != last {
		t.Fatalf("revision after reopen %d, want %d", s.StartRevision(), last)
	}
	if rev := mustPut(t, s, "k", "again", 0); rev != last+1 {
		t.Fatalf("first write after reopen at revision %d, want %d", rev, last+1)
	}
	if got := mustGet(t, s, "k"); got.CreateRevision != last+1 || got.Version != 1 {
		t.Fatalf("re-created key: %+v", got)
	}
}

func TestLeasedKeysDeletedAtOpen(t *testing.T) {
	dir := t.TempDir()
	s := openDir(t, dir, Options{})
	ctx := ctxT(t)
	a, err := s.Grant(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Grant(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mustTxn(t, s, kv.Txn{Then: []kv.Op{
		kv.Put("job/1/owner", []byte("w"), a),
		kv.Put("job/2/owner", []byte("w"), a),
		kv.Put("job/3/owner", []byte("w"), b),
		kv.Put("job/4/owner", []byte("w"), b),
		kv.Put("job/1", []byte("running"), 0),
	}})
	mustPut(t, s, "job/4/owner", "detached", 0) // no longer leased
	mustTxn(t, s, kv.Txn{Then: []kv.Op{kv.Delete("job/2/owner")}})
	before := mustPut(t, s, "other", "x", 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openDir(t, dir, Options{})
	if n := s.RecoveredLeasedKeys(); n != 2 {
		t.Fatalf("RecoveredLeasedKeys = %d, want 2 (job/1/owner, job/3/owner)", n)
	}
	if s.StartRevision() != before+1 {
		t.Fatalf("recovery at revision %d, want one new revision %d", s.StartRevision(), before+1)
	}
	res, err := s.Range(ctx, kv.Prefix("job/", 0))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range res.KVs {
		keys = append(keys, kv.Key)
	}
	if strings.Join(keys, ",") != "job/1,job/4/owner" {
		t.Fatalf("keys after recovery: %v, want job/1 and job/4/owner", keys)
	}
	// The previous process's leases are gone, and no id is reused.
	if _, err := s.KeepAliveOnce(ctx, a); !errors.Is(err, kv.ErrLeaseNotFound) {
		t.Fatalf("KeepAliveOnce of an old lease: %v", err)
	}
	c, err := s.Grant(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c == a || c == b {
		t.Fatalf("lease id %d reused", c)
	}
	// A second reopen has nothing left to delete and writes nothing.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openDir(t, dir, Options{})
	if s.RecoveredLeasedKeys() != 0 || s.StartRevision() != before+1 {
		t.Fatalf("second reopen: recovered %d at revision %d", s.RecoveredLeasedKeys(), s.StartRevision())
	}
}

// TestKill9 kills a writer mid-stream and checks that every transaction it
// acknowledged survived, and that its leased keys are gone.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	cmd := helper(t, "write", dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[int]int64{}
	sc := bufio.NewScanner(stdout)
	const killAfter = 300
	killed := false
	lastRev := int64(0)
	for sc.Scan() {
		var i int
		var rev int64
		if _, err := fmt.Sscanf(sc.Text(), "%d %d", &i, &rev); err != nil {
			t.Fatalf("writer said %q", sc.Text())
		}
		acked[i] = rev
		lastRev = max(lastRev, rev)
		if len(acked) == killAfter && !killed {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
		// Lines already in the pipe when the kill lands were acknowledged
		// too: keep reading them.
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("writer ended before it was killed: %v", err)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("writer did not die of SIGKILL: %v", err)
	}

	s := openDir(t, dir, Options{})
	for i, rev := range acked {
		got := mustGet(t, s, "w/"+strconv.Itoa(i))
		if got == nil || string(got.Value) != strconv.Itoa(i) || got.ModRevision != rev {
			t.Fatalf("acknowledged write %d at revision %d: read back %+v", i, rev, got)
		}
	}
	if s.StartRevision() <= lastRev {
		t.Fatalf("revision after restart %d, not above the last acknowledged %d", s.StartRevision(), lastRev)
	}
	if n := s.RecoveredLeasedKeys(); n < len(acked) {
		t.Fatalf("recovery deleted %d leased keys, want at least the %d acknowledged", n, len(acked))
	}
	res, err := s.Range(ctxT(t), kv.Prefix("owner/", 0))
	if err != nil || len(res.KVs) != 0 {
		t.Fatalf("leased keys left after restart: %d, %v", len(res.KVs), err)
	}
	t.Logf("%d writes acknowledged before the kill landed; recovery deleted %d leased keys", len(acked), s.RecoveredLeasedKeys())
}

func TestCloseIdempotentAndEndsWatches(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var chans []<-chan kv.WatchResponse
	for range 10 {
		chans = append(chans, s.Watch(ctx, "", 0))
	}
	for range 5 {
		mustPut(t, s, "k", "v", 0)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for i, ch := range chans {
		var last kv.WatchResponse
		n := 0
		for resp := range ch { // Close waited for the watchers: the channels are closed
			last = resp
			n += len(resp.Events)
		}
		if n > 5 || (last.Err != nil && !errors.Is(last.Err, kv.ErrClosed)) {
			t.Fatalf("watch %d: %d events, last error %v", i, n, last.Err)
		}
	}
}

func TestCloseWaitsForTxns(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				_, err := s.Txn(context.Background(), kv.Txn{Then: []kv.Op{kv.Put(fmt.Sprintf("%d/%d", w, i), nil, 0)}})
				if errors.Is(err, kv.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("Txn: %v", err)
					return
				}
			}
		})
	}
	mustPut(t, s, "go", "", 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// TestKeepAliveOnceDoesNotWaitForWrites: a renewal answers while the
// store's mutex is held (by a large transaction or a Pebble write stall,
// say); waiting there past the session's deadline would fence a healthy
// worker.
func TestKeepAliveOnceDoesNotWaitForWrites(t *testing.T) {
	s := openTemp(t, Options{})
	ctx := context.Background()
	id, err := s.Grant(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	type renewal struct {
		ttl time.Duration
		err error
	}
	got := make(chan renewal, 1)
	s.mu.Lock()
	go func() {
		ttl, err := s.KeepAliveOnce(ctx, id)
		got <- renewal{ttl, err}
	}()
	select {
	case r := <-got:
		s.mu.Unlock()
		if r.err != nil || r.ttl != 5*time.Second {
			t.Fatalf("renewal while the store's mutex is held: %v, %v", r.ttl, r.err)
		}
	case <-time.After(5 * time.Second):
		s.mu.Unlock()
		<-got
		t.Fatal("renewal waited for the store's mutex")
	}
	if err := s.Revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeepAliveOnce(ctx, id); !errors.Is(err, kv.ErrLeaseNotFound) {
		t.Fatalf("renewal after revoke: %v, want ErrLeaseNotFound", err)
	}
}

// TestPebbleFatalEndsProcess: Pebble calls Fatalf on errors it cannot go on
// from, some in the goroutine of a store call (corruption found by a read, a
// broken commit pipeline, the latter under the store's mutex). A panic there
// can be recovered by a caller (net/http recovers every request's, the
// worker a handler's), leaving the process alive with the store's mutex and
// Pebble's locks held and its lease still renewed. The process must end.
func TestPebbleFatalEndsProcess(t *testing.T) {
	cmd := helper(t, "fatal", t.TempDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || strings.Contains(string(out), "survived") {
		t.Fatalf("after Pebble's fatal error the process lived on (%v; stdout %q)", err, out)
	}
	if !strings.Contains(stderr.String(), "injected fatal error 7") {
		t.Fatalf("the fatal error was not logged: %q", stderr.String())
	}
}
