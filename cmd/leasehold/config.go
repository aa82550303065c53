package main

// The optional config file (--config FILE, or LEASEHOLD_CONFIG): a YAML
// mapping (JSON is YAML too) from flag names to values, e.g.
//
//	listen: 127.0.0.1:7420
//	data: /var/lib/leasehold
//	concurrency: 50
//	lease-ttl: 10s
//	queues: [default, mail]
//	exec:
//	  - thumbnail=./thumbnail.sh
//	api-token-file: /etc/leasehold/token
//	log-format: json
//
// Keys are the daemon's flags, the global ones (log-format, log-level) and
// the connection settings of the other commands (server, server-ca,
// api-token, api-token-file, and the etcd ones). The daemon reads every
// key; the client commands (enqueue, jobs, workers, ...) read only the
// connection settings and the global ones, so that a key such as timeout or
// queue, which means something else to them, never leaks into them; bench
// and etcd (development tools) read none. A flag on the command line wins,
// then its LEASEHOLD_* variable, then the file, then the default.
//
// `leasehold config check FILE` validates a file and explains each error.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// maxConfigBytes bounds a config file.
const maxConfigBytes = 1 << 20

// connectionKeys are the settings every command that talks to a daemon or
// a store reads from the config file.
var connectionKeys = []string{
	"server", "server-ca", "api-token", "api-token-file",
	"etcd", "etcd-ca", "etcd-cert", "etcd-key", "etcd-user", "etcd-password", "etcd-max-request-bytes", "namespace",
	"max-payload", // the daemons' limit, which shared-mode enqueue applies too
	"log-format", "log-level",
}

// noConfigCommands read no config file.
var noConfigCommands = []string{"bench", "etcd", "config"}

// configSetting is one key of a config file.
type configSetting struct {
	key    string
	line   int
	values []string // what the flag is Set to, in order
	lines  []int    // the line of each value
	err    string   // why the value cannot be a flag value
}

// configFile is a parsed config file.
type configFile struct {
	path     string
	settings []configSetting
}

// loadConfig reads and parses path. Its error says what is wrong with the
// file as a whole (unreadable, not YAML, not a mapping); problems of single
// settings are in their err.
func loadConfig(path string) (*configFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read config file: %s", apiserver.OneLine(err.Error()))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read config file: %s", apiserver.OneLine(err.Error()))
	}
	if len(b) > maxConfigBytes {
		return nil, fmt.Errorf("config file is over %d bytes: is it the right file?", maxConfigBytes)
	}
	cf := &configFile{path: path}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return cf, nil // empty: no settings
		}
		return nil, fmt.Errorf("not valid YAML: %s", strings.TrimPrefix(apiserver.OneLine(err.Error()), "yaml: "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("holds more than one YAML document: keep one mapping of settings")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return cf, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: the file must be a mapping of settings such as 'listen: 127.0.0.1:7420', not a %s", root.Line, nodeKind(root))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		s := configSetting{key: k.Value, line: k.Line}
		if k.Kind != yaml.ScalarNode {
			s.key = fmt.Sprintf("(%s)", nodeKind(k))
			s.err = "a key must be a setting name such as listen"
		} else if first, dup := seen[k.Value]; dup {
			s.err = fmt.Sprintf("set twice (first on line %d): keep one", first)
		} else {
			seen[k.Value] = k.Line
			s.values, s.lines, s.err = nodeValues(v)
		}
		cf.settings = append(cf.settings, s)
	}
	return cf, nil
}

// nodeValues turns a YAML value into flag values, with their lines: a
// scalar is one value, a sequence of scalars one value each.
func nodeValues(v *yaml.Node) ([]string, []int, string) {
	switch v.Kind {
	case yaml.AliasNode:
		return nodeValues(v.Alias)
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return nil, nil, "has no value: give one, or remove the line"
		}
		return []string{v.Value}, []int{v.Line}, ""
	case yaml.SequenceNode:
		out, lines := make([]string, 0, len(v.Content)), make([]int, 0, len(v.Content))
		for _, x := range v.Content {
			if x.Kind != yaml.ScalarNode || x.Tag == "!!null" {
				return nil, nil, fmt.Sprintf("line %d: a list item is a %s: want plain values", x.Line, nodeKind(x))
			}
			out, lines = append(out, x.Value), append(lines, x.Line)
		}
		return out, lines, ""
	}
	return nil, nil, fmt.Sprintf("is a %s: want a value or a list of values", nodeKind(v))
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return "value"
	}
	return "YAML node"
}

