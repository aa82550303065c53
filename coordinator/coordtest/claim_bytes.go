package coordtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// Tests of the byte bound of a claim (coordinator.Config.MaxClaimBytes,
// 2026-12-06). Run adds them to the suite.
var claimBytesTests = []suiteTest{
	{"ClaimsOfLargeJobsKeepToTheByteBound", testClaimBytes},
}

// testClaimBytes: claims of jobs whose records are large take only as many
// as fit in the byte bound (always one, however large), and once a claim
// has seen the queue's entries, read no more than fit; the jobs a claim
// read but left are taken by the claims after it, none hidden by the
// floor. With and without a floor, spread, a global limit, reads as on
// etcd.
func testClaimBytes(t *testing.T, h *harness) {
	const (
		size   = 10_000 // payload bytes: an entry is a little more
		budget = 35_000 // three entries fit, not four
		fit    = 3
		jobs   = 20
		ask    = 10
	)
	payload := func(n int) json.RawMessage { return json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`) }
	for _, v := range []struct {
		watched, spread, asEtcd bool
		limit                   int
	}{
		{watched: true},
		{watched: false},
		{watched: true, spread: true},
		{watched: true, asEtcd: true},
		{watched: true, spread: true, asEtcd: true, limit: 5},
		{watched: false, spread: true, limit: 2},
	} {
		name := fmt.Sprintf("%+v", v)
		if _, _, err := h.c.SetQueueLimit(h.ctx(), coordinator.DefaultQueue, v.limit); err != nil {
			t.Fatal(err)
		}
		var order []string // job ids, in the queue's order
		ps := make([]coordinator.EnqueueParams, jobs)
		for i := range ps {
			ps[i] = coordinator.EnqueueParams{Kind: "k", Payload: payload(size)}
		}
		// Last, a job larger than the bound on its own, then a small one.
		ps = append(ps, coordinator.EnqueueParams{Kind: "k", Payload: payload(2 * budget)}, coordinator.EnqueueParams{Kind: "k"})
		rs, err := h.c.EnqueueBatch(h.ctx(), ps)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			order = append(order, r.Job.ID)
		}
		var base kv.Store = h.store
		if v.asEtcd {
			base = rangeCountsAllStore{base}
		}
		er := &entriesReadStore{Store: base}
		c := h.coordinator(er, coordinator.Config{MaxClaimBytes: budget})
		if v.watched {
			h.watchWith(c)
		}
		s := h.session(c)
		var got []string
		for claim := 1; len(got) < len(order); claim++ {
			if claim > 2*len(order) {
				t.Fatalf("%s: %d claims took %d jobs of %d", name, claim-1, len(got), len(order))
			}
			before := er.entries.Load()
			runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, ask, v.spread)
			read := er.entries.Load() - before
			if err != nil || len(runs) == 0 {
				t.Fatalf("%s: claim %d: %d jobs, %v, with %d of %d jobs left: the floor passed a job a claim left", name, claim, len(runs), err, len(order)-len(got), len(order))
			}
			bytes := 0
			for _, r := range runs {
				bytes += len(r.Job().Payload)
				got = append(got, r.Job().ID)
			}
			if len(runs) > 1 && bytes > budget {
				t.Fatalf("%s: claim %d took %d jobs of %d payload bytes in all: over the %d-byte bound", name, claim, len(runs), bytes, budget)
			}
			// The queue's entries were large at the claim before: this one
			// reads what fits (twice, when its first read predates a watch
			// event and it reads again; see claim).
			if claim > 1 && len(got) <= jobs && read > 2*fit {
				t.Errorf("%s: claim %d read %d entries to take at most %d", name, claim, read, fit)
			}
			for _, r := range runs {
				if err := r.Complete(h.ctx(), nil); err != nil {
					t.Fatalf("%s: complete: %v", name, err)
				}
			}
		}
		if !v.spread && strings.Join(got, " ") != strings.Join(order, " ") {
			t.Errorf("%s: claimed in the order\n%v\nwant the queue's\n%v", name, got, order)
		}
		seen := map[string]bool{}
		for _, id := range got {
			if seen[id] {
				t.Fatalf("%s: job %s claimed twice", name, id)
			}
			seen[id] = true
		}
		if runs, _, err := c.Claim(h.ctx(), s, coordinator.DefaultQueue, ask, v.spread); err != nil || len(runs) != 0 {
			t.Fatalf("%s: claim of the drained queue: %d jobs, %v", name, len(runs), err)
		}
	}
}
