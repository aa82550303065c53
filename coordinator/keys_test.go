package coordinator

import (
	"testing"
	"time"
)

// TestKeyLayout pins the stored key layout: records and index entries
// written by one version are read by the next, so any change here is a
// change of the store format.
func TestKeyLayout(t *testing.T) {
	k := newKeys("ns")
	at := time.Unix(1764660000, 123456789).UTC()
	fin := at.Add(time.Second)
	j := &Job{ID: "01JEXAMPXE0000000000000000", Queue: "default", Priority: 3, ScheduledAt: at, FinalizedAt: &fin}
	for _, c := range []struct {
		state State
		want  string
	}{
		{StateAvailable, "/leasehold/ns/q/default/3/01764660000123456789/01JEXAMPXE0000000000000000"},
		{StateScheduled, "/leasehold/ns/t/01764660000123456789/01JEXAMPXE0000000000000000"},
		{StateRetryable, "/leasehold/ns/t/01764660000123456789/01JEXAMPXE0000000000000000"},
		{StateRunning, "/leasehold/ns/r/01JEXAMPXE0000000000000000"},
		{StateCompleted, "/leasehold/ns/f/01764660001123456789/01JEXAMPXE0000000000000000"},
	} {
		j.State = c.state
		if got := k.index(j); got != c.want {
			t.Errorf("%s index key %q, want %q", c.state, got, c.want)
		}
	}
	if got, want := k.job(j.ID), "/leasehold/ns/j/01JEXAMPXE0000000000000000"; got != want {
		t.Errorf("record key %q, want %q", got, want)
	}
	// Builds read the cluster version's keys before they know anything
	// else of a namespace (ADR 0028): these never change.
	if got, want := k.clusterVersion(2), "/leasehold/ns/cv/2"; got != want {
		t.Errorf("cluster version key %q, want %q", got, want)
	}
	if got, want := k.registrations(), "/leasehold/ns/cv-registered"; got != want {
		t.Errorf("registrations key %q, want %q", got, want)
	}
	from := k.availableAt("default", 3, at.UnixNano())
	if prio, ts, ok := k.parseAvailable("default", from); !ok || prio != 3 || ts != at.UnixNano() {
		t.Errorf("parseAvailable(%q) = %d, %d, %v", from, prio, ts, ok)
	}
}
