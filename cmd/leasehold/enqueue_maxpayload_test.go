package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// In shared mode enqueue checks payloads against the --max-payload the
// cluster's daemons run with (flag or LEASEHOLD_MAX_PAYLOAD), not the
// default, and refuses one the store cannot fit, naming the flag.
func TestEnqueueSharedMaxPayload(t *testing.T) {
	// A `leasehold etcd` process, as an operator runs it, not a member
	// embedded in this test process: under the race detector, on a loaded
	// 2-core machine, that one took longer than the store's write deadline
	// (3 s and a second per MiB) to apply the writes of the three 1.5 MiB
	// jobs below (each stored twice), and the enqueue failed as if a
	// member hung.
	ep := spEtcd(t, "--max-request-bytes", "8MiB")
	payload := `"` + strings.Repeat("x", 1536<<10) + `"` // over the default 1 MiB
	base := []string{"enqueue", "echo", "-", "--etcd", ep, "--etcd-max-request-bytes", "8MiB"}

	r := runCLI(t, nil, payload, base...)
	checkOneLineError(t, "1.5 MiB payload with the default --max-payload", r, 2, "payload")

	for name, env := range map[string][]string{"--max-payload": nil, "LEASEHOLD_MAX_PAYLOAD": {"LEASEHOLD_MAX_PAYLOAD=2MiB"}} {
		args := base
		if env == nil {
			args = append(append([]string(nil), base...), "--max-payload", "2MiB")
		}
		r = runCLI(t, env, payload, args...)
		if r.code != 0 || len(strings.TrimSpace(r.stdout)) != 26 {
			t.Errorf("1.5 MiB payload with %s 2MiB: exit %d\nstdout: %s\nstderr: %s", name, r.code, r.stdout, r.stderr)
		}
	}

	// The daemons' config file, shared with the CLI, sets it too.
	cfg := filepath.Join(t.TempDir(), "leasehold.yaml")
	if err := os.WriteFile(cfg, []byte("max-payload: 2MiB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, nil, payload, append(append([]string(nil), base...), "--config", cfg)...)
	if r.code != 0 || len(strings.TrimSpace(r.stdout)) != 26 {
		t.Errorf("1.5 MiB payload with max-payload 2MiB in the config file: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	r = runCLI(t, nil, payload, append(append([]string(nil), base...), "--max-payload", "2MiB", "--count", "3")...)
	if r.code != 0 || len(strings.Fields(r.stdout)) != 3 {
		t.Errorf("three 1.5 MiB payloads with --max-payload 2MiB: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	r = runCLI(t, nil, "{}", append(append([]string(nil), base...), "--max-payload", "8MiB")...)
	checkOneLineError(t, "--max-payload over what the store fits", r, 2, "--max-payload 8MiB")
	r = runCLI(t, []string{"LEASEHOLD_MAX_PAYLOAD=8MiB"}, "{}", base...)
	checkOneLineError(t, "LEASEHOLD_MAX_PAYLOAD over what the store fits", r, 2, "LEASEHOLD_MAX_PAYLOAD 8MiB")
}
