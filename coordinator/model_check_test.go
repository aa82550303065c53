package coordinator

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// modelScan is the whole namespace as read after a step.
type modelScan struct {
	kvs   []kv.KeyValue
	byKey map[string]kv.KeyValue
	recs  map[string]*Job // decoded records, by id
	slots map[string]int  // slot keys of each queue's global limit
	avail map[string][]string
}

// slotsOf returns how many slots of queue q's global limit are held.
func (s *modelScan) slotsOf(q string) int { return s.slots[q] }

// availableOrder returns the ids of queue q's available index, in order.
func (s *modelScan) availableOrder(q string) []string { return s.avail[q] }

func (h *modelHarness) scan() *modelScan {
	h.t.Helper()
	rr, err := h.store.Range(h.ctx, kv.Prefix(h.c.keys.root, 0))
	if err != nil {
		h.fatalf("scan the namespace: %v", err)
	}
	if rr.More {
		h.fatalf("scan the namespace: cut short")
	}
	s := &modelScan{kvs: rr.KVs, byKey: map[string]kv.KeyValue{}, recs: map[string]*Job{}, slots: map[string]int{}, avail: map[string][]string{}}
	for _, x := range rr.KVs {
		s.byKey[x.Key] = x
	}
	return s
}

// violation is one broken invariant.
type violation struct {
	inv string // the invariant's name, as findings are keyed
	msg string
}

