package main

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The README is long and changes with the code; these tests check what
// can be checked mechanically: the flags it gives each command exist, the
// Configuration table's flags and defaults are the daemon's, and the
// tests, benchmarks and ADRs it cites exist (a renamed test leaves a dead
// citation in the guarantees table).

// repoRoot is the module's root, from this package's directory.
const repoRoot = "../.."

func readREADME(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeCommand returns the command that the words of a command line name
// (after "leasehold" or "./leasehold", or without it), and nil if they
// name none but the root.
func readmeCommand(root *cobra.Command, line string) *cobra.Command {
	line = strings.TrimPrefix(strings.TrimSpace(line), "./")
	line = strings.TrimPrefix(line, "leasehold ")
	var path []string
	for _, w := range strings.Fields(line) {
		if !regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(w) {
			break
		}
		path = append(path, w)
	}
	if len(path) == 0 {
		return nil
	}
	cmd, _, err := root.Find(path)
	if err != nil || cmd == root {
		return nil
	}
	return cmd
}

// TestReadmeCommandLinesUseFlagsThatExist checks every command line of the
// README (a line of a code block, or a code span, that begins with a
// command) for flags its command does not have.
func TestReadmeCommandLinesUseFlagsThatExist(t *testing.T) {
	readme := readREADME(t)
	root := newRootCmd(nil, io.Discard, io.Discard)
	flagRe := regexp.MustCompile(`(?:^|\s)--([a-z][a-z0-9-]*)`)
	check := func(lineNo int, text string) {
		// A command line ends at a comment, a pipe or a list.
		if i := strings.IndexAny(text, "#|;&"); i >= 0 {
			text = text[:i]
		}
		cmd := readmeCommand(root, text)
		if cmd == nil {
			return
		}
		for _, m := range flagRe.FindAllStringSubmatch(text, -1) {
			if cmd.Flags().Lookup(m[1]) == nil && cmd.InheritedFlags().Lookup(m[1]) == nil {
				t.Errorf("README line %d: %q: %s has no --%s", lineNo, strings.TrimSpace(text), cmd.CommandPath(), m[1])
			}
		}
	}
	span := regexp.MustCompile("`([^`]+)`")
	inBlock := false
	for i, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			if strings.Contains(line, "leasehold ") {
				check(i+1, line[strings.Index(line, "leasehold "):])
			}
			continue
		}
		for _, m := range span.FindAllStringSubmatch(line, -1) {
			check(i+1, m[1])
		}
	}
}

// TestReadmeConfigurationTableIsTheDaemons checks the README's
// Configuration table against the flags: each flag it lists exists, with
// the default it states, and each flag of the daemon is listed.
func TestReadmeConfigurationTableIsTheDaemons(t *testing.T) {
	readme := readREADME(t)
	start := strings.Index(readme, "\n## Configuration\n")
	if start < 0 {
		t.Fatal("README: no Configuration section")
	}
	section := readme[start:]
	section = section[:strings.Index(section[1:], "\n## ")+1]
	root := newRootCmd(nil, io.Discard, io.Discard)
	lookup := func(name string) *pflag.Flag {
		var found *pflag.Flag
		var walk func(c *cobra.Command)
		walk = func(c *cobra.Command) {
			if f := c.Flags().Lookup(name); f != nil && found == nil {
				found = f
			}
			for _, s := range c.Commands() {
				walk(s)
			}
		}
		if daemon, _, err := root.Find([]string{"daemon"}); err == nil {
			walk(daemon) // the daemon's own default first (--concurrency)
		}
		walk(root)
		return found
	}
	listed := map[string]bool{}
	rows := 0
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "`--") {
			continue
		}
		rows++
		names := regexp.MustCompile("`--([a-z][a-z0-9-]*)").FindAllStringSubmatch(cells[1], -1)
		def := strings.TrimSpace(cells[2])
		for _, n := range names {
			listed[n[1]] = true
			f := lookup(n[1])
			if f == nil {
				t.Errorf("README Configuration: no command has --%s", n[1])
				continue
			}
			if len(names) > 1 || strings.Contains(def, " ") && !strings.HasPrefix(def, "none") {
				continue // a default in words (one per mode, system roots)
			}
			if got := normalDefault(f.DefValue); normalDefault(def) != got {
				t.Errorf("README Configuration: --%s defaults to %q, the README says %q", n[1], f.DefValue, def)
			}
		}
	}
	if rows < 20 {
		t.Fatalf("README Configuration: read %d rows of flags; is the table still there?", rows)
	}
	daemon, _, _ := root.Find([]string{"daemon"})
	daemon.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && !listed[f.Name] && !strings.HasPrefix(f.Name, "etcd-") {
			t.Errorf("README Configuration: the daemon's --%s is not in the table", f.Name)
		}
	})
	daemon.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if !listed[f.Name] {
			t.Errorf("README Configuration: --%s is not in the table", f.Name)
		}
	})
}

