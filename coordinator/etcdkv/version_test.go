package etcdkv

import (
	"strings"
	"testing"
	"time"
)

func TestKnownLeaseBugs(t *testing.T) {
	const (
		oldLeader = "etcd-io/etcd#15247"
		renew     = "etcd-io/etcd#20547"
	)
	tests := []struct {
		version string
		want    []string // issues, in table order
	}{
		{"3.3.27", []string{oldLeader, renew}},
		{"3.4.23", []string{oldLeader, renew}}, // Debian bookworm
		{"3.4.30", []string{oldLeader, renew}},
		{"3.4.31", []string{renew}},
		{"3.4.37", []string{renew}},
		{"3.4.38", nil},
		{"3.5.0", []string{oldLeader, renew}},
		{"3.5.12", []string{oldLeader, renew}},
		{"3.5.13", []string{renew}},
		{"v3.5.22", []string{renew}},
		{"3.5.23", nil},
		{"3.5.30+git", nil},
		{"3.6.0", []string{renew}},
		{"3.6.0-rc.2", []string{renew}},
		{"3.6.4", []string{renew}},
		{"3.6.5", nil},
		{"3.7.0-rc.0", nil},
		{"3.7.0", nil},
		{"3.7.3", nil},
		{"3.8.0", nil},
		{"4.0.0", nil},
	}
	for _, tc := range tests {
		got := KnownLeaseBugs(tc.version)
		if len(got) != len(tc.want) {
			t.Errorf("KnownLeaseBugs(%q) = %q, want %d warnings about %v", tc.version, got, len(tc.want), tc.want)
			continue
		}
		for i, issue := range tc.want {
			if !strings.Contains(got[i], issue) || !strings.Contains(got[i], tc.version) {
				t.Errorf("KnownLeaseBugs(%q)[%d] = %q, want a warning about %s naming the version", tc.version, i, got[i], issue)
			}
		}
	}
	for _, bad := range []string{"", "garbage", "3.5", "3.x.1", "3.5.-1"} {
		got := KnownLeaseBugs(bad)
		if len(got) != 1 || !strings.Contains(got[0], "not understood") {
			t.Errorf("KnownLeaseBugs(%q) = %q, want one warning that the version is not understood", bad, got)
		}
	}
	// The advice names the fixed release of the line, or all fixes.
	if got := KnownLeaseBugs("3.5.12"); !strings.Contains(got[0], "fixed in 3.5.13") {
		t.Errorf("advice for 3.5.12: %q", got[0])
	}
	if got := KnownLeaseBugs("3.3.1"); !strings.Contains(got[0], "not fixed in this release line; fixed in 3.4.31, 3.5.13, 3.6.0") {
		t.Errorf("advice for 3.3.1: %q", got[0])
	}
}

func TestTTLSeconds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{{"0s", 1}, {"-3s", 1}, {"1ns", 1}, {"1s", 1}, {"1.001s", 2}, {"2s", 2}, {"29.5s", 30}, {"30s", 30}} {
		d, err := time.ParseDuration(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := ttlSeconds(d); got != tc.want {
			t.Errorf("ttlSeconds(%s) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
