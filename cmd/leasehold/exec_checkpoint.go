package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/worker"
)

// Checkpoints of --exec commands (ADR 0034). A command reads the last
// checkpoint of its job from the file named by envCheckpointFile (unset
// when there is none), and records one by writing a line of JSON to
// descriptor execCheckpointFD, reading back one line: "ok" once it is
// recorded, or "error: CLASS: reason" (checkpointReply).
const (
	envCheckpointFile = "LEASEHOLD_CHECKPOINT_FILE"
	envCheckpointFD   = "LEASEHOLD_CHECKPOINT_FD"
	// execCheckpointFD is the command's end of the checkpoint socket:
	// fd 3 is the gate (execGate), which the command never sees.
	execCheckpointFD = 4
	// defaultMaxCheckpointLine bounds a checkpoint line when the store
	// sets no request limit: Pebble's default limit, which no record
	// exceeds.
	defaultMaxCheckpointLine = 64 << 20
	// execCheckpointTimeout bounds one checkpoint write. The write is not
	// bounded by the job's context: a command stopped by a cancel or a
	// timeout may record its progress before it exits (the run's fence
	// still refuses a run that is lost).
	execCheckpointTimeout = 10 * time.Second
)

// writeLastCheckpoint writes the checkpoint the job's earlier runs
// recorded to a new file readable by the daemon's user only, and returns
// its path, or "" when there is none (no checkpoint, or JSON null). The
// caller removes the file once the command has exited.
func writeLastCheckpoint(j *worker.Job) (string, error) {
	cp := bytes.TrimSpace(j.Job.Checkpoint)
	if len(cp) == 0 || bytes.Equal(cp, []byte("null")) {
		return "", nil
	}
	// In the guard's directory, if there is one: a killed daemon's files
	// go with its guard.
	dir := execGroups.tempDir()
	f, err := os.CreateTemp(dir, "leasehold-checkpoint-*.json") // mode 0600
	if err != nil && dir != "" && errors.Is(err, fs.ErrNotExist) {
		// The directory went while the daemon ran (a cleaner of old
		// files in TMPDIR removes one left untouched for days): the
		// system's, rather than failing every run that resumes. Not
		// made again: its name is known, and another user could have
		// taken it.
		f, err = os.CreateTemp("", "leasehold-checkpoint-*.json")
	}
	if err != nil {
		return "", err
	}
	_, werr := f.Write(append(cp[:len(cp):len(cp)], '\n'))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(f.Name())
		return "", werr
	}
	return f.Name(), nil
}

// checkpointSocket returns the two ends of a new socket pair: the
// daemon's as a connection, and the command's as a file to pass as
// execCheckpointFD. Both are close-on-exec here, so that no other command
// started meanwhile inherits them; the command gets its end by exec's
// duplication of ExtraFiles, which clears the flag in the child only.
func checkpointSocket() (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "checkpoint")
	theirs := os.NewFile(uintptr(fds[1]), "checkpoint (command)")
	c, err := net.FileConn(ours) // a duplicate, non-blocking; the command's end stays blocking
	_ = ours.Close()
	if err != nil {
		_ = theirs.Close()
		return nil, nil, fmt.Errorf("checkpoint socket: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		_ = c.Close()
		_ = theirs.Close()
		return nil, nil, fmt.Errorf("checkpoint socket: a %T, not a Unix socket", c)
	}
	return uc, theirs, nil
}

// execEnv is the daemon's environment with the job's variables added, and
// without checkpoint variables the daemon itself inherited (a daemon run
// by an --exec command): a command without a last checkpoint must find
// envCheckpointFile unset.
func execEnv(j *worker.Job, cpFile string) []string {
	env := make([]string, 0, len(os.Environ())+7)
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, envCheckpointFile+"=") || strings.HasPrefix(kv, envCheckpointFD+"=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"LEASEHOLD_JOB_ID="+j.ID,
		"LEASEHOLD_ATTEMPT="+strconv.Itoa(j.Attempt),
		"LEASEHOLD_TOKEN="+j.Token.String(),
		"LEASEHOLD_KIND="+j.Kind,
		"LEASEHOLD_IDEMPOTENCY_KEY="+j.IdempotencyKey(),
		envCheckpointFD+"="+strconv.Itoa(execCheckpointFD),
	)
	if cpFile != "" {
		env = append(env, envCheckpointFile+"="+cpFile)
	}
	return env
}

