package main

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// TestSharedPeriodicAcrossLeaderKills: daemons over one etcd member declare
// the same schedule; the maintenance leader is SIGKILLed twice, so three
// daemons lead in turn. Every tick is enqueued exactly once, and none is
// missing (those due while no daemon led are caught up).
func TestSharedPeriodicAcrossLeaderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	c := newSPCluster(t, "periodic", spTTL)
	periodic := []string{"--periodic", "tick|@every 1s|echo"}
	live := []*spProc{c.daemon(t, "a", periodic...), c.daemon(t, "b", periodic...)}
	leaderOf := func() *spProc {
		t.Helper()
		deadline := time.Now().Add(spWait)
		for time.Now().Before(deadline) {
			for _, p := range live {
				var last string
				for _, l := range p.logLines() {
					switch l.Msg {
					case "leader acquired":
						last = "acquired"
					case "leadership released":
						last = "released"
					}
				}
				if last == "acquired" {
					return p
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatal("no maintenance leader")
		return nil
	}
	killed := 0
	for round := range 2 {
		time.Sleep(3 * time.Second)
		l := leaderOf()
		l.kill(t)
		killed++
		var rest []*spProc
		for _, p := range live {
			if p != l {
				rest = append(rest, p)
			}
		}
		live = rest
		if round == 0 {
			live = append(live, c.daemon(t, "c", periodic...))
		}
	}
	time.Sleep(spTTL + 4*time.Second) // the survivor takes over and catches up
	// The jobs first, then the schedule's state: the survivor goes on
	// ticking, so the state may count a tick or two more than were listed.
	var jobs []coordinator.Job
	if err := json.Unmarshal([]byte(c.cli(t, "jobs", "list", "--kind", "echo", "--json", "--limit", "1000")), &jobs); err != nil {
		t.Fatal(err)
	}
	var ps []coordinator.PeriodicState
	if err := json.Unmarshal([]byte(c.cli(t, "periodic", "list", "--json")), &ps); err != nil || len(ps) != 1 {
		t.Fatalf("periodic list: %+v, %v", ps, err)
	}
	var ticks []time.Time
	seen := map[string]bool{}
	for _, j := range jobs {
		if seen[j.UniqueKey] {
			t.Errorf("tick %s enqueued twice", j.UniqueKey)
		}
		seen[j.UniqueKey] = true
		tick, err := time.Parse(time.RFC3339, strings.TrimPrefix(j.UniqueKey, "periodic:tick:"))
		if err != nil {
			t.Fatalf("job %s: unique key %q", j.ID, j.UniqueKey)
		}
		ticks = append(ticks, tick)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Errorf("ticks %s and %s are %s apart: a tick is missing", ticks[i-1].Format(time.TimeOnly), ticks[i].Format(time.TimeOnly), d)
		}
	}
	if len(ticks) < 8 || ps[0].Enqueued < len(ticks) || ps[0].Enqueued > len(ticks)+2 || ps[0].Skipped != 0 {
		t.Errorf("%d ticks enqueued, state %+v", len(ticks), ps[0])
	}
	t.Logf("%d ticks, one each, across %d leader kills", len(ticks), killed)
}

// A schedule that a daemon declares but the maintenance leader does not
// never runs while that leader leads (only the leader enqueues, its own
// schedules): periodic list says so, naming both, where it said "no
// periodic jobs yet: declare them", though one was declared; the API
// gives the leader and who declares what.
func TestSharedPeriodicListNamesSchedulesTheLeaderDoesNotDeclare(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	c := newSPCluster(t, "periodic-declared", spTTL)
	a := c.daemon(t, "a")
	a.waitLog(t, 0, "leadership", func(l spLine) bool { return l.Msg == "leader acquired" })
	b := c.daemon(t, "b", "--periodic", "nightly|@daily|echo")
	r := runCLI(t, nil, "", "periodic", "list", "--etcd", c.etcd, "--namespace", c.ns)
	want := "schedule nightly is declared by " + b.id + " but not by the maintenance leader " + a.id
	if r.code != 0 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "declare them with") {
		t.Fatalf("periodic list: exit %d, stderr %q; want it to say %q", r.code, r.stderr, want)
	}
	var resp apiserver.PeriodicResponse
	if err := json.Unmarshal([]byte(httpGet(t, "http://"+b.addr+"/v1/periodic")), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Leader != a.id || !slices.Equal(resp.Declared["nightly"], []string{b.id}) {
		t.Fatalf("GET /v1/periodic: leader %q, declared %v; want %s, nightly by %s", resp.Leader, resp.Declared, a.id, b.id)
	}
}
