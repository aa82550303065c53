// Command leasehold is the leasehold daemon and its command-line client.
//
// In embedded mode one daemon owns a Pebble data directory; every other
// command talks to it over its HTTP API (see internal/apiserver). Exit
// codes: 0 success, 1 failure, 2 usage error or bad input. Errors go to
// stderr on one line.
package main

import (
	"io"
	"os"
)

func main() {
	if len(os.Args) >= 2 && os.Args[1] == execGuardArg {
		os.Exit(runExecGuard(os.Args[2:], os.Stdin, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes one command line and returns its exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd(stdin, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	relabelEnvFlags(cmd, err)
	relabelConfigFlag(cmd, err)
	reportError(stderr, err)
	return exitCode(err)
}
