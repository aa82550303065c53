package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/apiserver"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runInProcess runs one command line in this process.
func runInProcess(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestConfigCheckExplainsEachError(t *testing.T) {
	dir := t.TempDir()
	cert := writeFile(t, dir, "cert.pem", "not a certificate")
	cases := []struct {
		name, content string
		code          int
		want          []string // in stdout, in order
	}{
		{"ok", "listen: 127.0.0.1:7421\nconcurrency: 50\nlease-ttl: 10s\nqueues: [default, mail]\nexec:\n  - thumb=./thumb.sh\nserver: http://127.0.0.1:7421\nlog-format: json\n", 0,
			[]string{"ok: 7 settings; for the daemon: listen, concurrency, lease-ttl, queues, exec; for every command: server, log-format"}},
		{"json", `{"concurrency": 3, "max-payload": "2MiB"}`, 0, []string{"ok: 2 settings"}},
		{"empty", "", 0, []string{"ok: 0 settings"}},
		{"typo", "concurency: 5\n", 2, []string{`line 1: "concurency" is not a setting: did you mean concurrency?`}},
		{"underscores", "LEASE_TTL: 5s\n", 2, []string{`did you mean lease-ttl? (settings are flag names, with dashes)`}},
		{"dashes", "--listen: x\n", 2, []string{`write the setting without dashes: listen`}},
		{"other command's flag", "timeout: 5s\n", 2, []string{`"timeout" is a flag of 'leasehold enqueue', 'leasehold jobs wait', which the config file does not set`}},
		{"duration without unit", "lease-ttl: 30\n", 2, []string{`line 1: lease-ttl: "30" is not a duration such as 30s or 5m: add a unit (30s)`}},
		{"not a duration", "lease-ttl: abc\n", 2, []string{`line 1: lease-ttl: "abc" is not a duration such as 30s or 5m` + "\n"}},
		{"number, without Go's words", "concurrency: abc\n", 2, []string{`line 1: concurrency: "abc" is not a whole number` + "\n"}},
		{"number", "concurrency: many\n", 2, []string{`concurrency: "many" is not a whole number`}},
		{"size", "max-payload: huge\n", 2, []string{`max-payload: "huge" is not a size such as 1MiB or 65536`}},
		{"size too large", "min-free-disk: 2000GiB\n", 2, []string{`line 1: min-free-disk: "2000GiB" is over 1024GiB, the largest size accepted: give a smaller one` + "\n"}},
		{"list for one value", "listen: [a, b]\n", 2, []string{"listen: is a list of 2 values: want one a string"}},
		{"mapping", "exec: {a: b}\n", 2, []string{"exec: is a mapping: want a value or a list of values"}},
		{"null", "data:\n", 2, []string{"data: has no value"}},
		{"twice", "listen: a:1\nlisten: b:2\n", 2, []string{"line 2: listen: set twice (first on line 1): keep one"}},
		{"several at once", "concurrency: x\nlease-ttl: 1\nnope: 1\n", 2, []string{"line 1: concurrency:", "line 2: lease-ttl:", `line 3: "nope"`}},
		{"missing file", "api-token-file: " + filepath.Join(dir, "nope") + "\n", 2, []string{"api-token-file: file " + filepath.Join(dir, "nope") + ": no such file or directory"}},
		{"bad certificate", "tls-cert: " + cert + "\ntls-key: " + cert + "\n", 2, []string{"line 1: tls-cert " + cert + " / tls-key " + cert + ": tls: failed to find any PEM data"}},
		{"values together", "lease-ttl: 1s\n", 2, []string{"line 1: lease-ttl 1s: want whole seconds, at least 2s"}},
		{"half of a pair", "tls-cert: " + cert + "\n", 2, []string{"line 1: tls-cert and tls-key go together"}},
		{"log level", "log-level: loud\n", 2, []string{`line 1: log-level "loud": want debug, info, warn or error`}},
		{"bad server", "server: 127.0.0.1:7420\n", 2, []string{"line 1: server \"127.0.0.1:7420\" is not an http:// or https:// URL"}},
		{"concurrency too high", "concurrency: 2000000000\n", 2, []string{"line 1: concurrency 2000000000: want 1 to 100000"}},
		{"listen port too high", "listen: 127.0.0.1:99999\n", 2, []string{`line 1: listen "127.0.0.1:99999": bad port "99999"`}},
		{"listen service name", "listen: 127.0.0.1:http\n", 0, []string{"ok: 1 settings"}},
		{"token with line break", "api-token: \"a\\nb\"\n", 2, []string{"line 1: api-token holds a control character"}},
		{"server and etcd", "server: http://127.0.0.1:7420\netcd: http://127.0.0.1:2379\n", 2, []string{"line 1: server and etcd are both set"}},
		{"not YAML", "a: [1\n", 2, []string{"not valid YAML: line 1:"}},
		{"not a mapping", "- a\n- b\n", 2, []string{"the file must be a mapping of settings"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "config.yaml", c.content)
			code, out, errs := runInProcess("config", "check", p)
			if code != c.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, out, errs)
			}
			rest := out
			for _, w := range c.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Errorf("stdout lacks %q (in order):\n%s", w, out)
					break
				}
				rest = rest[i+len(w):]
			}
			if c.code != 0 && !strings.Contains(errs, "problem(s), listed above") {
				t.Errorf("stderr: %q", errs)
			}
			if c.code != 0 {
				for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
					if !strings.HasPrefix(l, p+": ") {
						t.Errorf("problem line does not name the file: %q", l)
					}
				}
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		code, out, _ := runInProcess("config", "check", filepath.Join(dir, "absent.yaml"))
		if code != 2 || !strings.Contains(out, "cannot read config file") {
			t.Errorf("exit %d: %s", code, out)
		}
	})
	t.Run("secret readable by others", func(t *testing.T) {
		p := writeFile(t, t.TempDir(), "config.yaml", "api-token: abc\n")
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errs := runInProcess("config", "check", p)
		if code != 0 || !strings.Contains(errs, "warning: api-token: the file holds a secret and is readable by others") {
			t.Errorf("exit %d, stderr %q", code, errs)
		}
	})
	t.Run("embedded settings beside etcd", func(t *testing.T) {
		p := writeFile(t, t.TempDir(), "config.yaml", "listen: 127.0.0.1:7420\ndata: /var/lib/leasehold\nmin-free-disk: 1GiB\netcd: http://127.0.0.1:2379\n")
		code, _, errs := runInProcess("config", "check", p)
		for _, want := range []string{"warning: line 2: data: ignored: etcd is set", "warning: line 3: min-free-disk: ignored: etcd is set"} {
			if code != 0 || !strings.Contains(errs, want) {
				t.Errorf("exit %d, stderr %q; want exit 0 and %q", code, errs, want)
			}
		}
		if strings.Count(errs, "\n") != 2 {
			t.Errorf("stderr %q: want two warnings", errs)
		}
	})
}

