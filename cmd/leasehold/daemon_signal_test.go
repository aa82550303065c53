package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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

// Through the drain that a signal starts, the daemon goes on serving HTTP:
// /healthz and /metrics answer 200 (a liveness probe that failed killed
// the drain; Prometheus lost the target just then), /readyz answers 503
// saying that it stops (load balancers send elsewhere), and the API
// answers. HTTP stops once the drain ends; the daemon exits 0.
func TestDaemonServesHTTPThroughTheDrain(t *testing.T) {
	l := newLifeLine(t)
	release := filepath.Join(t.TempDir(), "release")
	hold := fmt.Sprintf(`hold=exec 3>%s; echo >&3; while [ ! -e %s ]; do sleep 0.05; done`, l.path, release)
	p := spStart(t, "daemon", binPath, "daemon", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--log-format", "json",
		"--exec", hold, "--shutdown-timeout", "1h")
	ln, _ := p.waitLog(t, 0, "listening", func(l spLine) bool { return l.Msg == "listening" })
	base := "http://" + ln.str("addr")
	if code, body := postBody(t, base+"/v1/jobs", `{"kind":"hold"}`); code != http.StatusCreated {
		t.Fatalf("enqueue: %d %s", code, body)
	}
	<-l.started // a running job holds the graceful stop
	p.signal(t, syscall.SIGTERM)
	p.waitLog(t, 0, "the stop", func(l spLine) bool { return strings.HasPrefix(l.Msg, "stopping: signal received") })

	hc := &http.Client{Timeout: 30 * time.Second}
	for _, path := range []string{"/healthz", "/metrics", "/v1/stats"} {
		resp, err := hc.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s during the drain: %v", path, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s during the drain: %d, want 200", path, resp.StatusCode)
		}
	}
	if code, r := getReady(t, base); code != http.StatusServiceUnavailable || !strings.Contains(r.Error, "the daemon is stopping") || r.RunningJobs != 1 {
		t.Errorf("/readyz during the drain: %d %+v, want 503 saying the daemon is stopping, with its running job", code, r)
	}

	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(spWait):
		t.Fatalf("the daemon did not exit once its job ended:\n%s", p.log)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after the drain, want 0:\n%s", code, p.log)
	}
	if _, err := hc.Get(base + "/healthz"); err == nil {
		t.Error("/healthz still answers after the daemon exited")
	}
}
