package main

import (
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A clean stop of `leasehold etcd` logs no error: the listeners closed by
// the stop are not failures (etcd's own logger reports each as one).
func TestEtcdCleanStopLogsNoError(t *testing.T) {
	p := startEtcdMember(t, func() []string {
		return []string{"--listen-client", "http://" + closedPort(t), "--listen-peer", "http://" + closedPort(t)}
	})
	p.stopCleanly(t)
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

// startEtcdMember starts a real `leasehold etcd` with a fresh data
// directory, the flags args returns and JSON logs, and waits until it
// serves. Its ports are picked free and may be taken before the member
// listens: args is called again, up to three times.
func startEtcdMember(t *testing.T, args func() []string) *spProc {
	t.Helper()
	return startEtcdMemberIn(t, filepath.Join(t.TempDir(), "etcd"), args)
}

// startEtcdMemberIn is startEtcdMember with data directory dir, which a
// start that failed on a taken port leaves as it was.
func startEtcdMemberIn(t *testing.T, dir string, args func() []string) *spProc {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p := spStart(t, "etcd", binPath, append([]string{"etcd", "--data", dir, "--log-format", "json"}, args()...)...)
		select {
		case <-p.done:
		case <-spLogSignal(p, "etcd member serving"):
			return p
		}
		if attempt == 3 {
			t.Fatalf("etcd member did not start in %s:\n%s", dir, p.log)
		}
	}
}

// takenPort holds a loopback port for the test: a member given it as a
// listen URL passes validation and then fails to start (exit 1).
func takenPort(t *testing.T) (port, url string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port, "http://127.0.0.1:" + port
}

// The first member of a new cluster of several cannot serve until a
// quorum of them has started, and etcd's own lines wait until then: it
// says what it waits for rather than look hung.
func TestEtcdMemberSaysItWaitsForItsPeers(t *testing.T) {
	peer, other := "http://"+closedPort(t), "http://"+closedPort(t)
	p := spStart(t, "etcd", binPath, "etcd", "--data", filepath.Join(t.TempDir(), "etcd"), "--log-format", "json",
		"--name", "a", "--listen-client", "http://"+closedPort(t), "--listen-peer", peer,
		"--initial-cluster", "a="+peer+",b="+other)
	l, _ := p.waitLog(t, 0, "a line saying it waits for its peers", func(l spLine) bool {
		return strings.HasPrefix(l.Msg, "waiting for a quorum of the members of --initial-cluster")
	})
	if l.str("member") != "a" || !strings.Contains(l.Raw, `"members":2`) {
		t.Errorf("waiting line %s: want member a of 2", l.Raw)
	}
}

// Members that found their quorum never log the waiting line after it:
// the line is for a member that is still waiting. (On a loaded machine
// members started together may take longer than the line's delay to find
// each other; then they log it, before they serve.)
func TestEtcdMembersThatServeDoNotSayTheyWait(t *testing.T) {
	peerA, peerB := "http://"+closedPort(t), "http://"+closedPort(t)
	cluster := "a=" + peerA + ",b=" + peerB
	var ps []*spProc
	for _, m := range []struct{ name, peer string }{{"a", peerA}, {"b", peerB}} {
		ps = append(ps, spStart(t, "etcd-"+m.name, binPath, "etcd", "--data", filepath.Join(t.TempDir(), m.name), "--log-format", "json",
			"--name", m.name, "--listen-client", "http://"+closedPort(t), "--listen-peer", m.peer, "--initial-cluster", cluster))
	}
	for _, p := range ps {
		p.waitLog(t, 0, "etcd member serving", func(l spLine) bool { return l.Msg == "etcd member serving" })
	}
	// The timer would have fired by now had it not been stopped.
	time.Sleep(waitingForPeers + time.Second)
	for _, p := range ps {
		serving := false
		for _, l := range p.logLines() {
			serving = serving || l.Msg == "etcd member serving"
			if serving && strings.HasPrefix(l.Msg, "waiting for a quorum") {
				t.Errorf("a member that serves logged %s", l.Raw)
			}
		}
	}
}

// `leasehold etcd` serves etcd's HTTP/JSON gateway only when asked: a web
// page can send it a form's POST, which the gateway takes as a write.
func TestEtcdMemberServesNoGatewayUnlessAsked(t *testing.T) {
	for _, asked := range []bool{false, true} {
		client := closedPort(t)
		p := startEtcdMember(t, func() []string {
			client = closedPort(t)
			args := []string{"--listen-client", "http://" + client, "--listen-peer", "http://" + closedPort(t)}
			if asked {
				args = append(args, "--enable-grpc-gateway")
			}
			return args
		})
		resp, err := http.Post("http://"+client+"/v3/maintenance/status", "text/plain", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[asked]; resp.StatusCode != want {
			t.Errorf("--enable-grpc-gateway %t: POST /v3/maintenance/status answered %d, want %d", asked, resp.StatusCode, want)
		}
		p.stopCleanly(t)
	}
}