// configKeys returns the keys a config file may hold, with the flags that
// define them (from a daemon command and a client command).
func configKeys() map[string]*pflag.Flag {
	g := &globalOpts{}
	d, _ := newDaemonCommand(g)
	keys := map[string]*pflag.Flag{}
	d.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" && !f.Hidden {
			keys[f.Name] = f
		}
	})
	client := &cobra.Command{Use: "client"}
	var t target
	addTargetFlags(client, &t)
	for _, k := range connectionKeys {
		if f := client.Flags().Lookup(k); f != nil {
			keys[k] = f
		}
	}
	root := newRootCmd(nil, io.Discard, io.Discard)
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" {
			keys[f.Name] = f
		}
	})
	return keys
}

// topCommand is the name of the first-level command cmd is (or is under).
func topCommand(cmd *cobra.Command) string {
	for cmd.HasParent() && cmd.Parent().HasParent() {
		cmd = cmd.Parent()
	}
	return cmd.Name()
}

// applyConfig sets every flag of cmd that was given neither on the command
// line nor by its environment variable from the config file, if one is
// named. Of api-token and api-token-file, set from different sources, the
// stronger one wins (see exclusive).
func applyConfig(cmd *cobra.Command) error {
	if err := applyConfigFile(cmd); err != nil {
		return err
	}
	return settleToken(cmd)
}

// settleToken drops the one of api-token and api-token-file that comes
// from the weaker source, so that, say, --api-token overrides the
// config file's api-token-file. Both from one source is left to readToken,
// and so is an empty value, which drops nothing: an empty --api-token must
// not turn off the token of a file.
func settleToken(cmd *cobra.Command) error {
	token, file := cmd.Flags().Lookup("api-token"), cmd.Flags().Lookup("api-token-file")
	if token == nil || file == nil || strings.TrimSpace(token.Value.String()) == "" || file.Value.String() == "" ||
		flagSource(cmd, token.Name) == flagSource(cmd, file.Name) {
		return nil
	}
	drop, err := exclusive(cmd, "api-token", "api-token-file")
	if err != nil || drop == "" {
		return withCommand(cmdName(cmd), err)
	}
	if err := cmd.Flags().Lookup(drop).Value.Set(""); err != nil {
		return fmt.Errorf("drop --%s: %w", drop, err)
	}
	return nil
}

func applyConfigFile(cmd *cobra.Command) error {
	cf := cmd.Flags().Lookup("config")
	if cf == nil || cf.Value.String() == "" {
		return nil
	}
	if top := topCommand(cmd); slices.Contains(noConfigCommands, top) {
		// LEASEHOLD_CONFIG, set for the daemon, is left alone; given on
		// the command line, it would be ignored silently.
		if flagSource(cmd, "config") == 3 {
			return withCommand(cmdName(cmd), usagef("--config: 'leasehold %s' reads no config file: give its settings as flags", top))
		}
		return nil
	}
	path := cf.Value.String()
	fail := func(format string, a ...any) error {
		return &cliError{code: exitUsage, bare: true, msg: fmt.Sprintf("%sconfig file %s: %s: run 'leasehold config check %s'", prefixed(cmdName(cmd)), path, fmt.Sprintf(format, a...), path)}
	}
	file, err := loadConfig(path)
	if err != nil {
		return fail("%s", err.Error())
	}
	valid := configKeys()
	daemon := topCommand(cmd) == "daemon"
	for _, s := range file.settings {
		if s.err != "" {
			return fail("line %d: %s %s", s.line, s.key, s.err)
		}
		if valid[s.key] == nil {
			return fail("line %d: %s", s.line, unknownKey(s.key, valid))
		}
		if !daemon && !slices.Contains(connectionKeys, s.key) {
			continue
		}
		f := cmd.Flags().Lookup(s.key)
		if f == nil || f.Changed {
			continue
		}
		if msg := setFromConfig(cmd.Flags(), f, s.values, path, s.line); msg != "" {
			return fail("line %d: %s: %s", s.line, s.key, msg)
		}
	}
	return nil
}

// setFromConfig sets f from line of the config file at path, marked as
// set by it (see flagSource, relabelConfigFlag); it returns what is wrong,
// or "".
func setFromConfig(fs *pflag.FlagSet, f *pflag.Flag, values []string, path string, line int) string {
	if msg := setFlag(fs, f, values); msg != "" {
		return msg
	}
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations[configAnnotation] = []string{path, strconv.Itoa(line)}
	return ""
}