// TestConfigFileApplies checks the order: flag, then environment, then
// file, then default; and that client commands take only the connection
// settings.
func TestConfigFileApplies(t *testing.T) {
	dir := t.TempDir()
	fileAddr, envAddr, flagAddr := closedPort(t), closedPort(t), closedPort(t)
	p := writeFile(t, dir, "config.yaml", "server: http://"+fileAddr+"\ntimeout: 5s\nqueue: mail\n")
	for _, env := range []string{"LEASEHOLD_SERVER", "LEASEHOLD_CONFIG", "LEASEHOLD_QUEUE"} {
		t.Setenv(env, "")
	}
	// timeout and queue are the daemon's? No: they are refused as settings.
	code, _, errs := runInProcess("jobs", "list", "--config", p)
	if code != 2 || !strings.Contains(errs, `"timeout" is a flag of`) {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	p = writeFile(t, dir, "config.yaml", "server: http://"+fileAddr+"\nconcurrency: 3\n")
	code, _, errs = runInProcess("jobs", "list", "--config", p)
	if code != 1 || !strings.Contains(errs, fileAddr) {
		t.Errorf("from the file: exit %d, stderr %q", code, errs)
	}
	t.Setenv("LEASEHOLD_CONFIG", p)
	code, _, errs = runInProcess("jobs", "list")
	if code != 1 || !strings.Contains(errs, fileAddr) {
		t.Errorf("file from LEASEHOLD_CONFIG: exit %d, stderr %q", code, errs)
	}
	t.Setenv("LEASEHOLD_SERVER", "http://"+envAddr)
	code, _, errs = runInProcess("jobs", "list")
	if code != 1 || !strings.Contains(errs, envAddr) {
		t.Errorf("environment over file: exit %d, stderr %q", code, errs)
	}
	code, _, errs = runInProcess("jobs", "list", "--server", "http://"+flagAddr)
	if code != 1 || !strings.Contains(errs, flagAddr) {
		t.Errorf("flag over environment: exit %d, stderr %q", code, errs)
	}
	// bench and etcd read no config file, even a broken one.
	writeFile(t, dir, "config.yaml", "nope: [\n")
	if code, _, errs := runInProcess("bench", "--jobs", "0"); code != 2 || !strings.Contains(errs, "--jobs 0") {
		t.Errorf("bench with a broken config file: exit %d, stderr %q; want its own usage error", code, errs)
	}
	code, _, errs = runInProcess("jobs", "list")
	if code != 2 || !strings.Contains(errs, "config file "+p+": not valid YAML") || !strings.Contains(errs, "leasehold config check "+p) {
		t.Errorf("broken config: exit %d, stderr %q", code, errs)
	}
}

// TestDaemonReadsConfigFile starts the daemon binary with a config file
// that sets an API token and a concurrency.
func TestDaemonReadsConfigFile(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "config.yaml", "concurrency: 3\napi-token: file-token-0123456789\nqueues: [default, mail]\nlog-level: info\n")
	d := startDaemon(t, filepath.Join(dir, "data"), "--config", p)
	r := runCLI(t, nil, "", "enqueue", "echo", "--server", d.server)
	checkOneLineError(t, "enqueue without the token", r, 1, "API token")
	// The CLI reads the same file: server is not in it, the token is.
	r = runCLI(t, nil, "", "enqueue", "echo", "--server", d.server, "--config", p)
	if r.code != 0 {
		t.Fatalf("enqueue with the config's token: %d %s", r.code, r.stderr)
	}
	var ws apiserver.WorkersResponse
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		out := okCLI(t, "workers", "list", "--json", "--server", d.server)
		if err := jsonUnmarshal(out, &ws.Workers); err != nil {
			t.Fatal(err)
		}
		if len(ws.Workers) == 1 {
			break
		}
	}
	if len(ws.Workers) != 1 || ws.Workers[0].Concurrency != 3 || strings.Join(ws.Workers[0].Queues, ",") != "default,mail" {
		t.Errorf("workers: %+v", ws.Workers)
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// LEASEHOLD_DATA names the daemon's store: bench and etcd, which take a
// --data of their own, must not read it (a benchmark's jobs, or an etcd
// member, would land in the daemon's store).
func TestDataOfBenchAndEtcdNotFromEnv(t *testing.T) {
	t.Setenv("LEASEHOLD_DATA", filepath.Join(t.TempDir(), "daemon-store"))
	for _, name := range []string{"bench", "etcd"} {
		root := newRootCmd(strings.NewReader(""), io.Discard, io.Discard)
		cmd, _, err := root.Find([]string{name})
		if err != nil || cmd.Name() != name {
			t.Fatalf("command %s: %v", name, err)
		}
		if err := bindEnv(cmd); err != nil {
			t.Fatal(err)
		}
		if f := cmd.Flags().Lookup("data"); f.Changed || f.Value.String() != f.DefValue {
			t.Errorf("%s --data = %q from LEASEHOLD_DATA, want its default %q", name, f.Value.String(), f.DefValue)
		}
	}
}

// The commands that read no config file refuse one named on their command
// line (it would be ignored silently), and leave LEASEHOLD_CONFIG, set for
// the daemon, alone.
func TestNoConfigCommandsRefuseConfigFlag(t *testing.T) {
	for _, args := range [][]string{{"bench"}, {"etcd"}} {
		r := runCLI(t, nil, "", append(args, "--config", "settings.yaml")...)
		want := "--config: 'leasehold " + args[0] + "' reads no config file: give its settings as flags"
		if r.code != exitUsage || !strings.Contains(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v --config: exit %d, stderr %q; want exit %d and one line with %q", args, r.code, r.stderr, exitUsage, want)
		}
	}
	// From the environment it is not the bench's: a usage error about
	// --jobs shows the bench got that far.
	r := runCLI(t, []string{"LEASEHOLD_CONFIG=" + filepath.Join(t.TempDir(), "missing.yaml")}, "", "bench", "--jobs", "-1")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--jobs -1") {
		t.Errorf("bench with LEASEHOLD_CONFIG: exit %d, stderr %q; want the --jobs usage error", r.code, r.stderr)
	}
}
