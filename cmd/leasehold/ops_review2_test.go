package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEtcdBadFlagsRefusedBeforeWriting: `leasehold etcd` with a bad flag
// value is bad input: one line that names the flag, exit 2, and no data
// directory. (It used to exit 1 with a hint about free ports, create the
// directory first, print a stack trace for an --initial-cluster without
// this member, and panic on a bad --etcd-log-level.)
func TestEtcdBadFlagsRefusedBeforeWriting(t *testing.T) {
	client, peer := "http://"+closedPort(t), "http://"+closedPort(t)
	cases := []struct {
		name, flag string
		args       []string
	}{
		{"log level", "--etcd-log-level", []string{"--etcd-log-level", "bogus"}},
		{"client url", "--listen-client", []string{"--listen-client", "foo"}},
		{"peer port", "--listen-peer", []string{"--listen-peer", "http://127.0.0.1:notaport"}},
		{"negative election", "--election-timeout", []string{"--election-timeout", "-1s"}},
		{"heartbeat over election", "--election-timeout", []string{"--heartbeat-interval", "2s"}},
		{"retention", "--auto-compaction-retention", []string{"--auto-compaction-retention", "bogus"}},
		{"cluster without this member", "--initial-cluster", []string{"--initial-cluster", "xdefault=" + peer}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "etcd")
			args := append([]string{"etcd", "--data", dir, "--listen-client", client, "--listen-peer", peer}, c.args...)
			r := runCLI(t, nil, "", args...)
			if r.code != exitUsage {
				t.Errorf("exit code %d, want %d; stderr:\n%s", r.code, exitUsage, r.stderr)
			}
			if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) != 1 || !strings.Contains(lines[0], c.flag) {
				t.Errorf("stderr is not one line naming %s:\n%s", c.flag, r.stderr)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("data directory %s was created (stat: %v)", dir, err)
			}
		})
	}
}

// TestDaemonRefusesEmptyTokenFromEnvOrFile: a daemon asked for a token
// that turns out empty (LEASEHOLD_API_TOKEN="$TOKEN" or
// LEASEHOLD_API_TOKEN_FILE="$F" with the variable unset, or an empty
// --api-token-file) refuses to start, as it does for an empty
// --api-token, rather than serve an API open to anyone. It used to start
// without a token. The daemon is pointed at a taken port, so that a
// daemon that does start fails there instead of serving.
func TestDaemonRefusesEmptyTokenFromEnvOrFile(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"empty LEASEHOLD_API_TOKEN", []string{"LEASEHOLD_API_TOKEN="}, nil, "LEASEHOLD_API_TOKEN is set but empty"},
		{"blank LEASEHOLD_API_TOKEN", []string{"LEASEHOLD_API_TOKEN=  "}, nil, "LEASEHOLD_API_TOKEN is set but empty"},
		{"empty LEASEHOLD_API_TOKEN_FILE", []string{"LEASEHOLD_API_TOKEN_FILE="}, nil, "LEASEHOLD_API_TOKEN_FILE is set but empty"},
		{"empty --api-token-file", nil, []string{"--api-token-file", ""}, "--api-token-file is set but empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			args := append([]string{"daemon", "--data", data, "--listen", ln.Addr().String()}, c.args...)
			r := runCLI(t, c.env, "", args...)
			checkOneLineError(t, c.name, r, exitUsage, c.want)
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Errorf("the refused daemon created its data directory (stat: %v)", err)
			}
		})
	}
	// A token given elsewhere wins over an empty variable, as before.
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, []string{"LEASEHOLD_API_TOKEN="}, "", "daemon", "--data", filepath.Join(dir, "data"), "--listen", ln.Addr().String(), "--api-token-file", tokenFile)
	if r.code == exitUsage || strings.Contains(r.stderr, "set but empty") {
		t.Errorf("empty LEASEHOLD_API_TOKEN with --api-token-file: exit %d, stderr %q; want the daemon to take the file's token (and fail on the taken port)", r.code, r.stderr)
	}
}
