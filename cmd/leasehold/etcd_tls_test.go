package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testutil"
)

// A cluster that requires TLS with client certificates, as production
// etcd runs: `leasehold etcd` serves clients and peers over TLS, a daemon
// and the CLI given --etcd-ca, --etcd-cert and --etcd-key run a job over
// it, and a CLI without a client certificate, or dialling http://, is
// refused in one line that says what to pass.
func TestSharedModeOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := testutil.WriteCert(t, dir)
	var client string
	etcd := startEtcdMember(t, func() []string {
		client = "https://" + closedPort(t)
		return []string{"--listen-client", client, "--listen-peer", "https://" + closedPort(t),
			"--cert-file", cert, "--key-file", key, "--trusted-ca-file", cert, "--client-cert-auth",
			"--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", cert, "--peer-client-cert-auth"}
	})
	defer etcd.stop(t)
	tlsFlags := []string{"--etcd", client, "--etcd-ca", cert, "--etcd-cert", cert, "--etcd-key", key, "--namespace", "tls"}

	d := spStart(t, "daemon", spDaemonBinary(), append([]string{"daemon", "--listen", "127.0.0.1:0", "--lease-ttl", "3s",
		"--shutdown-timeout", "1s", "--log-format", "json"}, tlsFlags...)...)
	defer d.stop(t)
	d.waitLog(t, 0, "listening line", func(l spLine) bool { return l.Msg == "listening" })
	id := strings.TrimSpace(okCLI(t, append([]string{"enqueue", "echo", `{"over":"tls"}`}, tlsFlags...)...))
	if out := okCLI(t, append([]string{"jobs", "wait", id, "--timeout", spWait.String()}, tlsFlags...)...); !strings.Contains(out, "completed") {
		t.Fatalf("jobs wait %s over TLS: %q, want completed", id, out)
	}

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no client certificate", []string{"--etcd", client, "--etcd-ca", cert}, "pass --etcd-cert and --etcd-key with a client certificate"},
		{"http to a TLS server", []string{"--etcd", strings.Replace(client, "https://", "http://", 1)}, "the server speaks TLS: use https:// endpoints"},
	} {
		r := runCLI(t, nil, "", append([]string{"jobs", "list", "--namespace", "tls"}, c.args...)...)
		checkOneLineError(t, c.name, r, exitFailure, c.want)
	}
}

// TLS flags of `leasehold etcd` that etcd would refuse, or start with and
// then fail every connection, are refused before anything is written.
func TestEtcdTLSFlagsRefusedBeforeWriting(t *testing.T) {
	dir := t.TempDir()
	cert, key := testutil.WriteCert(t, dir)
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port, _ := takenPort(t)
	peer := "http://127.0.0.1:" + port
	https, http := "https://127.0.0.1:"+port, "http://127.0.0.1:"+port
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"cert without key", []string{"--listen-client", https, "--cert-file", cert}, "--cert-file and --key-file go together"},
		{"https without cert", []string{"--listen-client", https}, "--listen-client " + https + " serves TLS: pass --cert-file and --key-file"},
		{"cert for http", []string{"--listen-client", http, "--cert-file", cert, "--key-file", key}, "--cert-file is given but --listen-client " + http + " is plain http: use https://"},
		{"advertised http", []string{"--listen-client", https, "--advertise-client", "http://10.0.0.1:2379", "--cert-file", cert, "--key-file", key}, "--advertise-client http://10.0.0.1:2379 is plain http"},
		{"client auth without CA", []string{"--listen-client", https, "--cert-file", cert, "--key-file", key, "--client-cert-auth"}, "--client-cert-auth needs --trusted-ca-file"},
		{"CA without TLS", []string{"--listen-client", http, "--trusted-ca-file", cert}, "apply to TLS: pass --cert-file and --key-file too"},
		{"garbage cert", []string{"--listen-client", https, "--cert-file", garbage, "--key-file", key}, "--cert-file " + garbage + " / --key-file " + key},
		{"garbage CA", []string{"--listen-client", https, "--cert-file", cert, "--key-file", key, "--trusted-ca-file", garbage}, "--trusted-ca-file " + garbage + " holds no PEM certificate"},
		{"https peer without cert", []string{"--listen-peer", https}, "--listen-peer " + https + " serves TLS: pass --peer-cert-file and --peer-key-file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "etcd")
			args := append([]string{"etcd", "--data", data}, c.args...)
			if !strings.Contains(strings.Join(c.args, " "), "--listen-peer") {
				args = append(args, "--listen-peer", peer)
			} else {
				args = append(args, "--listen-client", "http://"+closedPort(t))
			}
			r := runCLI(t, nil, "", args...)
			checkOneLineError(t, c.name, r, exitUsage, c.want)
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Errorf("data directory %s was created (stat: %v)", data, err)
			}
		})
	}
}