// setFlag sets f from a config value; it returns what is wrong, or "".
func setFlag(fs *pflag.FlagSet, f *pflag.Flag, values []string) string {
	_, multi := f.Value.(pflag.SliceValue)
	if len(values) != 1 && !multi {
		return fmt.Sprintf("is a list of %d values: want one %s", len(values), typeHint(f))
	}
	if len(values) == 0 && f.DefValue != "[]" {
		// Not unset: an empty list of a setting whose default is not
		// empty (queues: [] would serve the default queue).
		return fmt.Sprintf("is an empty list: give at least one value, or remove the line for the default %s", f.DefValue)
	}
	for _, v := range values {
		if err := fs.Set(f.Name, v); err != nil {
			msg := apiserver.OneLine(err.Error())
			if _, after, ok := strings.Cut(msg, " flag: "); ok {
				msg = after
			}
			switch f.Value.Type() {
			case "duration":
				if strings.Contains(msg, "missing unit") {
					return fmt.Sprintf("%q is not %s: add a unit (%ss)", apiserver.TruncateString(v, 60), typeHint(f), apiserver.TruncateString(v, 60))
				}
				return fmt.Sprintf("%q is not %s", apiserver.TruncateString(v, 60), typeHint(f))
			case "size":
				if errors.Is(err, errSizeTooLarge) {
					return fmt.Sprintf("%q is %s", apiserver.TruncateString(v, 60), errSizeTooLarge)
				}
			case "int", "float64", "bool":
				// The hint says it all; Go's parse error adds only
				// its own words ("strconv.ParseInt: parsing ...").
				return fmt.Sprintf("%q is not %s", apiserver.TruncateString(v, 60), typeHint(f))
			}
			return fmt.Sprintf("%q is not %s (%s)", apiserver.TruncateString(v, 60), typeHint(f), msg)
		}
	}
	return ""
}

// typeHint says what a flag takes, for errors.
func typeHint(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "duration":
		return "a duration such as 30s or 5m"
	case "int":
		return "a whole number"
	case "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "size":
		return "a size such as 1MiB or 65536"
	case "stringSlice", "stringArray":
		return "a value or a list of values"
	}
	return "a string"
}

// unknownKey explains a key that is no setting.
func unknownKey(key string, valid map[string]*pflag.Flag) string {
	if strings.HasPrefix(key, "-") {
		if valid[strings.TrimLeft(key, "-")] != nil {
			return fmt.Sprintf("%q: write the setting without dashes: %s", key, strings.TrimLeft(key, "-"))
		}
	}
	if n := strings.ReplaceAll(strings.ToLower(key), "_", "-"); n != key && valid[n] != nil {
		return fmt.Sprintf("%q is not a setting: did you mean %s? (settings are flag names, with dashes)", key, n)
	}
	best, bestD := "", 3
	for k := range valid {
		if d := editDistance(strings.ToLower(key), k); d < bestD || (d == bestD && best != "" && k < best) {
			best, bestD = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf("%q is not a setting: did you mean %s?", key, best)
	}
	var owners []string
	for _, c := range newRootCmd(nil, io.Discard, io.Discard).Commands() {
		walkCommands(c, func(c *cobra.Command) {
			if c.LocalFlags().Lookup(key) != nil {
				owners = append(owners, "'leasehold "+cmdName(c)+"'")
			}
		})
	}
	if len(owners) > 0 {
		return fmt.Sprintf("%q is a flag of %s, which the config file does not set (its meaning differs between commands): pass it on the command line", key, strings.Join(owners, ", "))
	}
	return fmt.Sprintf("%q is not a setting: settings are the daemon's flag names (see 'leasehold daemon --help') and %s", key, strings.Join(connectionKeys, ", "))
}

// walkCommands calls fn for c and every command under it.
func walkCommands(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walkCommands(sub, fn)
	}
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// fileKeys name files that must exist.
var fileKeys = []string{"api-token-file", "tls-cert", "tls-key", "server-ca", "etcd-ca", "etcd-cert", "etcd-key"}

// secretKeys hold secrets: a file with them should not be readable by
// others.
var secretKeys = []string{"api-token", "etcd-password"}

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check a config file",
		Long: `A config file (--config FILE, or LEASEHOLD_CONFIG) is a YAML (or JSON)
mapping from flag names to values:

  listen: 127.0.0.1:7420
  data: /var/lib/leasehold
  concurrency: 50
  lease-ttl: 10s
  queues: [default, mail]
  exec:
    - thumbnail=./thumbnail.sh
  api-token-file: /etc/leasehold/token
  log-format: json

The daemon reads every key. The other commands (enqueue, jobs, workers,
queues, periodic, backup, restore) read only the connection settings they
take: ` + strings.Join(connectionKeys, ", ") + `.
bench and etcd read no config file. A flag on the command line wins, then
its LEASEHOLD_* variable, then the file, then the default.`,
		Args: argsBetween(0, 0, "check FILE"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("config: missing command: use 'leasehold config check FILE'")
		},
	}
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a config file and explain each error",
		Long: `Validate a config file: its syntax, that each key is a setting, that each
value suits it (a duration, a number, a list...), that files it names exist,
and the checks the commands that read it make of its values, alone and
together (the daemon's before it starts: bounds, exec entries, schedules...).
Prints every problem, one line each with its line in the file, and exits 2
if there is any; otherwise prints what the file sets.`,
		Example: "  leasehold config check /etc/leasehold/config.yaml",
		Args:    argsBetween(1, 1, "FILE"),
		RunE:    action(func(cmd *cobra.Command, args []string) error { return runConfigCheck(cmd, args[0]) }),
	}
	cmd.AddCommand(check)
	return cmd
}

