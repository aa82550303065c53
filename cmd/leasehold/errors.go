package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/localstore"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes, part of the CLI contract.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// cliError is an error that knows its exit code. Its message says what was
// wrong and what to do; it is printed on one line after "leasehold: " and,
// unless bare, the command's name.
type cliError struct {
	code int
	msg  string
	bare bool // printed without the command name
	// status is the HTTP status of the API answer the error reports (0:
	// none), for commands whose input cannot be what a 400 is about.
	status int
	// unreachable marks a request that reached no daemon, or lost the
	// connection before its answer (a daemon restarting, say).
	unreachable bool
	// notProcessed marks an answer the daemon gave without processing the
	// request (its 503 beyond --http-max-connections).
	notProcessed bool
	// outcomeUnknown marks a change that may or may not have been made:
	// its request was sent, and no answer says what became of it.
	outcomeUnknown bool
}

func (e *cliError) Error() string { return e.msg }

// usagef is a usage error or bad input: exit code 2.
func usagef(format string, a ...any) error {
	return &cliError{code: exitUsage, msg: fmt.Sprintf(format, a...)}
}

// failf is a failure: exit code 1.
func failf(format string, a ...any) error {
	return &cliError{code: exitFailure, msg: fmt.Sprintf(format, a...)}
}

// lockedf is the failure of a command whose --data directory another
// process holds (localstore.ErrLocked): the library says whose it is, the
// CLI what to do with its flag. ok is false for other errors.
func lockedf(err error) (_ error, ok bool) {
	var le *localstore.LockedError
	if !errors.As(err, &le) {
		return nil, false
	}
	return failf("%s: stop it, or pass another --data directory", le.Holder()), true
}

// exitCode maps an error returned by the command tree to an exit code.
// Errors that are not cliErrors come from cobra itself (unknown command,
// unknown flag, bad arguments): usage errors.
func exitCode(err error) int {
	var ce *cliError
	if errors.As(err, &ce) {
		return ce.code
	}
	return exitUsage
}

// withCommand prefixes the message of a cliError with the command's name
// (e.g. "jobs get"); any other error becomes a failure (exit 1).
func withCommand(name string, err error) error {
	if err == nil {
		return nil
	}
	var ce *cliError
	if !errors.As(err, &ce) {
		return &cliError{code: exitFailure, msg: name + ": " + err.Error()}
	}
	if ce.bare || name == "" {
		return ce
	}
	named := *ce
	named.msg, named.bare = name+": "+ce.msg, true
	return &named
}

// refusedNotBadInput makes an API's bad-request answer a failure (exit 1)
// for a command that checked all its input before the request: the
// refusal is then about the state of what it acts on, not about what was
// typed. Other errors are returned as they are.
func refusedNotBadInput(err error) error {
	var ce *cliError
	if errors.As(err, &ce) && ce.code == exitUsage && ce.status == http.StatusBadRequest {
		return &cliError{code: exitFailure, msg: ce.msg, bare: ce.bare, status: ce.status}
	}
	return err
}

// relabelEnvFlags names, in a usage error of cmd, each flag that only its
// environment variable set by that variable: "--limit 0" becomes
// "LEASEHOLD_LIMIT 0" when LEASEHOLD_LIMIT=0 is what the user wrote. (Most
// messages name flags with flagLabel already; this covers the rest.)
func relabelEnvFlags(cmd *cobra.Command, err error) {
	var ce *cliError
	if cmd == nil || !errors.As(err, &ce) || ce.code != exitUsage {
		return
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		env, ok := fromEnv(cmd, f.Name)
		if !ok || flagSource(cmd, f.Name) != 2 {
			return
		}
		ce.msg = replaceFlag(ce.msg, "--"+f.Name, env)
	})
}

// relabelConfigFlag names, in a usage error of cmd that starts with a flag
// that only the config file set ("--concurrency 0: want 1 to 100000"),
// the file and line of its value, as the error of a value that does not
// parse does: "config file F: line 2: concurrency 0: want 1 to 100000".
func relabelConfigFlag(cmd *cobra.Command, err error) {
	var ce *cliError
	if cmd == nil || !errors.As(err, &ce) || ce.code != exitUsage {
		return
	}
	prefix := prefixed(cmdName(cmd))
	rest, ok := strings.CutPrefix(ce.msg, prefix)
	if !ok {
		return
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		at := f.Annotations[configAnnotation]
		if len(at) < 2 || flagSource(cmd, f.Name) != 1 || wordIndex(rest, "--"+f.Name) != 0 {
			return
		}
		ce.msg = fmt.Sprintf("%sconfig file %s: line %s: %s", prefix, at[0], at[1], strings.TrimPrefix(rest, "--"))
	})
}

// replaceFlag replaces each whole occurrence of flag (not a prefix of a
// longer flag name) in msg by label.
func replaceFlag(msg, flag, label string) string {
	var b strings.Builder
	for {
		i := strings.Index(msg, flag)
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		end := i + len(flag)
		if end < len(msg) && (msg[end] == '-' || msg[end] >= 'a' && msg[end] <= 'z') {
			b.WriteString(msg[:end])
		} else {
			b.WriteString(msg[:i] + label)
		}
		msg = msg[end:]
	}
}

// reportError prints err on one line to w.
func reportError(w io.Writer, err error) {
	msg := err.Error()
	var ce *cliError
	if !errors.As(err, &ce) {
		// A cobra error: unknown command or flag, wrong arguments. Its
		// suggestions come as a list on lines of their own.
		if cmd, sugg, ok := strings.Cut(msg, "\n\nDid you mean this?\n"); ok {
			msg = cmd + ": did you mean " + strings.Join(strings.Fields(sugg), " or ") + "? run 'leasehold --help' for usage"
		} else {
			msg += ": run 'leasehold --help' for usage"
		}
	}
	fmt.Fprintln(w, "leasehold: "+apiserver.OneLine(msg))
}