// serveCheckpoints answers the checkpoint lines the command writes on c,
// one reply line per line, in order, until c ends: the command (and every
// process holding its end) closed it, or the daemon shut c's reading down
// once the command's shell exited (endCheckpoints). A line cut off by the
// end is not a checkpoint: nothing is recorded for it.
func serveCheckpoints(c *net.UnixConn, j *worker.Job, maxLine int, log *slog.Logger) {
	r := bufio.NewReader(c) // small: one per running command; longer lines span reads
	for {
		line, tooLong, err := readCheckpointLine(r, maxLine)
		if err != nil {
			return // EOF, or the connection is gone
		}
		reply := checkpointReply(j, line, tooLong, maxLine, log)
		// A command that does not read its replies may fill the socket:
		// the write then waits for it to read, or for its exit, after
		// which writes fail at once (endCheckpoints).
		_, _ = c.Write([]byte(reply + "\n"))
	}
}

// endCheckpoints ends the checkpoints of a command whose shell exited: the
// lines it wrote before are still read and recorded, in order, then
// serveCheckpoints sees the end even if a process the command left holds
// its end of the socket (that process's writes fail from now on: EPIPE),
// and replies are no longer waited for.
func endCheckpoints(c *net.UnixConn) {
	_ = c.CloseRead()
	_ = c.SetWriteDeadline(time.Now())
}

// readCheckpointLine reads one line, without its newline. A line over max
// bytes is read to its end and dropped: tooLong. A line that the end of
// the stream cuts off is dropped too: err is io.EOF.
func readCheckpointLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > max+1 { // +1: the newline
				tooLong, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		switch {
		case err == nil:
			return bytes.TrimSuffix(buf, []byte("\n")), tooLong, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, false, err
		}
	}
}

// checkpointReply records line as the job's checkpoint and returns the
// reply for the command: "ok", or "error: CLASS: reason" where CLASS is
//   - lost: the run no longer holds the job (the same fence as
//     worker.Job.Checkpoint refused it: nothing recorded), or it is over
//     with an earlier write's outcome unknown; the command should stop;
//   - invalid: the line is empty, not one JSON value, or too large for the
//     store: nothing recorded;
//   - unavailable: the store did not record it (out of space, unreachable,
//     too slow): not durable; the command may retry or stop.
func checkpointReply(j *worker.Job, line []byte, tooLong bool, maxLine int, log *slog.Logger) string {
	line = bytes.TrimSpace(line)
	switch {
	case tooLong:
		return fmt.Sprintf("error: invalid: checkpoint over %d bytes, more than the store takes: nothing recorded", maxLine)
	case len(line) == 0:
		return "error: invalid: empty line: write one JSON value per line"
	case !json.Valid(line):
		return "error: invalid: not JSON: write one JSON value per line"
	}
	ctx, cancel := context.WithTimeout(context.Background(), execCheckpointTimeout)
	defer cancel()
	err := j.Checkpoint(ctx, json.RawMessage(line))
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, fence.ErrLeaseLost):
		log.Warn("checkpoint of a run no longer current refused: the command was told to stop", slog.String("job", j.ID), slog.Any("err", err))
		return "error: lost: this run no longer holds the job (another run may have it): nothing recorded; stop without further side effects"
	case errors.Is(err, coordinator.ErrUnknownOutcome):
		// An earlier write of the run lost its reply and the run can no
		// longer find out whether it landed: the run is over, but a
		// checkpoint may have been recorded.
		log.Warn("checkpoint of a run whose earlier write is unknown refused: the command was told to stop", slog.String("job", j.ID), slog.Any("err", err))
		return "error: lost: this run is over (an earlier write's reply was lost, so whether it was recorded is unknown): stop without further side effects"
	case errors.Is(err, coordinator.ErrInvalid):
		return "error: invalid: " + apiserver.CleanCoordError(err)
	case errors.Is(err, kv.ErrNoSpace):
		return "error: unavailable: the store is out of space: nothing recorded"
	default:
		log.Warn("checkpoint of a command not recorded", slog.String("job", j.ID), slog.Any("err", err))
		return "error: unavailable: not recorded: " + apiserver.OneLine(err.Error())
	}
}

// startCheckpoints serves c in a goroutine of its own; the channel it
// returns is closed once serveCheckpoints has returned.
func startCheckpoints(c *net.UnixConn, j *worker.Job, maxLine int, log *slog.Logger) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		serveCheckpoints(c, j, maxLine, log)
	}()
	return done
}