// configProblem is one error or warning of `config check`.
type configProblem struct {
	line int
	key  string
	msg  string
}

func (p configProblem) String() string {
	var b strings.Builder
	if p.line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.line)
	}
	// "lease-ttl 1s: want ..." names its setting already.
	if p.key != "" && wordIndex(p.msg, p.key) != 0 {
		b.WriteString(p.key + ": ")
	}
	b.WriteString(p.msg)
	return b.String()
}

// wordIndex returns where w first stands in s as a whole setting name (not
// "etcd" of "etcd-cert"), or -1.
func wordIndex(s, w string) int {
	nameByte := func(c byte) bool {
		return c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	for i := 0; i+len(w) <= len(s); i++ {
		if strings.HasPrefix(s[i:], w) && (i == 0 || !nameByte(s[i-1])) && (i+len(w) == len(s) || !nameByte(s[i+len(w)])) {
			return i
		}
	}
	return -1
}

// checkConfig returns the errors and warnings of the config file at path:
// every one, each with its line, in the order of the file.
func checkConfig(path string) (errs, warns []configProblem, file *configFile) {
	file, err := loadConfig(path)
	if err != nil {
		return []configProblem{{msg: err.Error()}}, nil, nil
	}
	valid := configKeys()
	env := newConfigEnv()
	var good []configSetting // the settings whose values parse
	bad := map[string]bool{} // the keys already reported
	for _, s := range file.settings {
		if s.err != "" {
			errs = append(errs, configProblem{s.line, s.key, s.err})
			continue
		}
		if valid[s.key] == nil {
			errs = append(errs, configProblem{line: s.line, msg: unknownKey(s.key, valid)})
			continue
		}
		if msg := env.set(s, path); msg != "" {
			errs = append(errs, configProblem{s.line, s.key, msg})
			continue
		}
		good = append(good, s)
		if slices.Contains(fileKeys, s.key) {
			if _, err := os.Stat(s.values[0]); err != nil {
				errs = append(errs, configProblem{s.line, s.key, fmt.Sprintf("file %s: %s", s.values[0], apiserver.OneLine(strings.TrimPrefix(err.Error(), "stat "+s.values[0]+": ")))})
				bad[s.key] = true
			}
		}
	}
	// The checks of the values, alone and together, as the commands that
	// read the file make them; a missing file is reported once.
	for _, p := range refusals(path, good) {
		if !bad[p.key] {
			errs = append(errs, p)
		}
	}
	slices.SortStableFunc(errs, func(a, b configProblem) int {
		if (a.line == 0) != (b.line == 0) {
			return b.line - a.line // the ones without a line last
		}
		return a.line - b.line
	})
	// With etcd set, the daemon runs in shared mode and reads neither the
	// embedded store's directory nor its disk reserve.
	if slices.ContainsFunc(good, func(s configSetting) bool { return s.key == "etcd" }) {
		for _, s := range good {
			if slices.Contains(embeddedOnly, s.key) {
				warns = append(warns, configProblem{s.line, s.key, "ignored: etcd is set, so the daemon runs in shared mode, which does not read this setting of the embedded store"})
			}
		}
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		for _, s := range good {
			if slices.Contains(secretKeys, s.key) {
				warns = append(warns, configProblem{key: s.key, msg: fmt.Sprintf("the file holds a secret and is readable by others (mode %v): chmod 600 %s, or use api-token-file", st.Mode().Perm(), path)})
			}
		}
	}
	return errs, warns, file
}

// configEnv holds the commands that read a config file, to set its
// settings on as they do: a daemon (every key), the global flags, and a
// client command (the connection settings).
type configEnv struct {
	daemon *cobra.Command
	opts   *daemonOpts
	global *pflag.FlagSet
	client *cobra.Command
	target *target
}

func newConfigEnv() *configEnv {
	d, o := newDaemonCommand(&globalOpts{})
	// Named as the program, so that its errors name no command.
	client := &cobra.Command{Use: "leasehold"}
	t := &target{}
	addTargetFlags(client, t)
	return &configEnv{daemon: d, opts: o, global: newRootCmd(nil, io.Discard, io.Discard).PersistentFlags(), client: client, target: t}
}

// set sets s on each command of e that reads it; it returns what is wrong
// with its value, or "".
func (e *configEnv) set(s configSetting, path string) string {
	var sets []*pflag.FlagSet
	if e.global.Lookup(s.key) != nil {
		sets = append(sets, e.global)
	}
	if e.daemon.Flags().Lookup(s.key) != nil {
		sets = append(sets, e.daemon.Flags())
	}
	if slices.Contains(connectionKeys, s.key) && e.client.Flags().Lookup(s.key) != nil {
		sets = append(sets, e.client.Flags())
	}
	for _, fs := range sets {
		if msg := setFromConfig(fs, fs.Lookup(s.key), s.values, path, s.line); msg != "" {
			return msg
		}
	}
	return ""
}

// refusal returns the first error with which a command that reads the file
// would refuse its settings before it does anything, and which commands
// refuse them ("" for all): the checks of the global flags, those the daemon
// makes before it opens its store (and, in shared mode, that of the
// store's limits, which it makes once connected), and those of a client
// command before its first request.
func (e *configEnv) refusal() (by string, err error) {
	g := &globalOpts{logFormat: e.global.Lookup("log-format").Value.String(), logLevel: e.global.Lookup("log-level").Value.String()}
	if _, err := newLogger(g, io.Discard); err != nil {
		return "", err
	}
	if err := e.daemonRefusal(); err != nil {
		return "the daemon", err
	}
	if err := e.clientRefusal(); err != nil {
		return "the client commands", err
	}
	return "", nil
}

func (e *configEnv) daemonRefusal() error {
	o := e.opts
	if err := emptyToken(e.daemon); err != nil {
		return err
	}
	if err := emptyFlag(e.daemon); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	if o.tlsCert != "" {
		if _, err := loadKeyPair(o.tlsCert, o.tlsKey); err != nil {
			return err
		}
	}
	kinds, err := daemonKinds(o.execs, o.leaseTTL, o.storeRequestLimit(), slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	if err := o.checkPeriodicKinds(kinds); err != nil {
		return err
	}
	if o.etcd.shared() {
		// The limits of the etcd store the daemon would build.
		return checkStoreConfig(o.etcd.storeLimits(), o.coordConfig(), o.workerConfig(true))
	}
	return nil
}

func (e *configEnv) clientRefusal() error {
	if err := settleToken(e.client); err != nil {
		return err
	}
	if err := checkTarget(e.client); err != nil {
		return err
	}
	c, err := newClient(e.target.server)
	if err != nil {
		return err
	}
	return c.setAuth(e.target.auth)
}

// refusalOf returns the first refusal of settings (see refusal).
func refusalOf(path string, settings []configSetting) (by string, err error) {
	e := newConfigEnv()
	for _, s := range settings {
		e.set(s, path) // each parsed before
	}
	return e.refusal()
}

// refusals returns every refusal of settings, each on the setting (or the
// value of a list) at fault: it takes the first refusal, drops what it is
// about, and checks again until nothing is refused.
func refusals(path string, settings []configSetting) []configProblem {
	active := slices.Clone(settings)
	var out []configProblem
	for {
		by, err := refusalOf(path, active)
		if err == nil {
			return out
		}
		msg := configMessage(err)
		i, j := blame(path, active, err)
		if i < 0 {
			return append(out, configProblem{msg: msg})
		}
		s := active[i]
		if by != "" && wordIndex(msg, s.key) != 0 {
			// Not obviously about s: say who refuses it.
			msg = "refused by " + by + ": " + msg
		}
		if j < 0 {
			out = append(out, configProblem{s.line, s.key, msg})
			// With the other settings it names ("--tls-cert and
			// --tls-key"): checked again alone, such a setting would
			// only be refused for missing its pair.
			drop := named(err.Error(), active)
			active = slices.DeleteFunc(active, func(x configSetting) bool { return x.key == s.key || slices.Contains(drop, x.key) })
			continue
		}
		out = append(out, configProblem{s.lines[j], s.key, msg})
		active[i].values = slices.Delete(slices.Clone(s.values), j, j+1)
		active[i].lines = slices.Delete(slices.Clone(s.lines), j, j+1)
	}
}

// named returns the keys of settings that msg names as flags, in the
// order it names them.
func named(msg string, settings []configSetting) []string {
	at := map[string]int{}
	var keys []string
	for _, s := range settings {
		if x := wordIndex(msg, "--"+s.key); x >= 0 {
			at[s.key] = x
			keys = append(keys, s.key)
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return at[a] - at[b] })
	return keys
}

// blame returns the index in settings of the setting err is about, and of
// its value at fault if it is a list (else -1); -1, -1 if none is. The
// setting is the first one err names as a flag, else one without which
// err goes away or changes; the value, the last one without which it does
// (the second of two that clash).
func blame(path string, settings []configSetting, err error) (setting, value int) {
	msg := err.Error()
	setting = -1
	if keys := named(msg, settings); len(keys) > 0 {
		setting = slices.IndexFunc(settings, func(s configSetting) bool { return s.key == keys[0] })
	}
	changes := func(trial []configSetting) bool {
		_, e := refusalOf(path, trial)
		return e == nil || e.Error() != msg
	}
	if setting < 0 {
		// Of the settings without which err goes away or changes, the
		// one it names in words ("max payload"), else the first.
		for k := range settings {
			if !changes(slices.Delete(slices.Clone(settings), k, k+1)) {
				continue
			}
			if setting < 0 {
				setting = k
			}
			if wordIndex(msg, strings.ReplaceAll(settings[k].key, "-", " ")) >= 0 {
				setting = k
				break
			}
		}
	}
	if setting < 0 {
		return -1, -1
	}
	s := settings[setting]
	for j := len(s.values) - 1; len(s.values) > 1 && j >= 0; j-- {
		trial := slices.Clone(settings)
		trial[setting].values = slices.Delete(slices.Clone(s.values), j, j+1)
		if changes(trial) {
			return setting, j
		}
	}
	return setting, -1
}

// configMessage is an error's message for config check: flag names as
// setting names.
func configMessage(err error) string {
	var ce *cliError
	msg := err.Error()
	if errors.As(err, &ce) {
		msg = ce.msg
	}
	return strings.ReplaceAll(apiserver.OneLine(msg), "--", "")
}

func runConfigCheck(cmd *cobra.Command, path string) error {
	errs, warns, file := checkConfig(path)
	out := cmd.OutOrStdout()
	for _, w := range warns {
		fmt.Fprintf(cmd.ErrOrStderr(), "leasehold: config check: %s: warning: %s\n", path, w)
	}
	if len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintf(out, "%s: %s\n", path, e)
		}
		return &cliError{code: exitUsage, bare: true, msg: fmt.Sprintf("config check: %s has %d problem(s), listed above: fix them and check again", path, len(errs))}
	}
	var daemonOnly, shared []string
	for _, s := range file.settings {
		if slices.Contains(connectionKeys, s.key) {
			shared = append(shared, s.key)
		} else {
			daemonOnly = append(daemonOnly, s.key)
		}
	}
	fmt.Fprintf(out, "%s: ok: %d settings", path, len(file.settings))
	if len(daemonOnly) > 0 {
		fmt.Fprintf(out, "; for the daemon: %s", strings.Join(daemonOnly, ", "))
	}
	if len(shared) > 0 {
		fmt.Fprintf(out, "; for every command: %s", strings.Join(shared, ", "))
	}
	fmt.Fprintln(out)
	return nil
}
