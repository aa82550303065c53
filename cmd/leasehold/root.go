package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/leasehold/leasehold/internal/apiserver"
)

// envPrefix: every flag is also read from LEASEHOLD_<FLAG> (upper case,
// dashes as underscores) when it is not set on the command line.
const envPrefix = "LEASEHOLD_"

// globalOpts are the flags every command has.
type globalOpts struct {
	logFormat string
	logLevel  string
}

func newRootCmd(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	g := &globalOpts{}
	root := &cobra.Command{
		Use:   "leasehold",
		Short: "A durable job queue and worker daemon",
		Long: `leasehold is a durable job queue and worker daemon.

Run 'leasehold daemon' to serve a data directory; the other commands talk to
it over HTTP (--server). In shared mode ('leasehold daemon --etcd URL,...'),
any number of daemons share one etcd cluster, and the other commands talk to
etcd directly when given --etcd. Every flag can also be set with an environment
variable LEASEHOLD_<FLAG>, e.g. LEASEHOLD_SERVER or LEASEHOLD_LEASE_TTL; a
flag given on the command line wins. (Inside a job run by --exec,
LEASEHOLD_KIND names the job's kind and is not read as --kind; the filters
of 'jobs cancel' come from the command line only.) Exit codes: 0 success,
1 failure, 2 usage error or bad input.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindEnv(cmd); err != nil {
				return err
			}
			if err := applyConfig(cmd); err != nil {
				return err
			}
			// Every command checks the global flags, whether it logs
			// or not.
			if _, err := newLogger(g, io.Discard); err != nil {
				return withCommand(cmdName(cmd), err)
			}
			if err := checkEmptyToken(cmd); err != nil {
				return err
			}
			if err := checkNonEmpty(cmd); err != nil {
				return err
			}
			if err := checkStore(cmd); err != nil {
				return err
			}
			if err := checkTarget(cmd); err != nil {
				return err
			}
			return checkSharedOnly(cmd)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("missing command: run 'leasehold --help' to list them")
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "auto", "log format: text, json, or auto (text on a terminal, json otherwise)")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().String("config", "", "read settings from this YAML or JSON file (see 'leasehold config --help'); flags and LEASEHOLD_* variables win over it")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		name := cmdName(cmd)
		return &cliError{code: exitUsage, bare: true,
			msg: fmt.Sprintf("%s%s: see 'leasehold %s--help'", prefixed(name), flagErrorText(err), suffixed(name))}
	})
	root.AddCommand(newDaemonCmd(g), newEnqueueCmd(), newJobsCmd(), newWorkersCmd(), newEtcdCmd(g), newBenchCmd(g))
	root.AddCommand(newConfigCmd())
	root.AddCommand(newQueuesCmd(), newPeriodicCmd())
	root.AddCommand(newBackupCmd(), newRestoreCmd())
	return root
}

// flagErrorText says what is wrong with a command line that pflag could
// not parse, in the CLI's words rather than strconv's: a value its flag
// cannot take says what the flag wants; a negative number, which reads as
// a shorthand flag ("-1"), says so.
func flagErrorText(err error) string {
	var ne *pflag.NotExistError
	if errors.As(err, &ne) {
		if sh := ne.GetSpecifiedShortnames(); sh != "" && strings.Trim(sh, "0123456789.") == "" {
			return fmt.Sprintf("-%s: a negative number is not valid here (it reads as a flag)", sh)
		}
	}
	var ive *pflag.InvalidValueError
	if errors.As(err, &ive) {
		return fmt.Sprintf("--%s %q: %s", ive.GetFlag().Name, apiserver.TruncateString(ive.GetValue(), 60), flagValueText(err))
	}
	return err.Error()
}

// flagValueText says what is wrong with a flag's value: what the flag
// wants, for the types whose parse errors are strconv's or time's; the
// flag's own error otherwise (a --exec or --periodic value says what it
// wants itself).
func flagValueText(err error) string {
	var ive *pflag.InvalidValueError
	if !errors.As(err, &ive) {
		return err.Error()
	}
	switch ive.GetFlag().Value.Type() {
	case "duration", "int", "float64", "bool":
		if errors.Is(err, strconv.ErrRange) {
			return "out of range"
		}
		return "want " + typeHint(ive.GetFlag())
	case "stringToInt":
		return "want QUEUE=N pairs, comma-separated, such as pdf=4,mail=2"
	}
	return apiserver.OneLine(ive.Unwrap().Error())
}

func prefixed(name string) string {
	if name == "" {
		return ""
	}
	return name + ": "
}

func suffixed(name string) string {
	if name == "" {
		return ""
	}
	return name + " "
}

// cmdName is the command's path without the program name: "jobs get".
func cmdName(cmd *cobra.Command) string {
	return strings.TrimPrefix(strings.TrimPrefix(cmd.CommandPath(), "leasehold"), " ")
}

// action wraps a command's body so that its errors carry the command's name
// and an exit code.
func action(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return withCommand(cmdName(cmd), fn(cmd, args))
	}
}

// argsBetween accepts lo to hi positional arguments (hi < 0: no upper
// bound); usage names them for the error.
func argsBetween(lo, hi int, usage string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) >= lo && (hi < 0 || len(args) <= hi) {
			return nil
		}
		name := cmdName(cmd)
		what := "too many arguments"
		if len(args) < lo {
			what = "missing arguments"
		}
		return &cliError{code: exitUsage, bare: true,
			msg: fmt.Sprintf("%s: %s: usage: leasehold %s %s", name, what, name, usage)}
	}
}

// envName is the environment variable of a flag.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// bindEnv sets every flag not given on the command line from its
// environment variable, if that is set and not empty. A repeatable flag
// takes one value per line of its variable.
func bindEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" || len(f.Annotations[noEnvAnnotation]) > 0 {
			return
		}
		name := envName(f.Name)
		v, ok := os.LookupEnv(name)
		if !ok || strings.TrimSpace(v) == "" || jobEnv(name) {
			return
		}
		values := []string{v}
		if _, isSlice := f.Value.(pflag.SliceValue); isSlice {
			values = nonEmptyLines(v)
		}
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[envAnnotation] = []string{name}
		for _, x := range values {
			if serr := cmd.Flags().Set(f.Name, x); serr != nil {
				err = &cliError{code: exitUsage, bare: true,
					msg: fmt.Sprintf("%senvironment variable %s=%q: %s: fix or unset it", prefixed(cmdName(cmd)), name, x, flagValueText(serr))}
				return
			}
		}
	})
	return err
}

// checkEmptyToken refuses a daemon that ends up without an API token
// although one was asked for, empty: LEASEHOLD_API_TOKEN="$TOKEN" or
// LEASEHOLD_API_TOKEN_FILE="$F" with the variable unset, or an empty
// --api-token or --api-token-file (from any source: a flag, a config
// file). Such a daemon would take changes from anyone. (bindEnv ignores
// empty variables.) config check makes the same check of a file.
func checkEmptyToken(cmd *cobra.Command) error {
	err := emptyTokenEnv(cmd)
	if err == nil {
		err = emptyToken(cmd)
	}
	if err != nil {
		return withCommand(cmdName(cmd), err)
	}
	return nil
}

// unsetToken reports whether cmd is a daemon whose --api-token and
// --api-token-file are both empty.
func unsetToken(cmd *cobra.Command) bool {
	token, file := cmd.Flags().Lookup("api-token"), cmd.Flags().Lookup("api-token-file")
	return topCommand(cmd) == "daemon" && token != nil && file != nil &&
		strings.TrimSpace(token.Value.String()) == "" && strings.TrimSpace(file.Value.String()) == ""
}

// emptyTokenEnv is checkEmptyToken's check of the environment: a
// LEASEHOLD_API_TOKEN or LEASEHOLD_API_TOKEN_FILE set but empty (bindEnv
// ignores empty variables).
func emptyTokenEnv(cmd *cobra.Command) error {
	if !unsetToken(cmd) {
		return nil
	}
	for _, c := range []struct{ name, what string }{
		{"api-token", "give the token"},
		{"api-token-file", "name the token's file"},
	} {
		env := envName(c.name)
		if v, ok := os.LookupEnv(env); ok && strings.TrimSpace(v) == "" && !cmd.Flags().Lookup(c.name).Changed {
			return usagef("%s is set but empty: %s, or unset it to run without a token", env, c.what)
		}
	}
	return nil
}

// emptyToken is checkEmptyToken's check of the flags, whatever set them
// (the command line, a config file: config check makes it of a file).
func emptyToken(cmd *cobra.Command) error {
	if !unsetToken(cmd) {
		return nil
	}
	if flagSource(cmd, "api-token-file") > 0 {
		return usagef("%s is set but empty: name the token's file, or leave it unset to run without a token", flagLabel(cmd, "api-token-file"))
	}
	// "--api-token $TOKEN" with TOKEN unset (or a config file's empty
	// api-token) would start a daemon that takes changes from anyone.
	if flagSource(cmd, "api-token") > 0 {
		return usagef("%s is set but empty: give the token, or leave it unset to run without one", flagLabel(cmd, "api-token"))
	}
	return nil
}

// jobEnv reports whether the variable name describes the job that an
// --exec command runs (see exec.go) rather than a flag: LEASEHOLD_KIND is
// the job's kind when LEASEHOLD_JOB_ID is set, and must not turn into
// --kind for a leasehold command run by that job.
func jobEnv(name string) bool {
	return name == envPrefix+"KIND" && os.Getenv(envPrefix+"JOB_ID") != ""
}

// envAnnotation marks a flag set from its environment variable;
// configAnnotation one set from the config file (config.go);
// noEnvAnnotation one that its variable does not set (noEnv);
// nonEmptyAnnotation one that may not be given empty (nonEmpty);
// sharedOnlyAnnotation one that only shared mode reads (sharedOnly).
const (
	envAnnotation        = "leasehold-from-env"
	configAnnotation     = "leasehold-from-config"
	noEnvAnnotation      = "leasehold-no-env"
	nonEmptyAnnotation   = "leasehold-non-empty"
	sharedOnlyAnnotation = "leasehold-shared-only"
)

// nonEmpty makes flag name of cmd one that may not be given an empty
// value, which would otherwise read as the flag left out: a filter that
// matches everything, a job that runs now, a job without its unique key
// (a script's unset variable, --kind "$KIND"). hint says what to do, after
// "--name is empty: ". An empty environment variable is unset, as for
// every flag.
func nonEmpty(cmd *cobra.Command, name, hint string) {
	_ = cmd.Flags().SetAnnotation(name, nonEmptyAnnotation, []string{hint})
}

// checkNonEmpty refuses a nonEmpty flag given empty.
func checkNonEmpty(cmd *cobra.Command) error {
	if err := emptyFlag(cmd); err != nil {
		return withCommand(cmdName(cmd), err)
	}
	return nil
}

// emptyFlag is checkNonEmpty's check, whatever set the flags (the command
// line, a config file: config check makes it of a file).
func emptyFlag(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		hint := f.Annotations[nonEmptyAnnotation]
		if err != nil || !f.Changed || len(hint) == 0 {
			return
		}
		empty := strings.TrimSpace(f.Value.String()) == ""
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			empty = len(sv.GetSlice()) == 0
		}
		if empty {
			err = usagef("%s is empty: %s", flagLabel(cmd, f.Name), hint[0])
		}
	})
	return err
}

// noEnv makes flag name of cmd one that no environment variable sets: the
// --data of bench and etcd, whose LEASEHOLD_DATA, exported for the daemon,
// would put a benchmark's jobs or an etcd member in the daemon's store.
func noEnv(cmd *cobra.Command, name string) {
	_ = cmd.Flags().SetAnnotation(name, noEnvAnnotation, []string{"true"})
}

// unsetFromEnv puts flag name of cmd back to its default if its
// environment variable set it, as if the variable were unset: errors then
// name the flag, not a variable that was not used.
func unsetFromEnv(cmd *cobra.Command, name string) {
	f := cmd.Flags().Lookup(name)
	if _, env := fromEnv(cmd, name); !env {
		return
	}
	_ = f.Value.Set(f.DefValue)
	f.Changed = false
	delete(f.Annotations, envAnnotation)
}

// fromEnv returns the environment variable that set flag name, if one did.
func fromEnv(cmd *cobra.Command, name string) (string, bool) {
	f := cmd.Flags().Lookup(name)
	if f == nil || len(f.Annotations[envAnnotation]) == 0 {
		return "", false
	}
	return f.Annotations[envAnnotation][0], true
}

// flagLabel names flag name as the user set it, for errors: its
// environment variable if that set it, else --name.
func flagLabel(cmd *cobra.Command, name string) string {
	if env, ok := fromEnv(cmd, name); ok {
		return env
	}
	return "--" + name
}

// flagSource ranks where flag name's value came from: 0 its default, 1
// the config file, 2 its environment variable, 3 the command line.
func flagSource(cmd *cobra.Command, name string) int {
	f := cmd.Flags().Lookup(name)
	switch {
	case f == nil || !f.Changed:
		return 0
	case len(f.Annotations[configAnnotation]) > 0:
		return 1
	case len(f.Annotations[envAnnotation]) > 0:
		return 2
	}
	return 3
}

// exclusive settles flags a and b, of which one may be set: the one from
// the stronger source (the command line, then the environment, then the
// config file) wins, and exclusive returns the other's name for the
// caller to drop ("" if they are not both set). Both from one source is a
// usage error.
func exclusive(cmd *cobra.Command, a, b string) (drop string, err error) {
	sa, sb := flagSource(cmd, a), flagSource(cmd, b)
	switch {
	case sa == 0 || sb == 0:
		return "", nil
	case sa > sb:
		return b, nil
	case sb > sa:
		return a, nil
	case sa == 2:
		return "", usagef("%s and %s are both set: set one of them", flagLabel(cmd, a), flagLabel(cmd, b))
	case sa == 1:
		return "", usagef("%s and %s are both set in the config file: keep one of them", a, b)
	}
	return "", usagef("--%s and --%s are both set: pass one of them", a, b)
}

// checkStore refuses --data with --etcd, both on the command line, for
// the commands that take either store (daemon, bench): the jobs would live
// in etcd and the directory would be ignored; so is the daemon's
// --min-free-disk, a reserve on the disk of --data. From the environment
// or the config file, --etcd chooses shared mode, as it always has (and
// the daemon says that it ignores --min-free-disk, ignoredInSharedMode).
func checkStore(cmd *cobra.Command) error {
	if cmd.Flags().Lookup("data") == nil || cmd.Flags().Lookup("etcd") == nil || flagSource(cmd, "etcd") != 3 {
		return nil
	}
	if flagSource(cmd, "data") == 3 {
		return withCommand(cmdName(cmd), usagef("--data and --etcd are both set: --data is the embedded store's directory, --etcd the shared store; pass one of them"))
	}
	if cmd.Flags().Lookup("min-free-disk") != nil && flagSource(cmd, "min-free-disk") == 3 {
		return withCommand(cmdName(cmd), usagef("--min-free-disk and --etcd are both set: --min-free-disk keeps space free on the disk of the embedded store, and in shared mode etcd's quota bounds the store (--quota-backend-bytes of its members); drop --min-free-disk"))
	}
	return nil
}

// checkTarget refuses --server with --etcd (see exclusive): the command
// would talk to etcd and ignore --server.
func checkTarget(cmd *cobra.Command) error {
	if cmd.Flags().Lookup("server") == nil || cmd.Flags().Lookup("etcd") == nil {
		return nil
	}
	drop, err := exclusive(cmd, "server", "etcd")
	if err != nil {
		return withCommand(cmdName(cmd), err)
	}
	etcd := cmd.Flags().Lookup("etcd").Value.(pflag.SliceValue)
	if drop == "etcd" {
		// A dropped --server needs nothing: --etcd wins over it.
		if err := etcd.Replace(nil); err != nil {
			return err
		}
	}
	// Through a daemon the namespace is the daemon's: one named on the
	// command line would be ignored silently (from the environment or a
	// config file it may be there for --etcd commands, or the daemon).
	if len(etcd.GetSlice()) == 0 && flagSource(cmd, "namespace") == 3 {
		return withCommand(cmdName(cmd), usagef("--namespace applies with --etcd: through a daemon (--server) the daemon's namespace is used; drop --namespace, or pass --etcd"))
	}
	return nil
}

// sharedOnly makes flag name of cmd one that only shared mode (--etcd)
// reads: etcd's connection settings, the daemon's --reap-interval, the
// --max-payload a client command applies to the jobs it writes to etcd.
func sharedOnly(cmd *cobra.Command, name string) {
	_ = cmd.Flags().SetAnnotation(name, sharedOnlyAnnotation, []string{"true"})
}

// checkSharedOnly refuses a sharedOnly flag on the command line of a
// command that has no --etcd (from any source, once checkTarget settled
// it against --server): the daemon would run in embedded mode on --data,
// a client command talk to --server, and the flag would be ignored (an
// --etcd forgotten, a LEASEHOLD_ETCD misspelt). From the environment or
// the config file, which may serve other commands, it is not refused (the
// daemon says it ignores it, ignoredInEmbeddedMode).
func checkSharedOnly(cmd *cobra.Command) error {
	etcd := cmd.Flags().Lookup("etcd")
	if etcd == nil {
		return nil
	}
	if sv, ok := etcd.Value.(pflag.SliceValue); !ok || len(sv.GetSlice()) > 0 {
		return nil
	}
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err == nil && len(f.Annotations[sharedOnlyAnnotation]) > 0 && flagSource(cmd, f.Name) == 3 {
			err = withCommand(cmdName(cmd), usagef("--%s applies with --etcd (shared mode), and this command runs without etcd: it would ignore --%s; pass --etcd, or drop --%s", f.Name, f.Name, f.Name))
		}
	})
	return err
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// newLogger builds the structured logger that g describes, writing to w.
func newLogger(g *globalOpts, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	switch strings.ToLower(g.logLevel) {
	case "debug":
		level = slog.LevelDebug
	case "info", "":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, usagef("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	format := strings.ToLower(g.logFormat)
	switch format {
	case "auto", "":
		format = "json"
		if isTerminal(w) {
			format = "text"
		}
	case "text", "json":
	default:
		return nil, usagef("--log-format %q: want text, json or auto", g.logFormat)
	}
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		// slog's JSON handler writes a duration as nanoseconds
		// ("ttl":30000000000); the text handler, and people, write 30s.
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				a.Value = slog.StringValue(a.Value.Duration().String())
			}
			return a
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// groupCmd is a command that only holds subcommands; run alone or with an
// unknown word it says which subcommands exist (verbs: "list, get or ...").
// Flags meant for a subcommand are let through, so that "jobs lsit
// --server URL" says which word is wrong, not that jobs has no --server.
func groupCmd(use, short, verbs string) *cobra.Command {
	return &cobra.Command{
		Use:                use,
		Short:              short,
		Args:               cobra.ArbitraryArgs,
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q: use %s", args[0], verbs)
			}
			return usagef("missing command: use %s", verbs)
		}),
	}
}
