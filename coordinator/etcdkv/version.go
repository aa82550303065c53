package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// ServerVersion asks every endpoint of the client for its status, all at
// once and within ctx (give it a deadline: an unreachable endpoint is
// waited for until then), and returns the lowest server version among those
// that answered (during a rolling upgrade the oldest member decides which
// bugs can bite). It fails only if none answered.
func (s *Store) ServerVersion(ctx context.Context) (string, error) {
	if s.isClosed() {
		return "", fmt.Errorf("etcdkv: server version: %w", kv.ErrClosed)
	}
	eps := s.cli.Endpoints()
	type result struct {
		version string
		err     error
	}
	results := make([]result, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() {
			st, err := endpointStatus(ctx, s.cli, ep)
			if err != nil {
				results[i].err = fmt.Errorf("%s: %w", ep, err)
				return
			}
			results[i].version = st.Version
		})
	}
	wg.Wait()
	var (
		lowest    string
		lowestVer version
		errs      []error
	)
	for _, r := range results {
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		v, ok := parseVersion(r.version)
		switch {
		case lowest == "":
			lowest, lowestVer = r.version, v
		case ok && v.less(lowestVer):
			lowest, lowestVer = r.version, v
		}
	}
	if lowest == "" {
		return "", fmt.Errorf("etcdkv: server version: no endpoint answered: %w", errors.Join(errs...))
	}
	return lowest, nil
}

// leaseBug is a known etcd server bug that affects lease-based fencing.
type leaseBug struct {
	issue   string
	summary string
	// fixed lists the first fixed release of each minor line; a minor line
	// not listed and below every listed one is affected and never fixed;
	// above all of them, fixed from its first release.
	fixed []version
}

var leaseBugs = []leaseBug{
	{
		issue:   "etcd-io/etcd#15247",
		summary: "a leader stuck on slow disk or CPU can revoke leases after it lost leadership, so keys of live sessions vanish",
		fixed:   []version{{3, 4, 31}, {3, 5, 13}, {3, 6, 0}},
	},
	{
		issue:   "etcd-io/etcd#20547",
		summary: "a lease renewal can report success for a lease revoked at the same moment, so a session believes it still holds a lease that is gone",
		fixed:   []version{{3, 4, 38}, {3, 5, 23}, {3, 6, 5}, {3, 7, 0}},
	},
}

// KnownLeaseBugs returns one human-readable warning per known lease bug of
// etcd server version v (as reported by ServerVersion, e.g. "3.5.12").
// leasehold's fencing does not depend on these bugs being fixed, but they
// make sessions lose work needlessly or notice lost leases late. A version
// that cannot be parsed yields a single warning saying so.
func KnownLeaseBugs(v string) []string {
	ver, ok := parseVersion(v)
	if !ok {
		return []string{fmt.Sprintf("etcd server version %q not understood: cannot check it for known lease bugs", v)}
	}
	var out []string
	for _, b := range leaseBugs {
		if fix, affected := b.affects(ver); affected {
			var fixes []string
			for _, f := range b.fixed {
				fixes = append(fixes, f.String())
			}
			advice := "not fixed in this release line; fixed in " + strings.Join(fixes, ", ")
			if fix != (version{}) {
				advice = "fixed in " + fix.String()
			}
			out = append(out, fmt.Sprintf("etcd %s has lease bug %s: %s (%s)", v, b.issue, b.summary, advice))
		}
	}
	return out
}

// affects reports whether v has the bug, and the fixed release of v's minor
// line if there is one.
func (b leaseBug) affects(v version) (fix version, affected bool) {
	for _, f := range b.fixed {
		if f.major == v.major && f.minor == v.minor {
			return f, v.less(f)
		}
	}
	// A line without a listed fix: affected if older than the first fixed
	// line, fixed from the start if newer than the last.
	return version{}, v.less(b.fixed[0])
}

type version struct{ major, minor, patch int }

func (v version) less(o version) bool {
	if v.major != o.major {
		return v.major < o.major
	}
	if v.minor != o.minor {
		return v.minor < o.minor
	}
	return v.patch < o.patch
}

func (v version) String() string { return fmt.Sprintf("%d.%d.%d", v.major, v.minor, v.patch) }

// parseVersion reads "3.5.12", "v3.5.12", "3.7.0-rc.1" or "3.5.12+git".
// A pre-release suffix is ignored: etcd cuts release candidates only for
// x.y.0, from a main branch that already has the fixes of that line.
func parseVersion(s string) (version, bool) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return version{}, false
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return version{}, false
		}
		n[i] = x
	}
	return version{n[0], n[1], n[2]}, true
}
