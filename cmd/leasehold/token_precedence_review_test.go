package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A token on the command line or in LEASEHOLD_API_TOKEN wins over an
// api-token-file of the config file (a flag wins, then its variable, then
// the file), rather than making every command a usage error.
func TestConfigTokenFileYieldsToStrongerToken(t *testing.T) {
	for _, env := range []string{"LEASEHOLD_SERVER", "LEASEHOLD_CONFIG", "LEASEHOLD_API_TOKEN", "LEASEHOLD_API_TOKEN_FILE"} {
		t.Setenv(env, "")
	}
	got := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jobs":[]}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	tokenFile := writeFile(t, dir, "token", "from-file\n")
	cfg := writeFile(t, dir, "config.yaml", "api-token-file: "+tokenFile+"\nserver: "+srv.URL+"\n")

	code, _, errs := runInProcess("jobs", "list", "--config", cfg, "--api-token", "from-flag")
	if strings.Contains(errs, "both set") || code == exitUsage {
		t.Fatalf("--api-token with api-token-file in the config file: exit %d, stderr %q", code, errs)
	}
	if h := <-got; h != "Bearer from-flag" {
		t.Errorf("flag: sent %q, want the command line's token", h)
	}

	t.Setenv("LEASEHOLD_API_TOKEN", "from-env")
	code, _, errs = runInProcess("jobs", "list", "--config", cfg)
	if strings.Contains(errs, "both set") || code == exitUsage {
		t.Fatalf("LEASEHOLD_API_TOKEN with api-token-file in the config file: exit %d, stderr %q", code, errs)
	}
	if h := <-got; h != "Bearer from-env" {
		t.Errorf("environment: sent %q, want the variable's token", h)
	}

	// The command line wins over the environment too.
	t.Setenv("LEASEHOLD_API_TOKEN", "")
	t.Setenv("LEASEHOLD_API_TOKEN_FILE", tokenFile)
	code, _, errs = runInProcess("jobs", "list", "--server", srv.URL, "--api-token", "from-flag")
	if strings.Contains(errs, "both set") || code == exitUsage {
		t.Fatalf("--api-token with LEASEHOLD_API_TOKEN_FILE: exit %d, stderr %q", code, errs)
	}
	if h := <-got; h != "Bearer from-flag" {
		t.Errorf("flag over environment: sent %q, want the command line's token", h)
	}
	t.Setenv("LEASEHOLD_API_TOKEN_FILE", "")

	// An empty --api-token does not turn off the config file's token.
	code, _, errs = runInProcess("jobs", "list", "--config", cfg, "--api-token", "")
	if code == exitUsage {
		t.Fatalf("empty --api-token with api-token-file in the config file: exit %d, stderr %q", code, errs)
	}
	if h := <-got; h != "Bearer from-file" {
		t.Errorf("empty flag: sent %q, want the file's token", h)
	}

	// Both in the config file stays a usage error.
	both := writeFile(t, dir, "both.yaml", "api-token: x\napi-token-file: "+filepath.Join(dir, "token")+"\nserver: "+srv.URL+"\n")
	if code, _, errs := runInProcess("jobs", "list", "--config", both); code != exitUsage || !strings.Contains(errs, "both set") {
		t.Errorf("both in the config file: exit %d, stderr %q", code, errs)
	}
}

// A daemon given an empty API token (--api-token "$TOKEN" with TOKEN
// unset, or an empty api-token in the config file) refuses to start,
// rather than start taking changes from anyone.
func TestDaemonRefusesEmptyAPIToken(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, nil, "", "daemon", "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--api-token", " ")
	checkOneLineError(t, "daemon --api-token ' '", r, exitUsage, "--api-token is set but empty")
	cfg := writeFile(t, dir, "config.yaml", "api-token: \"\"\n")
	r = runCLI(t, nil, "", "daemon", "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--config", cfg)
	checkOneLineError(t, "daemon with an empty api-token in its config file", r, exitUsage, "is set but empty")
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Errorf("the refused daemon created its data directory: %v", err)
	}
}
