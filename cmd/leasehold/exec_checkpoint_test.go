package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/coordinator/kv/kvtest"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/worker"
)

// checkpointEnv is a worker running the --exec kind "t" on a local store,
// with retries due at once.
type checkpointEnv struct {
	coord *coordinator.Coordinator
	store kv.Store
}

// newCheckpointEnv runs command as kind "t". maxRequest, if positive, is
// the store's request limit; maxLine the command's checkpoint line limit
// (0: the default).
func newCheckpointEnv(t *testing.T, command string, maxRequest, maxLine int) *checkpointEnv {
	t.Helper()
	log := testutil.QuietLogger(t)
	var store kv.Store = testutil.TempLocal(t, log)
	if maxRequest > 0 {
		store = &kvtest.Limit{Store: store, MaxBytes: maxRequest}
	}
	coord, err := coordinator.New(store, coordinator.Config{Logger: log, RetryPolicy: func(int, *coordinator.Job) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := parseExec("t=" + command)
	if err != nil {
		t.Fatal(err)
	}
	spec.maxCheckpoint = maxLine
	w, err := worker.New(coord, worker.Config{Concurrency: 2, Logger: log, Maintain: true, LeaseTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("t", execHandler(spec, log))
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the store is closed
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("worker stop: %v", err)
		}
	})
	return &checkpointEnv{coord: coord, store: store}
}

func (e *checkpointEnv) enqueue(t *testing.T) string {
	t.Helper()
	res, err := e.coord.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "t", MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	return res.Job.ID
}

// wait returns job id once it is finished.
func (e *checkpointEnv) wait(t *testing.T, id string) *coordinator.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	j, err := e.coord.Wait(ctx, id)
	if err != nil {
		t.Fatalf("job %s did not finish: %v", id, err)
	}
	return j
}

// A command that records checkpoints and then fails, or is killed,
// resumes on its next run from the last one: it reads it from the file
// named by LEASEHOLD_CHECKPOINT_FILE, unset on the first run (even when
// the daemon's own environment has it), readable by the daemon's user
// only and removed once the run is over.
func TestExecCheckpointResumes(t *testing.T) {
	t.Setenv(envCheckpointFile, "/inherited/by/the/daemon")
	t.Setenv(envCheckpointFD, "9")
	for name, end := range map[string]string{
		"failed": `echo 'failing after step 2' >&2; exit 1`,
		"killed": `kill -KILL $$`,
	} {
		t.Run(name, func(t *testing.T) {
			seen := filepath.Join(t.TempDir(), "seen")
			// The first run checkpoints steps 1 and 2, each once told
			// ok, then ends; the second reports what it resumed from.
			command := fmt.Sprintf(`
if [ -z "${LEASEHOLD_CHECKPOINT_FILE+set}" ]; then
	[ "$LEASEHOLD_ATTEMPT" = 1 ] || { echo "attempt $LEASEHOLD_ATTEMPT has no checkpoint" >&2; exit 9; }
	[ "$LEASEHOLD_CHECKPOINT_FD" = 4 ] || { echo "LEASEHOLD_CHECKPOINT_FD=$LEASEHOLD_CHECKPOINT_FD" >&2; exit 9; }
	for step in 1 2; do
		echo "{\"step\":$step}" >&4
		read -r ack <&4
		[ "$ack" = ok ] || { echo "step $step: $ack" >&2; exit 9; }
	done
	%s
fi
echo "$LEASEHOLD_CHECKPOINT_FILE" >%s
printf '{"attempt":%%s,"from":%%s,"mode":"%%s"}' "$LEASEHOLD_ATTEMPT" "$(cat "$LEASEHOLD_CHECKPOINT_FILE")" "$(stat -c %%a "$LEASEHOLD_CHECKPOINT_FILE")"
`, end, seen)
			e := newCheckpointEnv(t, command, 0, 0)
			j := e.wait(t, e.enqueue(t))
			if j.State != coordinator.StateCompleted {
				t.Fatalf("job %s, errors %v; want completed on attempt 2", j.State, j.Errors)
			}
			if want := `{"attempt":2,"from":{"step":2},"mode":"600"}`; string(j.Result) != want {
				t.Errorf("second run's result %s, want %s", j.Result, want)
			}
			if len(j.Errors) != 1 {
				t.Errorf("errors %v, want the first run's only", j.Errors)
			}
			b, err := os.ReadFile(seen)
			if err != nil {
				t.Fatal(err)
			}
			if path := strings.TrimSpace(string(b)); path == "" {
				t.Error("the second run had an empty LEASEHOLD_CHECKPOINT_FILE")
			} else if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("the checkpoint file %s is left after the run: %v", path, err)
			}
		})
	}
}

