package main

import (
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/etcdtest"
)

// A daemon started while etcd has no quorum waits for it, as a running
// daemon does, and starts once the quorum is back: it does not exit, says
// at each retry what it is waiting for, and answers /healthz and /readyz
// meanwhile.
func TestDaemonStartedDuringAnOutageWaitsForIt(t *testing.T) {
	c := etcdtest.StartCluster(t, 3, etcdtest.WithElectionTimeout(50*time.Millisecond, 500*time.Millisecond))
	c.Stop(1)
	c.Stop(2)
	addr := closedPort(t)
	p := spStart(t, "daemon", binPath, "daemon", "--etcd", c.Member(0).ClientURL(), "--listen", addr, "--lease-ttl", "2s", "--log-format", "json")
	_, at := p.waitLog(t, 0, "a warning that it waits for etcd", func(l spLine) bool {
		return l.Msg == "cannot start a session: etcd does not answer (no quorum?); retrying"
	})
	// It serves HTTP meanwhile: alive, not ready, saying why (it served
	// nothing until its session started).
	if code := httpStatus(t, "http://"+addr+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while the daemon waits for etcd: %d, want 200", code)
	}
	if code, r := getReady(t, "http://"+addr); code != http.StatusServiceUnavailable || !strings.Contains(r.Error, "no session yet") {
		t.Errorf("/readyz while the daemon waits for etcd: %d %+v, want 503 saying it has no session yet", code, r)
	}
	c.Restart(1)
	c.Restart(2)
	p.waitLog(t, at, "the worker's start", func(l spLine) bool { return l.Msg == "worker started" })
	p.stopCleanly(t)
}

// A daemon whose --etcd list names a member that does not answer (stopped,
// hung, or removed from the cluster and its URL left behind) starts with
// the others within moments: its check of the servers' versions waited
// for every endpoint for the dial's whole 15 s bound, saying nothing.
func TestDaemonStartsBesideAnEtcdEndpointThatDoesNotAnswer(t *testing.T) {
	c := etcdtest.Start(t)
	// Connections are accepted (by the kernel) and never answered, as a
	// stopped process's are.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hung.Close() }()
	start := time.Now()
	p := spStart(t, "daemon", binPath, "daemon", "--etcd", "http://"+hung.Addr().String()+","+c.Endpoint(), "--listen", "127.0.0.1:0", "--log-format", "json")
	p.waitLog(t, 0, "the worker's start", func(l spLine) bool { return l.Msg == "worker started" })
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the daemon took %s to start beside an endpoint that does not answer, want well under the 15 s it took", took.Round(time.Millisecond))
	}
	p.signal(t, syscall.SIGTERM)
	<-p.done
}

// httpStatus GETs url and returns its status code (0, with the test
// failed, if it did not answer).
func httpStatus(t *testing.T, url string) int {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
