package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestConfigCheckReportsEveryProblem: a file with mistakes of every kind
// gets one line per mistake, each with the line of its setting (or of its
// list item), in one run; checks of the values together (bounds, exec
// entries, schedules, log level) are not held back by mistakes of syntax.
func TestConfigCheckReportsEveryProblem(t *testing.T) {
	content := strings.Join([]string{
		"concurency: 5",                  // 1: unknown key
		"concurrency: lots",              // 2: not a number
		"max-payload: 3XB",               // 3: not a size
		"lease-ttl: 1s",                  // 4: below the minimum
		"log-level: loud",                // 5: no such level
		"listen: 127.0.0.1:99999",        // 6: bad port
		"exec:",                          // 7
		"  - ok=./ok.sh",                 // 8
		"  - thumbnail",                  // 9: not KIND=COMMAND
		"  - ok=./again.sh",              // 10: kind given twice
		"periodic: ['nightly|bad|echo']", // 11: bad cron spec
		"retention: 0s",                  // 12: not positive
		"tls-cert: " + writeFile(t, t.TempDir(), "cert.pem", "x"), // 13: without tls-key
		"log-format: xml", // 14: no such format
		"",
	}, "\n")
	p := writeFile(t, t.TempDir(), "config.yaml", content)
	code, out, errs := runInProcess("config", "check", p)
	want := []string{
		`line 1: "concurency" is not a setting`,
		`line 2: concurrency: "lots" is not a whole number`,
		`line 3: max-payload: "3XB" is not a size`,
		`line 4: lease-ttl 1s: want whole seconds, at least 2s`,
		`line 5: log-level "loud": want debug, info, warn or error`,
		`line 6: listen "127.0.0.1:99999": bad port "99999"`,
		`line 9: exec "thumbnail": want KIND=COMMAND`,
		`line 10: exec: kind ok is given twice`,
		`line 11: periodic "nightly|bad|echo": cron spec "bad"`,
		`line 12: retention 0s: want a positive duration`,
		`line 13: tls-cert and tls-key go together`,
		`line 14: log-format "xml": want text, json or auto`,
	}
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Errorf("%d problem lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		if i >= len(lines) || !strings.HasPrefix(lines[i], p+": "+w) {
			t.Errorf("problem %d: want %q, got:\n%s", i+1, w, out)
			break
		}
	}
	if !strings.Contains(errs, fmt.Sprintf("has %d problem(s)", len(want))) {
		t.Errorf("stderr: %q", errs)
	}
}