// A checkpoint written by a run that no longer holds its job (another run
// took it over: the token of the job's ownership key changed) is refused
// with "error: lost: ...", and nothing is recorded: the same fence as
// worker.Job.Checkpoint.
func TestExecCheckpointOfLostRunRefused(t *testing.T) {
	dir := t.TempDir()
	ready, goOn, acks := filepath.Join(dir, "ready"), filepath.Join(dir, "go"), filepath.Join(dir, "acks")
	for _, p := range []string{ready, goOn, acks} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	command := fmt.Sprintf(`
echo '{"step":1}' >&4; read -r ack <&4; echo "$ack" >%s
read -r _ <%s
echo '{"step":2}' >&4; read -r ack <&4; echo "$ack" >%s
case $ack in "error: lost:"*) exit 75;; esac
echo '{"step":3}' >&4; read -r ack <&4`, ready, goOn, acks)
	e := newCheckpointEnv(t, command, 0, 0)
	id := e.enqueue(t)
	if ack := readFIFOLine(t, ready); ack != "ok" {
		t.Fatalf("first checkpoint: %q, want ok", ack)
	}
	// Another run takes the job over: its ownership key is created anew,
	// so its creation revision (the fencing token) is no longer this
	// run's. The worker's session stays valid: only the store's fence
	// can refuse.
	owner := "/leasehold/default/o/" + id
	ctx := context.Background()
	if _, err := e.store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Delete(owner)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put(owner, []byte("another run"), 0)}}); err != nil {
		t.Fatal(err)
	}
	writeFIFOLine(t, goOn, "go")
	if ack := readFIFOLine(t, acks); !strings.HasPrefix(ack, "error: lost: ") {
		t.Errorf("checkpoint of a lost run: %q, want \"error: lost: ...\"", ack)
	}
	j, err := e.coord.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if string(j.Checkpoint) != `{"step":1}` {
		t.Errorf("checkpoint recorded: %s, want the run's last accepted one, {\"step\":1}", j.Checkpoint)
	}
}

