package coordtest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// Tests from a review of queue control (2026-12-06). Run adds them to the
// suite.
var limitReviewTests = []suiteTest{
	{"LoweredLimitRacingClaimsStayUnderIt", testLoweredLimitRace},
	{"StaleSlotReadBeforeLoweredLimitReadAgain", testStaleSlotReadBeforeLowering},
}

// heldSlots returns the global-limit slots of queue q held in the store:
// index to the job that holds it.
func heldSlots(t *testing.T, h *harness, q string) map[int]string {
	t.Helper()
	prefix := h.keysRoot() + "qm/s/" + q + "/"
	rr, err := h.store.Range(h.ctx(), kv.Prefix(prefix, 0))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, x := range rr.KVs {
		n, err := strconv.Atoi(strings.TrimPrefix(x.Key, prefix))
		if err != nil {
			t.Fatalf("slot key %s", x.Key)
		}
		out[n] = string(x.Value)
	}
	return out
}

// testLoweredLimitRace: a limit lowered while jobs run leaves slots at or
// above it held. Claims that read the slots while such a slot is held and
// room is left under the new limit must not both take a slot below it: two
// daemons that each see room for one, and each take a different free
// slot (spread claims pick them at random), would run more jobs than the
// limit, started after it was set. Here 7 jobs hold slots 8 to 14 under a
// limit lowered to 8, so there is room for one more; one daemon's claim
// has read the slots and waits to commit while another daemon claims. Each
// round, the two pick the same slot with a chance of 1 in 8; a build
// without the guard fails the test unless that happens in every round.
func testLoweredLimitRace(t *testing.T, h *harness) {
	const limit, above = 8, 7
	for round := range 8 {
		q := fmt.Sprintf("lowered%d", round)
		holdAboveLoweredLimit(t, h, q, limit, above)
		g := newStepStore(h.store)
		c1 := h.coordinator(g, coordinator.Config{})
		s1 := h.session(c1)
		c2 := h.coordinator(h.store, coordinator.Config{})
		s2 := h.session(c2)
		g.txnArmed.Store(true)
		first := make(chan claimResult, 1)
		go func() {
			runs, st, err := c1.Claim(h.ctx(), s1, q, 1, true)
			first <- claimResult{runs, st, err}
		}()
		select {
		case <-g.txnHeld: // the first daemon's claim has read the slots and waits to commit
		case r := <-first:
			t.Fatalf("round %d: first claim ended before committing: %d runs, %+v, %v", round, len(r.runs), r.st, r.err)
		}
		second, _, err := c2.Claim(h.ctx(), s2, q, 1, true)
		close(g.txnGo)
		r := <-first
		if err != nil || r.err != nil {
			t.Fatalf("round %d: claims: %v, %v", round, r.err, err)
		}
		if running := above + len(r.runs) + len(second); running > limit {
			t.Fatalf("round %d: %d jobs run under a limit of %d (%d at or above it from before it was lowered, and %d and %d claimed since; slots held: %v)",
				round, running, limit, above, len(r.runs), len(second), heldSlots(t, h, q))
		}
		if held := len(heldSlots(t, h, q)); held > limit {
			t.Fatalf("round %d: %d slots held under a limit of %d", round, held, limit)
		}
	}
}

// testStaleSlotReadBeforeLowering: a claim's first read of the slots is
// serializable, and a lagging member can answer it from before the limit
// the claim compares was set: before the slots now held at or above it
// were taken. Such a read must be made again at the current revision;
// taken as it is, it shows every slot free and room for the whole limit.
func testStaleSlotReadBeforeLowering(t *testing.T, h *harness) {
	const q, limit, above = "stale-lowered", 8, 7
	if _, _, err := h.c.SetQueueLimit(h.ctx(), q, limit+above); err != nil {
		t.Fatal(err)
	}
	rs := &replayRangeStore{Store: h.store, match: slotReads, first: true}
	c := h.coordinator(rs, coordinator.Config{})
	s := h.session(c)
	// The queue is empty: the claim reads the slots (none held), which
	// the store keeps to answer again, and finds no job.
	if runs, _, err := c.Claim(h.ctx(), s, q, 1, false); err != nil || len(runs) != 0 {
		t.Fatalf("claim of an empty queue: %d runs, %v", len(runs), err)
	}
	holdAboveLoweredLimit(t, h, q, limit, above)
	rs.armed.Store(true) // the next serializable read of the slots is the one before
	more, _, err := c.Claim(h.ctx(), s, q, limit, false)
	if err != nil {
		t.Fatal(err)
	}
	if rs.armed.Load() {
		t.Fatal("no read of the slots was answered stale: the test tested nothing")
	}
	if running := above + len(more); running > limit {
		t.Fatalf("%d jobs run under a limit of %d (%d at or above it from before it was lowered, %d claimed after a stale read of the slots)",
			running, limit, above, len(more))
	}
}

// holdAboveLoweredLimit leaves above jobs of queue q running on the slots
// limit to limit+above-1 under a limit lowered to limit, and two jobs
// available: it enqueues them, claims limit+above under that limit with a
// session of its own, lowers the limit, and completes the runs on the
// slots below it.
func holdAboveLoweredLimit(t *testing.T, h *harness, q string, limit, above int) {
	t.Helper()
	ps := make([]coordinator.EnqueueParams, limit+above+2)
	for i := range ps {
		ps[i] = coordinator.EnqueueParams{Kind: "k", Queue: q}
	}
	if _, err := h.c.EnqueueBatch(h.ctx(), ps); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.c.SetQueueLimit(h.ctx(), q, limit+above); err != nil {
		t.Fatal(err)
	}
	runs, _, err := h.c.Claim(h.ctx(), h.session(h.c), q, limit+above, false)
	if err != nil || len(runs) != limit+above {
		t.Fatalf("claimed %d under a limit of %d (%v)", len(runs), limit+above, err)
	}
	if _, _, err := h.c.SetQueueLimit(h.ctx(), q, limit); err != nil {
		t.Fatal(err)
	}
	// The runs on the slots below the new limit end; those at or above
	// it go on.
	holder := map[string]int{}
	for n, id := range heldSlots(t, h, q) {
		holder[id] = n
	}
	for _, r := range runs {
		if n, ok := holder[r.Job().ID]; !ok {
			t.Fatalf("run of job %s holds no slot", r.Job().ID)
		} else if n < limit {
			if err := r.Complete(h.ctx(), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}