// TestConfigCheckRefusesWhatDaemonRefuses runs the daemon with each file
// the checker is given: the checker must refuse (with the setting's line)
// every file the daemon refuses, and pass every file it takes. The daemon
// gets a --data that is a file, so that one that takes its settings stops
// at opening its store (exit 1) instead of starting.
func TestConfigCheckRefusesWhatDaemonRefuses(t *testing.T) {
	dir := t.TempDir()
	notDir := writeFile(t, dir, "not-a-dir", "")
	token := writeFile(t, dir, "token", "secret-token\n")
	cert := writeFile(t, dir, "cert.pem", "not a certificate")
	cases := []struct {
		name, content string
		refused       bool
	}{
		{"exec without command", "exec: thumbnail\n", true},
		{"exec bad kind", "exec: 'bad kind=./x.sh'\n", true},
		{"exec twice", "exec: [a=./a.sh, a=./b.sh]\n", true},
		{"lease-ttl too short", "lease-ttl: 1s\n", true},
		{"lease-ttl not whole", "lease-ttl: 2500ms\n", true},
		{"log-level", "log-level: loud\n", true},
		{"log-format", "log-format: xml\n", true},
		{"listen not host:port", "listen: localhost\n", true},
		{"listen bad port", "listen: 127.0.0.1:99999\n", true},
		{"concurrency 0", "concurrency: 0\n", true},
		{"retention 0", "retention: 0s\n", true},
		{"reap-interval 0", "reap-interval: 0s\n", true},
		{"negative shutdown-timeout", "shutdown-timeout: -1s\n", true},
		{"negative default-timeout", "default-timeout: -1s\n", true},
		{"negative http-write-timeout", "http-write-timeout: -1s\n", true},
		{"negative http-max-connections", "http-max-connections: -1\n", true},
		{"bad queue", "queues: [default, 'no spaces']\n", true},
		{"bad namespace", "namespace: 'a b'\n", true},
		{"queue-concurrency unserved", "queue-concurrency: mail=2\n", true},
		{"queue-concurrency over concurrency", "concurrency: 2\nqueue-concurrency: default=3\n", true},
		{"periodic bad spec", "periodic: ['n|bad|echo']\n", true},
		{"periodic unknown kind", "periodic: ['n|@daily|thumbnail']\n", true},
		{"periodic bad payload", "periodic: ['n|@daily|sleep|{\"seconds\": \"x\"}']\n", true},
		{"periodic name twice", "periodic: ['n|@daily|echo', 'n|@hourly|echo']\n", true},
		{"max-payload over the store's limit", "max-payload: 1GiB\n", true},
		{"tls-cert alone", "tls-cert: " + cert + "\n", true},
		{"bad certificate", "tls-cert: " + cert + "\ntls-key: " + cert + "\n", true},
		{"token and token file", "api-token: abc\napi-token-file: " + token + "\n", true},
		{"token with a line break", "api-token: \"a\\nb\"\n", true},
		{"empty token", "api-token: ''\n", true},
		{"blank token", "api-token: '  '\n", true},
		{"etcd not a URL", "etcd: 127.0.0.1:2379\n", true},
		{"etcd-cert alone", "etcd: http://127.0.0.1:2379\netcd-cert: " + cert + "\n", true},
		{"etcd-user alone", "etcd: http://127.0.0.1:2379\netcd-user: u\n", true},
		{"etcd-max-request-bytes too small", "etcd: http://127.0.0.1:2379\netcd-max-request-bytes: 1KiB\n", true},
		{"data empty", "data: ''\n", true},
		{"taken", "exec: [a=./a.sh, b=./b.sh]\nperiodic: ['n|@daily|a']\nlease-ttl: 10s\nqueues: [default, mail]\nqueue-concurrency: mail=2\napi-token-file: " + token + "\nlog-level: warn\nlisten: 127.0.0.1:0\n", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "config.yaml", c.content)
			args := []string{"daemon", "--config", p}
			if !strings.Contains(c.content, "data:") {
				args = append(args, "--data", notDir)
			}
			d := runCLI(t, nil, "", args...)
			if want := map[bool]int{true: 2, false: 1}[c.refused]; d.code != want {
				t.Fatalf("the daemon exits %d, want %d: %s", d.code, want, d.stderr)
			}
			code, out, _ := runInProcess("config", "check", p)
			if !c.refused {
				if code != 0 {
					t.Errorf("config check refuses what the daemon takes: exit %d\n%s", code, out)
				}
				return
			}
			if code != 2 || !strings.Contains(out, p+": line ") {
				t.Errorf("config check: exit %d, want 2 with the line of the setting; the daemon said: %s\nconfig check said:\n%s", code, d.stderr, out)
			}
		})
	}
}

// A refusal that comes from the store's limits in shared mode, which the
// daemon makes only once connected to etcd, is reported before.
func TestConfigCheckSharedMaxPayload(t *testing.T) {
	p := writeFile(t, t.TempDir(), "config.yaml", "etcd: http://127.0.0.1:2379\nmax-payload: 1MiB\n")
	code, out, _ := runInProcess("config", "check", p)
	if code != 2 || !strings.Contains(out, p+": line 2: max-payload: refused by the daemon: max payload 1048576 bytes does not fit") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	p = writeFile(t, t.TempDir(), "config.yaml", "etcd: http://127.0.0.1:2379\nmax-payload: 1MiB\netcd-max-request-bytes: 4MiB\n")
	if code, out, _ := runInProcess("config", "check", p); code != 0 {
		t.Errorf("with room for it: exit %d:\n%s", code, out)
	}
}

// config check checks the file, not the environment it runs in: an empty
// LEASEHOLD_API_TOKEN there neither fails a good file nor hides a bad
// one's problems.
func TestConfigCheckIgnoresEmptyTokenVariables(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", "concurrency: 5\n")
	bad := writeFile(t, dir, "bad.yaml", "concurrency: 5\nlease-ttl: 1s\n")
	for _, env := range []string{"LEASEHOLD_API_TOKEN=", "LEASEHOLD_API_TOKEN_FILE="} {
		if r := runCLI(t, []string{env}, "", "config", "check", good); r.code != 0 {
			t.Errorf("%s: good file: exit %d, stderr %s", env, r.code, r.stderr)
		}
		if r := runCLI(t, []string{env}, "", "config", "check", bad); r.code != exitUsage || !strings.Contains(r.stdout+r.stderr, "line 2: lease-ttl 1s") {
			t.Errorf("%s: bad file: exit %d, out %s err %s; want its lease-ttl reported", env, r.code, r.stdout, r.stderr)
		}
	}
}