// Lines that are not one JSON value, and values over the line limit or
// over what the store takes, are answered "error: invalid: ..." and
// record nothing; the command goes on and its next checkpoint is recorded.
func TestExecCheckpointInvalidRefused(t *testing.T) {
	const maxRequest, maxLine = 512 << 10, 300 << 10
	command := `
put() { printf '%s\n' "$1" >&4; read -r ack <&4; echo "$ack"; }
big() { printf '"%s"' "$(head -c "$1" /dev/zero | tr '\0' a)"; }
put '{"step":1}'
put 'not json'
put '{"a":1} {"b":2}'
put ''
put "$(big 400000)"
put "$(big 280000)"
put '{"step":2'
`
	e := newCheckpointEnv(t, command, maxRequest, maxLine)
	j := e.wait(t, e.enqueue(t))
	if j.State != coordinator.StateCompleted {
		t.Fatalf("job %s, errors %v; want completed", j.State, j.Errors)
	}
	var out string
	if err := json.Unmarshal(j.Result, &out); err != nil {
		t.Fatalf("result %s: %v", j.Result, err)
	}
	acks := strings.Split(out, "\n")
	want := []string{
		"ok",
		"error: invalid: not JSON",
		"error: invalid: not JSON",
		"error: invalid: empty line",
		fmt.Sprintf("error: invalid: checkpoint over %d bytes", maxLine),
		"error: invalid: checkpoint of job " + j.ID + ": its record would be",
		"error: invalid: not JSON",
	}
	if len(acks) != len(want) {
		t.Fatalf("replies %q, want %d", acks, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(acks[i], w) {
			t.Errorf("reply %d: %q, want %q...", i, acks[i], w)
		}
	}
	if string(j.Checkpoint) != `{"step":1}` {
		t.Errorf("checkpoint recorded: %.80s, want {\"step\":1} (nothing from the refused lines)", j.Checkpoint)
	}
}

// A command that never touches its checkpoint descriptor, or closes it,
// runs as before: it gets fd 4 (a socket), not fd 3 (the gate).
func TestExecCheckpointUnused(t *testing.T) {
	for name, command := range map[string]string{
		"untouched": `[ -S /proc/$$/fd/4 ] || [ "$(readlink /proc/$$/fd/4 | cut -c1-7)" = socket: ] || exit 7; [ -e /proc/$$/fd/3 ] && exit 8; cat >/dev/null; echo '{"done":true}'`,
		"closed":    `exec 4>&-; cat >/dev/null; echo '{"done":true}'`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newCheckpointEnv(t, command, 0, 0)
			j := e.wait(t, e.enqueue(t))
			if j.State != coordinator.StateCompleted || string(j.Result) != `{"done":true}` {
				t.Errorf("job %s result %s errors %v, want completed with {\"done\":true}", j.State, j.Result, j.Errors)
			}
			if cp := string(j.Checkpoint); cp != "" && cp != "null" {
				t.Errorf("checkpoint %s, want none", cp)
			}
		})
	}
}

// A process that leaves the command's group (setsid) keeping the
// checkpoint descriptor does not hold the job once the command exited:
// checkpoints end with the command's shell, not at the socket's EOF.
func TestExecCheckpointSocketHeldByEscapedProcess(t *testing.T) {
	l := newLifeLine(t)
	spec, err := parseExec(fmt.Sprintf(`t=exec 3>%s; setsid sh -c 'echo $$ >%s; echo >&3; exec sleep 1000' >/dev/null 2>&1 </dev/null & while [ ! -s %s ]; do sleep 0.01; done; echo '{"ok":true}'`, l.path, l.pidFile, l.pidFile))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- execHandler(spec, testutil.QuietLogger(t))(context.Background(), execJob(`{}`)) }()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("command exited 0: %v, want success", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the job waits for a process outside the command's group that holds the checkpoint descriptor")
	}
	<-l.started
}

// readFIFOLine reads one line from the FIFO at path, which a command
// opens to write it.
func readFIFOLine(t *testing.T, path string) string {
	t.Helper()
	type res struct {
		line string
		err  error
	}
	c := make(chan res, 1)
	go func() {
		f, err := os.Open(path)
		if err != nil {
			c <- res{err: err}
			return
		}
		defer f.Close()
		line, err := bufio.NewReader(f).ReadString('\n')
		c <- res{strings.TrimSuffix(line, "\n"), err}
	}()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("reading %s: %v", filepath.Base(path), r.err)
		}
		return r.line
	case <-time.After(30 * time.Second):
		// Unblock the reader: open the FIFO for writing ourselves.
		if f, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
			_ = f.Close()
		}
		<-c
		t.Fatalf("the command never wrote to %s", filepath.Base(path))
		return ""
	}
}

// writeFIFOLine writes a line to the FIFO at path, which a command opens
// to read it.
func writeFIFOLine(t *testing.T, path, line string) {
	t.Helper()
	c := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			c <- err
			return
		}
		_, err = f.WriteString(line + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		c <- err
	}()
	select {
	case err := <-c:
		if err != nil {
			t.Fatalf("writing %s: %v", filepath.Base(path), err)
		}
	case <-time.After(30 * time.Second):
		if f, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
			_ = f.Close()
		}
		<-c
		t.Fatalf("the command never read %s", filepath.Base(path))
	}
}

