package main

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A flag value its flag cannot take is refused in the CLI's words — what
// the flag wants — not strconv's or time's; a negative number, which
// pflag reads as a shorthand flag, says so.
func TestFlagValueErrorsSayWhatTheFlagWants(t *testing.T) {
	cases := []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"enqueue", "echo", "--priority", "x"}, `leasehold: enqueue: --priority "x": want a whole number: see 'leasehold enqueue --help'`},
		{nil, []string{"jobs", "list", "--limit", "1.5"}, `leasehold: jobs list: --limit "1.5": want a whole number: see 'leasehold jobs list --help'`},
		{nil, []string{"daemon", "--lease-ttl", "soon"}, `leasehold: daemon: --lease-ttl "soon": want a duration such as 30s or 5m: see 'leasehold daemon --help'`},
		{nil, []string{"bench", "--ceiling=maybe"}, `leasehold: bench: --ceiling "maybe": want true or false: see 'leasehold bench --help'`},
		{nil, []string{"enqueue", "echo", "--priority", "99999999999999999999"}, `leasehold: enqueue: --priority "99999999999999999999": out of range: see 'leasehold enqueue --help'`},
		{nil, []string{"daemon", "--queue-concurrency", "pdf=many"}, `leasehold: daemon: --queue-concurrency "pdf=many": want QUEUE=N pairs, comma-separated, such as pdf=4,mail=2: see 'leasehold daemon --help'`},
		{nil, []string{"queues", "limit", "pdf", "-1"}, `leasehold: queues limit: -1: a negative number is not valid here (it reads as a flag): see 'leasehold queues limit --help'`},
		{[]string{"LEASEHOLD_PRIORITY=x"}, []string{"enqueue", "echo"}, `leasehold: enqueue: environment variable LEASEHOLD_PRIORITY="x": want a whole number: fix or unset it`},
	}
	for _, c := range cases {
		r := runCLI(t, c.env, "", c.args...)
		if got := strings.TrimSpace(r.stderr); r.code != exitUsage || got != c.want {
			t.Errorf("%v %v: exit %d, stderr:\n%s\nwant exit %d and\n%s", c.env, c.args, r.code, got, exitUsage, c.want)
		}
	}
}

// An --exec kind named as a built-in one replaces it, and says so.
func TestExecReplacingBuiltinKindIsLogged(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	kinds, err := daemonKinds([]string{"echo=cat", "thumbnail=true"}, 0, 0, log)
	if err != nil {
		t.Fatal(err)
	}
	if kinds["echo"].validate != nil || kinds["thumbnail"].handler == nil || kinds["sleep"].validate == nil {
		t.Fatalf("kinds: %v", kinds)
	}
	if got := buf.String(); strings.Count(got, "--exec replaces a built-in kind") != 1 || !strings.Contains(got, "kind=echo") {
		t.Fatalf("log:\n%s\nwant one line saying --exec replaces the built-in kind echo", got)
	}
}

// JSON logs write durations as text (30s), as the text format does, not
// as nanoseconds.
func TestJSONLogDurationsAreText(t *testing.T) {
	var buf strings.Builder
	log, err := newLogger(&globalOpts{logFormat: "json", logLevel: "info"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("session started", slog.Duration("ttl", 30*time.Second))
	if got := buf.String(); !strings.Contains(got, `"ttl":"30s"`) {
		t.Fatalf("log line %s, want \"ttl\":\"30s\"", got)
	}
}
