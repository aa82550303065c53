package main

import (
	"strings"
	"testing"
)

// TestEnqueueErrorsNameTheirSource: a bad enqueue option is refused in one
// line naming it as the user set it, its environment variable if that set
// it (the flag is nowhere on the command line), and an empty --queue says
// what to do. All are refused before any request: the server is closed.
func TestEnqueueErrorsNameTheirSource(t *testing.T) {
	server := "http://" + closedPort(t)
	cases := []struct {
		env     []string
		args    []string
		want    string
		notWant string
	}{
		{nil, []string{"--queue", ""}, `--queue is empty: leave it out for the "default" queue, or name one`, ""},
		{[]string{"LEASEHOLD_QUEUE=a b"}, nil, `LEASEHOLD_QUEUE: queue "a b" must be`, "--queue"},
		{nil, []string{"--queue", "a b"}, `enqueue: queue "a b" must be`, "LEASEHOLD_QUEUE"},
		{[]string{"LEASEHOLD_PRIORITY=9"}, nil, "LEASEHOLD_PRIORITY 9: want 1 (first) to 4 (last)", "--priority"},
		{[]string{"LEASEHOLD_PRIORITY=3"}, []string{"--priority", "9"}, "--priority 9: want 1 (first) to 4 (last)", "LEASEHOLD_PRIORITY"},
		{[]string{"LEASEHOLD_COUNT=0"}, nil, "LEASEHOLD_COUNT 0: want 1 or more", "--count"},
		{nil, []string{"--count", "99999999999"}, "--count 99999999999: want at most 1000000; for more, run enqueue again", ""},
		{[]string{"LEASEHOLD_MAX_ATTEMPTS=0"}, nil, "LEASEHOLD_MAX_ATTEMPTS 0: want 1 or more", "--max-attempts"},
		{[]string{"LEASEHOLD_TIMEOUT=-1s"}, nil, "LEASEHOLD_TIMEOUT -1s is negative", "--timeout"},
		{[]string{"LEASEHOLD_TIMEOUT=1us"}, nil, "LEASEHOLD_TIMEOUT 1µs is under 1ms", "--timeout"},
		{[]string{"LEASEHOLD_DELAY=-1s"}, nil, "LEASEHOLD_DELAY -1s is negative", "--delay"},
		{[]string{"LEASEHOLD_AT=tomorrow"}, nil, `LEASEHOLD_AT "tomorrow" is not an RFC 3339 time`, "--at"},
		{[]string{"LEASEHOLD_AT=2262-01-01T00:00:01Z"}, nil, "LEASEHOLD_AT 2262-01-01T00:00:01Z is after 2262-01-01T00:00:00Z", "--at"},
		{[]string{"LEASEHOLD_METADATA=nope"}, nil, "LEASEHOLD_METADATA is not valid JSON", "--metadata"},
		{[]string{"LEASEHOLD_METADATA={\"m\":\"\xff\"}"}, nil, "LEASEHOLD_METADATA is not valid UTF-8", "--metadata"},
		{[]string{"LEASEHOLD_UNIQUE_PERIOD=-1h"}, nil, "LEASEHOLD_UNIQUE_PERIOD -1h0m0s is negative", "--unique-period"},
		{[]string{"LEASEHOLD_UNIQUE_STATES=running"}, nil, `LEASEHOLD_UNIQUE_STATES "running": want`, "--unique-states"},
	}
	for _, c := range cases {
		args := append(append([]string{"enqueue", "echo", "{}"}, c.args...), "--server", server)
		what := strings.Join(append(append([]string(nil), c.env...), args...), " ")
		r := runCLI(t, c.env, "", args...)
		checkOneLineError(t, what, r, exitUsage, c.want)
		if c.notWant != "" && strings.Contains(r.stderr, c.notWant) {
			t.Errorf("%s: stderr %q names %s, which the user did not set", what, r.stderr, c.notWant)
		}
	}
}

// Every command's usage errors name a value set by an environment
// variable by that variable, messages that name the flag included
// (relabelEnvFlags); the flag given on the command line keeps its name.
func TestUsageErrorsNameTheEnvironmentVariable(t *testing.T) {
	server := "http://" + closedPort(t)
	data := t.TempDir()
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"LEASEHOLD_LIMIT=0"}, []string{"jobs", "list", "--server", server}, "jobs list: LEASEHOLD_LIMIT 0: want 1 to 10000"},
		{[]string{"LEASEHOLD_LIMIT=5"}, []string{"jobs", "list", "--server", server, "--limit", "0"}, "jobs list: --limit 0: want 1 to 10000"},
		{[]string{"LEASEHOLD_STATE=bogus"}, []string{"jobs", "list", "--server", server}, `LEASEHOLD_STATE: unknown state "bogus"`},
		{[]string{"LEASEHOLD_CONCURRENCY=0"}, []string{"daemon", "--data", data, "--listen", "127.0.0.1:0"}, "daemon: LEASEHOLD_CONCURRENCY 0: want 1 to 100000"},
		{[]string{"LEASEHOLD_LEASE_TTL=1s"}, []string{"daemon", "--data", data, "--listen", "127.0.0.1:0"}, "daemon: LEASEHOLD_LEASE_TTL 1s: want whole seconds"},
	} {
		what := strings.Join(append(append([]string(nil), c.env...), c.args...), " ")
		checkOneLineError(t, what, runCLI(t, c.env, "", c.args...), exitUsage, c.want)
	}
}

func TestReplaceFlagMatchesWholeNames(t *testing.T) {
	got := replaceFlag("--name x, --namespace y, --name: z, --name", "--name", "LEASEHOLD_NAME")
	if want := "LEASEHOLD_NAME x, --namespace y, LEASEHOLD_NAME: z, LEASEHOLD_NAME"; got != want {
		t.Errorf("replaceFlag: %q, want %q", got, want)
	}
}

// A payload of "-" with nothing on stdin (a pipe that produced nothing, a
// redirect from an empty file) says so and how to give one, not that ""
// is not valid JSON; nothing is sent (the server is closed).
func TestEnqueueEmptyStdinPayload(t *testing.T) {
	server := "http://" + closedPort(t)
	for _, stdin := range []string{"", " \n"} {
		r := runCLI(t, nil, stdin, "enqueue", "echo", "-", "--server", server)
		checkOneLineError(t, "enqueue echo - with stdin "+strings.TrimSpace(stdin), r, exitUsage, `payload "-" read nothing from stdin`)
	}
}