// A command stopped by a cancel (SIGTERM) may record its progress before
// it exits: the write is not bound to the job's context, only to the
// run's fence, which still holds.
func TestExecCheckpointOnCancel(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	if err := syscall.Mkfifo(ready, 0o600); err != nil {
		t.Fatal(err)
	}
	command := fmt.Sprintf(`
trap 'echo "{\"stopped_at\":2}" >&4; read -r ack <&4; echo "$ack" >&2; exit 3' TERM
echo '{"step":1}' >&4; read -r ack <&4
sleep 1000 & echo "$ack" >%s; wait`, ready)
	e := newCheckpointEnv(t, command, 0, 0)
	id := e.enqueue(t)
	if ack := readFIFOLine(t, ready); ack != "ok" {
		t.Fatalf("first checkpoint: %q, want ok", ack)
	}
	if _, err := e.coord.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	j := e.wait(t, id)
	if j.State != coordinator.StateCancelled {
		t.Errorf("job %s, want cancelled", j.State)
	}
	if string(j.Checkpoint) != `{"stopped_at":2}` {
		t.Errorf("checkpoint %s, want the one the TERM trap wrote, {\"stopped_at\":2}; errors %v", j.Checkpoint, j.Errors)
	}
}

// End to end: a daemon killed (SIGKILL) while its command runs; the
// command, stopped by the exec guard, had recorded a checkpoint, and the
// restarted daemon's run of the job resumes from it.
func TestExecCheckpointResumesAfterDaemonKilled(t *testing.T) {
	l := newLifeLine(t)
	command := fmt.Sprintf(`t=if [ -n "${LEASEHOLD_CHECKPOINT_FILE:-}" ]; then printf '{"resumed":%%s}' "$(cat "$LEASEHOLD_CHECKPOINT_FILE")"; exit 0; fi
[ "$LEASEHOLD_ATTEMPT" = 1 ] || { echo "attempt $LEASEHOLD_ATTEMPT has no checkpoint" >&2; exit 9; }
echo '{"step":7}' >&4; read -r ack <&4; [ "$ack" = ok ] || exit 9
exec 3>%s; echo >&3; sleep 1000 & echo $! >%s; wait`, l.path, l.pidFile)
	data := t.TempDir()
	args := []string{"daemon", "--data", data, "--listen", "127.0.0.1:0", "--log-format", "json", "--exec", command}
	p := spStart(t, "daemon", binPath, args...)
	ln, _ := p.waitLog(t, 0, "listening", func(l spLine) bool { return l.Msg == "listening" })
	code, body := postBody(t, "http://"+ln.str("addr")+"/v1/jobs", `{"kind":"t"}`)
	if code != http.StatusCreated {
		t.Fatalf("enqueue: %d %s", code, body)
	}
	var created struct{ Job struct{ ID string } }
	if err := json.Unmarshal([]byte(body), &created); err != nil || created.Job.ID == "" {
		t.Fatalf("enqueue: %s: %v", body, err)
	}
	<-l.started // checkpointed: the command goes on only once told ok
	p.signal(t, syscall.SIGKILL)
	<-p.done
	l.waitGone(t, "daemon killed by SIGKILL")

	p2 := spStart(t, "daemon", binPath, args...)
	ln2, _ := p2.waitLog(t, 0, "listening", func(l spLine) bool { return l.Msg == "listening" })
	var got struct {
		Job struct {
			State  string
			Result json.RawMessage
		}
	}
	j := &got.Job
	// A command that started over would checkpoint again and run on: the
	// job is running still, long after a resumed one would have ended.
	for deadline := time.Now().Add(time.Minute); j.State != "completed"; {
		if time.Now().After(deadline) {
			t.Fatalf("job %s a minute after the restart: the command did not resume from its checkpoint", j.State)
		}
		resp, err := http.Get("http://" + ln2.str("addr") + "/v1/jobs/" + created.Job.ID + "?wait=30s")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if j.State != "running" && j.State != "available" && j.State != "completed" {
			t.Fatalf("job %s after the restart, want completed", j.State)
		}
	}
	if string(j.Result) != `{"resumed":{"step":7}}` {
		t.Errorf("result %s, want {\"resumed\":{\"step\":7}}", j.Result)
	}
}

