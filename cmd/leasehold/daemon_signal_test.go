package main

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A second SIGINT or SIGTERM to a stopping daemon ends it at once with
// exit code 1 (a failure: the exit codes are 0, 1 and 2, not 128+signal),
// and its log says that the signal forced the exit.
func TestDaemonSecondSignalExitsWithFailure(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			l := newLifeLine(t)
			hold := fmt.Sprintf(`hold=exec 3>%s; echo >&3; sleep 1000 & echo $! >%s; wait`, l.path, l.pidFile)
			p := spStart(t, "daemon", binPath, "daemon", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--log-format", "json",
				"--exec", hold, "--shutdown-timeout", "1h")
			ln, _ := p.waitLog(t, 0, "listening", func(l spLine) bool { return l.Msg == "listening" })
			code, body := postBody(t, "http://"+ln.str("addr")+"/v1/jobs", `{"kind":"hold"}`)
			if code != http.StatusCreated {
				t.Fatalf("enqueue: %d %s", code, body)
			}
			<-l.started // a running job holds the graceful stop
			p.signal(t, sig)
			_, at := p.waitLog(t, 0, "the stop", func(l spLine) bool { return strings.HasPrefix(l.Msg, "stopping: signal received") })
			p.signal(t, sig)
			select {
			case <-p.done:
			case <-time.After(spWait):
				t.Fatalf("the daemon did not exit at a second signal:\n%s", p.log)
			}
			if got := p.cmd.ProcessState.ExitCode(); got != exitFailure {
				t.Errorf("exit code %d (%s) after a second signal, want %d:\n%s", got, p.cmd.ProcessState, exitFailure, p.log)
			}
			p.waitLog(t, at, "the forced exit", func(l spLine) bool {
				return strings.HasPrefix(l.Msg, "second signal: forcing the exit") && strings.Contains(l.Msg, "exit code 1") && l.str("signal") == sig.String()
			})
			l.waitGone(t, "daemon stopped by a second signal")
		})
	}
}