// check reads the namespace and checks, against the records and the model:
//
//  1. every record decodes, under its own id, in the state, attempt, max
//     attempts, lost-run count, queue and unique key the model expects (and,
//     running, the owner and token of the run that holds it);
//  2. each job has exactly one index entry, the one keys.index names for
//     its record, with the value the package doc gives it: an available
//     entry is a byte-for-byte copy of the record, a running one its owner
//     and queue, a timer its state, a finished one its state and the
//     unique key it still holds;
//  3. no index entry, running entry, ownership key, cancel request or
//     global-limit slot exists without its job's record, and no key lies
//     outside the layout;
//  4. an ownership key exists for running jobs only, with the record's
//     owner as its value, its token as its creation revision, on its
//     owner's live lease; a running job lacks it only while its owner's
//     lease is gone (until reaped). A cancel request exists for running
//     jobs only, and exactly when the model has one pending. A job of a
//     limited queue holds one slot while it runs on a live lease, and no
//     more slots are held than the limit;
//  5. a unique key names a job that holds it (see modelHoldsKey), and every
//     job that holds its key has it;
//  6. Counts, AvailableByQueue and RunningByQueue agree with the records
//     (read again after each step that changed a key);
//  7. the live daemons, and they alone, are registered, on their leases;
//
// and that a step that wrote nothing (an error, a refused write) changed no
// key. That a run has at most one accepted outcome, and that a stale run's
// writes are refused, is checked by the steps that write through runs.
func (h *modelHarness) check(noWrite bool) {
	h.t.Helper()
	s := h.scan()
	var vs []violation
	bad := func(inv, format string, args ...any) {
		vs = append(vs, violation{inv, fmt.Sprintf(format, args...)})
	}
	k := h.c.keys
	root := k.root

	raw := map[string][]byte{}
	idx := map[string][]string{} // job id -> its index entries
	owners := map[string]kv.KeyValue{}
	cancels := map[string]kv.KeyValue{}
	uniques := map[string]kv.KeyValue{}
	workers := map[string]kv.KeyValue{}
	slots := map[string][]kv.KeyValue{} // job id -> slots naming it
	for _, x := range s.kvs {
		rest := strings.TrimPrefix(x.Key, root)
		parts := strings.Split(rest, "/")
		switch {
		case parts[0] == "j" && len(parts) == 2:
			j, err := decodeKV(&x)
			if err != nil {
				bad("1-record", "record %s does not decode: %v", x.Key, err)
				continue
			}
			if j.ID != parts[1] {
				bad("1-record", "record %s holds job %s", x.Key, j.ID)
				continue
			}
			s.recs[j.ID] = j
			raw[j.ID] = x.Value
		case parts[0] == "q" && len(parts) == 5:
			idx[parts[4]] = append(idx[parts[4]], x.Key)
			s.avail[parts[1]] = append(s.avail[parts[1]], parts[4])
		case (parts[0] == "t" || parts[0] == "f") && len(parts) == 3:
			idx[parts[2]] = append(idx[parts[2]], x.Key)
		case parts[0] == "r" && len(parts) == 2:
			idx[parts[1]] = append(idx[parts[1]], x.Key)
		case parts[0] == "o" && len(parts) == 2:
			owners[parts[1]] = x
		case parts[0] == "c" && len(parts) == 2:
			cancels[parts[1]] = x
		case parts[0] == "u" && len(parts) >= 2:
			uniques[strings.TrimPrefix(rest, "u/")] = x
		case parts[0] == "w" && len(parts) == 2:
			workers[parts[1]] = x
		case rest == "cv-registered": // written by every registration
		case parts[0] == "qm" && len(parts) == 3 && parts[1] == "c":
		case parts[0] == "qm" && len(parts) == 4 && parts[1] == "s":
			slots[string(x.Value)] = append(slots[string(x.Value)], x)
			s.slots[parts[2]]++
		default:
			bad("3-layout", "key outside the layout: %s = %q", x.Key, x.Value)
		}
	}

	ids := slices.Sorted(maps.Keys(s.recs))
	for _, id := range ids {
		j := s.recs[id]
		want := k.index(j)
		if got := idx[id]; len(got) != 1 || got[0] != want {
			bad("2-index", "%s job %s has index entries %q, want exactly %q", j.State, id, got, want)
		} else {
			v := s.byKey[want].Value
			// The values the package doc gives, spelled out here rather
			// than built by the code under test.
			var wantV []byte
			switch {
			case j.State == StateAvailable:
				wantV = raw[id]
			case j.State == StateRunning:
				wantV = []byte(j.Owner + "\n" + j.Queue)
			case j.State.Final() && modelHoldsKey(j):
				wantV = []byte(string(j.State) + "\x00" + j.UniqueKey)
			default:
				wantV = []byte(j.State)
			}
			if !bytes.Equal(v, wantV) {
				bad("2-index", "index entry %s = %q, want %q (record %s)", want, v, wantV, raw[id])
			}
		}

		// Invariant 4: ownership, cancel requests, slots.
		o, owned := owners[id]
		if j.State == StateRunning {
			d := h.byWorker[j.Owner]
			switch {
			case d == nil:
				bad("4-owner", "running job %s is owned by %q, no daemon of the test", id, j.Owner)
			case owned && d.dead:
				bad("4-owner", "running job %s keeps ownership key %s (lease %d) of dead daemon %s", id, o.Key, o.Lease, d.name)
			case owned && (string(o.Value) != j.Owner || o.CreateRevision != int64(j.Token) || o.Lease != d.sess.Lease()):
				bad("4-owner", "ownership key %s = %q created at %d on lease %d; the record has owner %s token %d, on lease %d", o.Key, o.Value, o.CreateRevision, o.Lease, j.Owner, j.Token, d.sess.Lease())
			case !owned && !d.dead:
				bad("4-owner", "running job %s of live daemon %s has no ownership key", id, d.name)
			}
			if j.Queue == modelLimited && d != nil && !d.dead {
				if ss := slots[id]; len(ss) != 1 || ss[0].Lease != d.sess.Lease() {
					bad("4-slot", "running job %s of limited queue %s holds slots %v, want one on lease %d", id, j.Queue, ss, d.sess.Lease())
				}
			}
		} else if owned {
			bad("4-owner", "%s job %s has ownership key %s = %q", j.State, id, o.Key, o.Value)
		}
		if j.State != StateRunning || j.Queue != modelLimited || h.byWorker[j.Owner] == nil || h.byWorker[j.Owner].dead {
			for _, x := range slots[id] {
				bad("4-slot", "%s job %s of queue %s (owner %q) is named by slot %s on lease %d", j.State, id, j.Queue, j.Owner, x.Key, x.Lease)
			}
		}
		if c, ok := cancels[id]; ok && j.State != StateRunning {
			bad("4-cancel", "%s job %s has cancel request %s = %s", j.State, id, c.Key, c.Value)
		}

		// Invariant 5, from the job's side.
		if modelHoldsKey(j) {
			u, ok := uniques[j.UniqueKey]
			if !ok || string(u.Value) != id {
				bad("5-unique", "%s job %s holds unique key %q, but %s = %q (exists %t)", j.State, id, j.UniqueKey, k.unique(j.UniqueKey), u.Value, ok)
			}
		}
	}

	// Invariant 3: what names a job that has no record.
	for _, id := range slices.Sorted(maps.Keys(idx)) {
		if s.recs[id] == nil {
			bad("3-orphan", "index entries %q of job %s, which has no record", idx[id], id)
		}
	}
	for _, m := range []map[string]kv.KeyValue{owners, cancels} {
		for _, id := range slices.Sorted(maps.Keys(m)) {
			if s.recs[id] == nil {
				bad("3-orphan", "%s = %q names job %s, which has no record", m[id].Key, m[id].Value, id)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(slots)) {
		if s.recs[id] == nil {
			bad("3-orphan", "slots %v name job %s, which has no record", slots[id], id)
		}
	}
	for q, n := range s.slots {
		if q != modelLimited || n > modelLimit {
			bad("4-slot", "queue %s has %d slots held (limit %d on queue %s only)", q, n, modelLimit, modelLimited)
		}
	}

	// Invariant 5, from the key's side.
	for _, key := range slices.Sorted(maps.Keys(uniques)) {
		u := uniques[key]
		j := s.recs[string(u.Value)]
		switch {
		case j == nil:
			bad("5-unique", "unique key %s names job %q, which has no record", u.Key, u.Value)
		case j.UniqueKey != key:
			bad("5-unique", "unique key %s names job %s, whose unique key is %q", u.Key, j.ID, j.UniqueKey)
		case !modelHoldsKey(j):
			bad("5-unique", "unique key %s names %s job %s, which does not hold it (unique states %v)", u.Key, j.State, j.ID, j.UniqueStates)
		}
	}

	// The model: which jobs exist, and what each must be.
	for _, m := range h.jobs {
		j := s.recs[m.id]
		switch {
		case m.deleted && j != nil:
			bad("1-model", "%s was deleted, but its record is %s", m, j.State)
		case m.deleted:
		case j == nil:
			bad("1-model", "%s (%s) has no record", m, m.state)
		case j.State != m.state:
			bad("1-model", "%s is %s, the model says %s", m, j.State, m.state)
		case j.Attempt != m.attempt || j.MaxAttempts != m.maxAttempts || j.Rescues != m.rescues:
			bad("1-model", "%s has attempt %d of %d, %d lost runs; the model says %d of %d, %d", m, j.Attempt, j.MaxAttempts, j.Rescues, m.attempt, m.maxAttempts, m.rescues)
		case j.Queue != m.queue || j.Kind != m.kind || j.UniqueKey != m.uniqueKey:
			bad("1-model", "%s is %s/%s key %q; the model says %s/%s key %q", m, j.Kind, j.Queue, j.UniqueKey, m.kind, m.queue, m.uniqueKey)
		case m.state == StateRunning && (j.Owner != m.run.d.sess.WorkerID() || j.Token != m.run.token):
			bad("1-model", "running %s is owned by %s token %d; the model says %s", m, j.Owner, j.Token, m.run)
		case m.state == StateRunning:
			if _, ok := cancels[m.id]; ok != m.cancelReq {
				bad("4-cancel", "running %s has a cancel request: %t; the model says %t", m, ok, m.cancelReq)
			}
		}
	}
	for _, id := range ids {
		if h.byID[id] == nil {
			bad("1-model", "record of job %s, which the test never enqueued", id)
		}
	}

	// Invariant 6: counts. A step that changed no key (checked below)
	// cannot change them: they are read again after the next write.
	unchanged := noWrite && h.prev != nil && len(s.kvs) == len(h.prev.kvs)
	for i := 0; unchanged && i < len(s.kvs); i++ {
		unchanged = s.kvs[i].Key == h.prev.kvs[i].Key && s.kvs[i].ModRevision == h.prev.kvs[i].ModRevision
	}
	wantCounts := map[State]int{}
	for _, st := range States {
		wantCounts[st] = 0
	}
	wantAvail, wantRunning := map[string]int{}, map[string]int{}
	for _, j := range s.recs {
		wantCounts[j.State]++
		switch j.State {
		case StateAvailable:
			wantAvail[j.Queue]++
		case StateRunning:
			wantRunning[j.Queue]++
		}
	}
	if !unchanged {
		if got, err := h.c.Counts(h.ctx); err != nil || !maps.Equal(got, wantCounts) {
			bad("6-counts", "Counts = %v, %v; the records say %v", got, err, wantCounts)
		}
		if got, err := h.c.AvailableByQueue(h.ctx); err != nil || !maps.Equal(got, wantAvail) {
			bad("6-counts", "AvailableByQueue = %v, %v; the records say %v", got, err, wantAvail)
		}
		if got, err := h.c.RunningByQueue(h.ctx); err != nil || !maps.Equal(got, wantRunning) {
			bad("6-counts", "RunningByQueue = %v, %v; the records say %v", got, err, wantRunning)
		}
		// RecentTally: the same from one read of each index (its
		// finished counts may be up to a second old).
		tally, err := h.c.RecentTally(h.ctx, TallyParams{})
		unfinished := func(m map[State]int) map[State]int {
			out := map[State]int{}
			for _, st := range []State{StateScheduled, StateAvailable, StateRunning, StateRetryable} {
				out[st] = m[st]
			}
			return out
		}
		if err != nil || !maps.Equal(unfinished(tally.Counts), unfinished(wantCounts)) || !maps.Equal(tally.AvailableByQueue, wantAvail) || !maps.Equal(tally.RunningByQueue, wantRunning) {
			bad("6-counts", "RecentTally = %v, %v, %v, %v; the records say %v, %v, %v", tally.Counts, tally.AvailableByQueue, tally.RunningByQueue, err, wantCounts, wantAvail, wantRunning)
		}
	}

	// Registrations.
	for _, d := range h.daemons {
		w, ok := workers[d.sess.WorkerID()]
		switch {
		case d.dead && ok:
			bad("7-workers", "dead daemon %s is still registered: %s", d.name, w.Key)
		case !d.dead && (!ok || w.Lease != d.sess.Lease()):
			bad("7-workers", "live daemon %s registered %t on lease %d, want lease %d", d.name, ok, w.Lease, d.sess.Lease())
		}
	}
	for id := range workers {
		if h.byWorker[id] == nil {
			bad("7-workers", "registration of unknown daemon %s", id)
		}
	}

	if noWrite && h.prev != nil {
		var changed []string
		for _, x := range s.kvs {
			if p, ok := h.prev.byKey[x.Key]; !ok || p.ModRevision != x.ModRevision {
				changed = append(changed, x.Key)
			}
		}
		for _, x := range h.prev.kvs {
			if _, ok := s.byKey[x.Key]; !ok {
				changed = append(changed, x.Key+" (deleted)")
			}
		}
		if len(changed) > 0 {
			bad("0-nowrite", "a step that should write nothing changed %q", changed)
		}
	}

	h.prev = s
	h.report(s, vs)
}

// modelHoldsKey reports whether j holds its unique key, by the rule of
// UniqueOpts.ByState (spelled out here, not the code under test): while
// unfinished, and in the final states it names.
func modelHoldsKey(j *Job) bool {
	return j.UniqueKey != "" && (!j.State.Final() || slices.Contains(j.UniqueStates, j.State))
}

// modelFindings are invariants whose violation is a known finding: logged
// and counted, not failed, so that the rest of the check runs.
var modelFindings = map[string]bool{}

// report fails the test on vs, with the keys of each job they name.
func (h *modelHarness) report(s *modelScan, vs []violation) {
	h.t.Helper()
	var fail []violation
	for _, v := range vs {
		if modelFindings[v.inv] {
			h.skipped[v.inv]++
			continue
		}
		fail = append(fail, v)
	}
	if len(fail) == 0 {
		return
	}
	var b strings.Builder
	b.WriteString("invariants broken:\n")
	named := map[string]bool{}
	for _, v := range fail {
		fmt.Fprintf(&b, "  [%s] %s\n", v.inv, v.msg)
		for _, m := range h.jobs {
			if strings.Contains(v.msg, m.id) || strings.Contains(v.msg, m.String()) {
				named[m.id] = true
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(named)) {
		fmt.Fprintf(&b, "keys of %s:\n", h.byID[id])
		for _, x := range s.kvs {
			if strings.Contains(x.Key, id) || string(x.Value) == id {
				fmt.Fprintf(&b, "  %s (create %d, mod %d, lease %d) = %.300s\n", strings.TrimPrefix(x.Key, h.c.keys.root), x.CreateRevision, x.ModRevision, x.Lease, x.Value)
			}
		}
	}
	h.fatalf("%s", b.String())
}