// The file that gives a command its job's last checkpoint does not outlive
// a daemon killed while the command runs: it is in a directory of the
// daemon's that its exec guard removes as it exits (before, it stayed in
// TMPDIR). A first daemon records a checkpoint and is killed; the second
// gives the resumed command the file, and is killed in turn.
func TestExecCheckpointFileGoesWithKilledDaemon(t *testing.T) {
	l := newLifeLine(t)
	paths := filepath.Join(t.TempDir(), "paths")
	command := fmt.Sprintf(`t=if [ -n "${LEASEHOLD_CHECKPOINT_FILE:-}" ]; then echo "$LEASEHOLD_CHECKPOINT_FILE" >%s; exec 3>%s; echo >&3; sleep 1000 & echo $! >%s; wait; fi
echo '{"step":1}' >&4; read -r ack <&4; [ "$ack" = ok ] || exit 9
exec 3>%s; echo >&3; sleep 1000 & echo $! >%s; wait`, paths, l.path, l.pidFile, l.path, l.pidFile)
	args := []string{"daemon", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--log-format", "json", "--exec", command}
	p := spStart(t, "daemon", binPath, args...)
	ln, _ := p.waitLog(t, 0, "listening", func(l spLine) bool { return l.Msg == "listening" })
	if code, body := postBody(t, "http://"+ln.str("addr")+"/v1/jobs", `{"kind":"t"}`); code != http.StatusCreated {
		t.Fatalf("enqueue: %d %s", code, body)
	}
	<-l.started // checkpointed
	p.signal(t, syscall.SIGKILL)
	<-p.done
	l.waitGone(t, "first daemon killed by SIGKILL")

	l2 := newLifeLine(t)
	command = strings.ReplaceAll(command, l.path, l2.path)
	command = strings.ReplaceAll(command, l.pidFile, l2.pidFile)
	args[len(args)-1] = command
	p2 := spStart(t, "daemon", binPath, args...)
	<-l2.started // resumed, with the file
	b, err := os.ReadFile(paths)
	file := strings.TrimSpace(string(b))
	if err != nil || file == "" {
		t.Fatalf("the resumed command did not say its checkpoint file: %q, %v", b, err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("checkpoint file %s while its command runs: %v", file, err)
	}
	guard := guardPid(t, p2)
	p2.signal(t, syscall.SIGKILL)
	<-p2.done
	l2.waitGone(t, "second daemon killed by SIGKILL")
	guard.waitExit(t, "the guard of the second daemon")
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("checkpoint file %s after its daemon was killed and its guard exited: %v, want it gone", file, err)
	}
	if _, err := os.Stat(filepath.Dir(file)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed daemon's temporary directory %s is still there: %v", filepath.Dir(file), err)
	}
}

// A daemon's directory of checkpoint files may go while it runs (a
// cleaner of old files in TMPDIR, such as systemd-tmpfiles, removes a
// directory left untouched for days): the file is then written in TMPDIR
// itself, rather than every run that resumes from a checkpoint failing
// from then on until the daemon restarts.
func TestExecCheckpointFileWithoutTheDaemonsDir(t *testing.T) {
	gone := filepath.Join(t.TempDir(), "leasehold-exec-gone")
	execGroups.setTempDir(gone)
	t.Cleanup(func() { execGroups.setTempDir("") })
	j := execJob(`{}`)
	j.Job.Checkpoint = json.RawMessage(`{"step":3}`)
	file, err := writeLastCheckpoint(j)
	if err != nil {
		t.Fatalf("the last checkpoint with the daemon's directory gone: %v", err)
	}
	defer func() { _ = os.Remove(file) }()
	if b, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(b)) != `{"step":3}` {
		t.Errorf("checkpoint file %s: %q, %v", file, b, err)
	}
}