// normalDefault reads a default as the README or pflag writes it: none,
// zero and empty alike; durations by their value; a one-item list as the
// item; a quoted one without its quotes.
func normalDefault(s string) string {
	s = strings.Trim(strings.TrimSpace(s), "`")
	if strings.HasPrefix(s, "none") {
		s = ""
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	switch s {
	case "0", "0s", "false", `""`:
		s = ""
	}
	if d, err := time.ParseDuration(s); err == nil {
		return d.String()
	}
	return s
}

// TestReadmeCitesTestsThatExist checks that every test the README cites by
// name exists: a Test function of some package, or a case of the
// conformance suite (the names after `coordtest`).
func TestReadmeCitesTestsThatExist(t *testing.T) {
	readme := readREADME(t)
	funcs := map[string]bool{}
	cases := map[string]bool{}
	funcRe := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
	caseRe := regexp.MustCompile(`\{"([A-Z][A-Za-z0-9]+)",`)
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != repoRoot) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcRe.FindAllStringSubmatch(string(b), -1) {
			funcs[m[1]] = true
		}
		if filepath.Base(filepath.Dir(path)) == "coordtest" {
			for _, m := range caseRe.FindAllStringSubmatch(string(b), -1) {
				cases[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(funcs) < 100 || len(cases) < 100 {
		t.Fatalf("found %d test functions and %d conformance cases: is %s the module's root?", len(funcs), len(cases), repoRoot)
	}
	for _, m := range regexp.MustCompile(`\b(?:Test|Fuzz)[A-Z][A-Za-z0-9_]*`).FindAllString(readme, -1) {
		if !funcs[m] {
			t.Errorf("README cites %s, which is no test", m)
		}
	}
	// `go test -bench NAME`: a benchmark of that name.
	for _, m := range regexp.MustCompile(`go test (?:-run '\^\$' )?-bench (?:Benchmark)?([A-Z][A-Za-z0-9]*)`).FindAllStringSubmatch(strings.Join(strings.Fields(readme), " "), -1) {
		if !funcs["Benchmark"+m[1]] {
			t.Errorf("README runs the benchmark %s, which is no benchmark", m[1])
		}
	}
	// The names after `coordtest`, up to the next package, outside the
	// parentheses that describe them.
	camel := regexp.MustCompile(`^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+$`)
	for _, part := range strings.Split(readme, "`coordtest`")[1:] {
		if i := strings.IndexAny(part, "`;|"); i >= 0 {
			part = part[:i]
		}
		// A ')' that closes a parenthesis opened before `coordtest`
		// ends the citation.
		depth := 0
		var outside strings.Builder
	scan:
		for _, r := range part {
			switch {
			case r == '(':
				depth++
			case r == ')':
				if depth--; depth < 0 {
					break scan
				}
			case depth == 0:
				outside.WriteRune(r)
			}
		}
		for _, w := range strings.FieldsFunc(outside.String(), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '.' }) {
			if camel.MatchString(w) && w != "Pebble" && !cases[w] {
				t.Errorf("README cites the conformance case %s, which coordtest does not have", w)
			}
		}
	}
}

// TestReadmeCitesADRsThatExist checks that every ADR the README and
// docs/DESIGN.md cite is in docs/adr.
func TestReadmeCitesADRsThatExist(t *testing.T) {
	design, err := os.ReadFile(filepath.Join(repoRoot, "docs", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := readREADME(t) + string(design)
	for _, m := range regexp.MustCompile(`ADRs? (\d{4})`).FindAllStringSubmatch(text, -1) {
		found, err := filepath.Glob(filepath.Join(repoRoot, "docs", "adr", m[1]+"-*.md"))
		if err != nil || len(found) != 1 {
			t.Errorf("README or docs/DESIGN.md cites ADR %s: %d files in docs/adr", m[1], len(found))
		}
	}
	for _, m := range regexp.MustCompile(`docs/adr/(\d{4})`).FindAllStringSubmatch(text, -1) {
		if found, _ := filepath.Glob(filepath.Join(repoRoot, "docs", "adr", m[1]+"-*.md")); len(found) != 1 {
			t.Errorf("README or docs/DESIGN.md cites docs/adr/%s: %d files", m[1], len(found))
		}
	}
}
