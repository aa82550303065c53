package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A clean stop of `leasehold etcd` logs no error: the listeners closed by
// the stop are not failures (etcd's own logger reports each as one).
func TestEtcdCleanStopLogsNoError(t *testing.T) {
	var p *spProc
	for attempt := 1; ; attempt++ {
		p = spStart(t, "etcd", binPath, "etcd", "--data", filepath.Join(t.TempDir(), "etcd"),
			"--listen-client", "http://"+closedPort(t), "--listen-peer", "http://"+closedPort(t), "--log-format", "json")
		ready := false
		select {
		case <-p.done:
		case <-spLogSignal(p, "etcd member serving"):
			ready = true
		}
		if ready {
			break
		}
		// A port picked as free may have been taken meanwhile: try again.
		if attempt == 3 {
			t.Fatalf("etcd member did not start:\n%s", p.log)
		}
	}
	p.signal(t, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(spWait):
		t.Fatalf("still running %s after SIGTERM:\n%s", spWait, p.log)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit status %d after SIGTERM, want 0:\n%s", code, p.log)
	}
	var stopped bool
	for _, l := range p.logLines() {
		if strings.EqualFold(l.str("level"), "error") {
			t.Errorf("logged at level error on a clean stop: %s", l.Raw)
		}
		stopped = stopped || l.Msg == "etcd member stopped"
	}
	if !stopped {
		t.Errorf("no \"etcd member stopped\" line:\n%s", p.log)
	}
}
