package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEtcdTakenPortIsOneLine: a member whose client or peer port something
// else holds fails (exit 1) with one line naming the address and what to
// do, and writes nothing to --data, so that a second attempt on free
// ports starts afresh. etcd used to log its failure first, at level error
// with a stack trace, before leasehold's line.
func TestEtcdTakenPortIsOneLine(t *testing.T) {
	_, taken := takenPort(t)
	for _, c := range []struct {
		name, flag string
		args       []string
	}{
		{"peer port taken", "--listen-peer", []string{"--listen-peer", taken, "--listen-client", "http://" + closedPort(t)}},
		{"client port taken", "--listen-client", []string{"--listen-client", taken, "--listen-peer", "http://" + closedPort(t)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "etcd")
			r := runCLI(t, nil, "", append([]string{"etcd", "--data", dir}, c.args...)...)
			want := "leasehold: etcd: " + c.flag + " " + taken + ": address already in use: pick another port with " + c.flag + ", or stop what holds it\n"
			if r.code != exitFailure || r.stderr != want || r.stdout != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q; want exit %d and stderr %q", r.code, r.stderr, r.stdout, exitFailure, want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("data directory %s left after the failed start (stat: %v)", dir, err)
			}
			// The same --data on free ports serves.
			startEtcdMemberIn(t, dir, func() []string {
				return []string{"--listen-client", "http://" + closedPort(t), "--listen-peer", "http://" + closedPort(t)}
			})
		})
	}
}

// A listen variable names itself in the message, as other refusals do.
func TestEtcdTakenPortNamesTheVariable(t *testing.T) {
	_, taken := takenPort(t)
	r := runCLI(t, []string{"LEASEHOLD_LISTEN_PEER=" + taken}, "", "etcd", "--data", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client", "http://"+closedPort(t))
	checkOneLineError(t, "peer URL from the environment", r, exitFailure,
		"LEASEHOLD_LISTEN_PEER "+taken+": address already in use: pick another port with --listen-peer")
}

// Client and peer URLs on one address (or one port, one of them on all
// interfaces) cannot both be listened on: refused before anything is
// written, instead of etcd failing on its own peer listener.
func TestEtcdSameListenAddrRefused(t *testing.T) {
	addr := closedPort(t)
	_, port, _ := strings.Cut(addr, ":")
	for _, c := range []struct{ client, peer string }{
		{"http://" + addr, "http://" + addr},
		{"http://0.0.0.0:" + port, "http://" + addr},
		{"http://" + addr, "http://[::]:" + port},
	} {
		dir := filepath.Join(t.TempDir(), "etcd")
		r := runCLI(t, nil, "", "etcd", "--data", dir, "--listen-client", c.client, "--listen-peer", c.peer)
		checkOneLineError(t, c.client+" and "+c.peer, r, exitUsage,
			"--listen-client \""+c.client+"\" and --listen-peer \""+c.peer+"\" are the same address: give each its own port")
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("data directory %s was created (stat: %v)", dir, err)
		}
	}
	// Another address on the same port is another listener.
	_, taken := takenPort(t)
	r := runCLI(t, nil, "", "etcd", "--data", filepath.Join(t.TempDir(), "etcd"), "--listen-client", "http://127.0.0.2:"+port, "--listen-peer", taken)
	checkOneLineError(t, "127.0.0.2 and 127.0.0.1", r, exitFailure, "--listen-peer "+taken+": address already in use")
}
