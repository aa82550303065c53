package main

import "testing"

// TestDaemonNamesTheConfigLineOfABadValue: a value the daemon refuses
// once every source is read (a bound, a queue name, a port) is named as
// the user set it: from a variable by the variable (LEASEHOLD_CONCURRENCY
// 0), and from the config file by the file and line, as a value that does
// not parse is; the message named the flag (--concurrency 0), which the
// command line did not hold. One line, exit 2, before anything is opened.
func TestDaemonNamesTheConfigLineOfABadValue(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, dir, "not-a-dir", "")
	cases := []struct {
		name, content, want string
	}{
		{"concurrency", "log-level: info\nconcurrency: 0\n", "line 2: concurrency 0: want 1 to 100000"},
		{"lease-ttl", "lease-ttl: 1s\n", "line 1: lease-ttl 1s: want whole seconds"},
		{"retention", "log-level: info\n\nretention: 0s\n", "line 3: retention 0s: want a positive duration"},
		{"queues", "queues: 'a,,b'\n", "line 1: queues: queue is empty"},
		{"listen", "listen: 127.0.0.1:99999\n", `line 1: listen "127.0.0.1:99999": bad port`},
		{"http-max-connections", "http-max-connections: -1\n", "line 1: http-max-connections -1 is negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, dir, c.name+".yaml", c.content)
			code, out, errs := runInProcess("daemon", "--config", p, "--data", data)
			r := cliResult{code: code, stdout: out, stderr: errs}
			checkOneLineError(t, "daemon", r, exitUsage, "daemon: config file "+p+": "+c.want)
		})
	}
	// From a variable, the variable; on the command line, the flag.
	t.Setenv("LEASEHOLD_CONCURRENCY", "0")
	code, out, errs := runInProcess("daemon", "--data", data)
	checkOneLineError(t, "daemon, variable", cliResult{code: code, stdout: out, stderr: errs}, exitUsage, "daemon: LEASEHOLD_CONCURRENCY 0: want 1 to 100000")
	code, out, errs = runInProcess("daemon", "--data", data, "--concurrency", "0")
	checkOneLineError(t, "daemon, flag", cliResult{code: code, stdout: out, stderr: errs}, exitUsage, "daemon: --concurrency 0: want 1 to 100000")
}
