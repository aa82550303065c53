package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestSharedOnlySettingWithoutEtcdRefused: a setting that only shared mode
// reads (the etcd-* ones, the daemon's --reap-interval, a client's
// --max-payload), given on the command line while --etcd is set nowhere,
// is refused (exit 2, one line, nothing opened), as --namespace through a
// daemon is: the daemon ran in embedded mode on --data and the client
// commands talked to --server, ignoring it (a forgotten or misspelt
// LEASEHOLD_ETCD turned a cluster's daemons into lone ones, each on its own
// directory). With --etcd from any source it is taken as before.
func TestSharedOnlySettingWithoutEtcdRefused(t *testing.T) {
	dir := t.TempDir()
	ca := writeFile(t, dir, "ca.pem", "x")
	data := writeFile(t, dir, "not-a-dir", "")
	srv := "http://" + closedPort(t)
	daemon := []string{"daemon", "--data", data, "--listen", "127.0.0.1:0"}
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"daemon etcd-ca", nil, append(daemon, "--etcd-ca", ca), "--etcd-ca applies with --etcd"},
		{"daemon etcd-cert", nil, append(daemon, "--etcd-cert", ca, "--etcd-key", ca), "--etcd-cert applies with --etcd"},
		{"daemon etcd-user", nil, append(daemon, "--etcd-user", "u", "--etcd-password", "p"), "--etcd-password applies with --etcd (shared mode), and this command runs without etcd"},
		{"daemon etcd-max-request-bytes", nil, append(daemon, "--etcd-max-request-bytes", "4MiB"), "--etcd-max-request-bytes applies with --etcd"},
		{"daemon reap-interval", nil, append(daemon, "--reap-interval", "5s"), "--reap-interval applies with --etcd"},
		{"client etcd-ca", nil, []string{"jobs", "list", "--server", srv, "--etcd-ca", ca}, "jobs list: --etcd-ca applies with --etcd"},
		{"client etcd-user", nil, []string{"workers", "list", "--server", srv, "--etcd-user", "u", "--etcd-password", "p"}, "--etcd-password applies with --etcd"},
		{"client max-payload", nil, []string{"enqueue", "echo", "--server", srv, "--max-payload", "2MiB"}, "enqueue: --max-payload applies with --etcd"},
		// --server on the command line wins over LEASEHOLD_ETCD: the
		// command talks to the daemon.
		{"client etcd dropped for server", []string{"LEASEHOLD_ETCD=" + srv}, []string{"jobs", "list", "--server", srv, "--etcd-ca", ca}, "--etcd-ca applies with LEASEHOLD_ETCD (shared mode), and this command runs without etcd"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, c.env, "", c.args...)
			checkOneLineError(t, strings.Join(c.args, " "), r, exitUsage, c.want)
		})
	}
	// With --etcd from the environment or a config file, the settings are
	// read: the daemon checks them for shared mode, and a client command
	// goes on to reach etcd (nothing listens: exit 1).
	etcd := "http://" + closedPort(t)
	r := runCLI(t, []string{"LEASEHOLD_ETCD=" + etcd}, "", "daemon", "--listen", "127.0.0.1:0", "--reap-interval", "5s", "--etcd-max-request-bytes", "1KiB")
	checkOneLineError(t, "daemon, LEASEHOLD_ETCD", r, exitUsage, "--etcd-max-request-bytes 1KiB: want the servers' --max-request-bytes")
	cfg := writeFile(t, dir, "config.yaml", "etcd: "+etcd+"\n")
	r = runCLI(t, nil, "", "jobs", "list", "--config", cfg, "--etcd-user", "u", "--etcd-password", "p")
	if r.code != exitFailure || !strings.Contains(r.stderr, "cannot reach etcd") {
		t.Errorf("client, etcd in the config file: exit %d, want 1 (etcd out of reach): %s", r.code, r.stderr)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 3 {
		t.Errorf("the refused commands wrote beside their files: %v, %v", entries, err)
	}
}

// An embedded daemon given settings of shared mode by its config file (or
// the environment), where no --etcd chose shared mode, says that it
// ignores them, as a shared daemon says of --data and --min-free-disk.
func TestEmbeddedDaemonSaysItIgnoresSharedSettings(t *testing.T) {
	cfg := writeFile(t, t.TempDir(), "config.yaml", "reap-interval: 5s\netcd-max-request-bytes: 4MiB\n")
	p := spStart(t, "daemon", binPath, "daemon", "--config", cfg, "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--log-format", "json")
	l, _ := p.waitLog(t, 0, "the warning that shared-mode settings are ignored", func(l spLine) bool {
		return l.str("level") == "WARN" && strings.HasPrefix(l.Msg, "settings of shared mode are ignored in embedded mode")
	})
	if got := fmt.Sprint(l.Fields["settings"]); got != "[--etcd-max-request-bytes --reap-interval]" {
		t.Errorf("settings %s, want [--etcd-max-request-bytes --reap-interval]", got)
	}
}
