package coordinator

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// UniqueOpts make an enqueue idempotent by what the job is rather than by a
// key the caller invents (River's UniqueOpts). The unique key is derived
// from the kind and, as asked, the queue, the payload and the period; a
// UniqueKey given with it is part of the key too. An enqueue whose derived
// key is held by an existing job returns that job (EnqueueResult.Existed)
// and writes nothing. The check and the insert are one transaction
// (compare-and-set on the key), so racing enqueues from any number of
// daemons insert one job.
type UniqueOpts struct {
	// ByArgs makes the payload part of the key. Payloads are compared as
	// JSON values: key order and white space do not matter.
	ByArgs bool
	// ByQueue makes the queue part of the key.
	ByQueue bool
	// ByPeriod, if positive, makes the key hold for one period: the
	// job's scheduled time (or the enqueue time) truncated to a multiple
	// of ByPeriod. A job in the next period is not a duplicate.
	ByPeriod time.Duration
	// ByState lists the final states in which an existing job still
	// counts as a duplicate (completed, discarded, cancelled): then its
	// key is held until retention deletes it (or an operator does).
	// Unfinished jobs (scheduled, available, running, retryable) always
	// count, so a job never loses its key while it may still run: naming
	// one is ErrInvalid. Default: none, the key is free once the job is
	// final.
	ByState []State
}

func (u *UniqueOpts) validate() error {
	if u == nil {
		return nil
	}
	if u.ByPeriod < 0 {
		return fmt.Errorf("%w: unique period %s is negative: use a positive period, or 0 for none", ErrInvalid, u.ByPeriod)
	}
	for _, st := range u.ByState {
		// Unfinished states always hold the key: naming one would be
		// silently ignored.
		if _, err := ParseState(string(st)); err != nil || !st.Final() {
			return fmt.Errorf("%w: unique state %q: want completed, discarded or cancelled (unfinished jobs always count as duplicates)", ErrInvalid, truncate(string(st), 40))
		}
	}
	return nil
}

// finalStates returns the final states of ByState, sorted and without
// duplicates.
func (u *UniqueOpts) finalStates() []State {
	var out []State
	for _, st := range States {
		if st.Final() && slices.Contains(u.ByState, st) {
			out = append(out, st)
		}
	}
	return out
}

// deriveUniqueKey returns the unique key of a normalized p enqueued at now,
// or "" when p asks for none.
func deriveUniqueKey(p *EnqueueParams, now time.Time) string {
	u := p.Unique
	if u == nil {
		return p.UniqueKey
	}
	parts := []string{"kind=" + p.Kind}
	if u.ByQueue {
		parts = append(parts, "queue="+p.Queue)
	}
	if u.ByPeriod > 0 {
		at := now
		if p.ScheduledAt.After(now) {
			at = p.ScheduledAt
		}
		parts = append(parts, "period="+at.UTC().Truncate(u.ByPeriod).Format(time.RFC3339Nano)+"/"+u.ByPeriod.String())
	}
	if u.ByArgs {
		sum := sha256.Sum256(canonicalJSON(p.Payload))
		parts = append(parts, "args="+hex.EncodeToString(sum[:12]))
	}
	if p.UniqueKey != "" {
		parts = append(parts, "key="+p.UniqueKey)
	}
	return strings.Join(parts, ",")
}

// canonicalJSON re-encodes a JSON value with sorted object keys and no
// insignificant white space; numbers keep their text.
func canonicalJSON(b []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return b
	}
	out, err := json.Marshal(v)
	if err != nil {
		return b
	}
	return out
}

// holdsUnique reports whether j, in state st, holds its unique key.
func (j *Job) holdsUnique(st State) bool {
	return j.UniqueKey != "" && (!st.Final() || slices.Contains(j.UniqueStates, st))
}

// releaseUnique returns the write that frees j's unique key when j, now in
// its new state, no longer holds it.
func (k keys) releaseUnique(j *Job) []kv.Op {
	if j.UniqueKey == "" || j.holdsUnique(j.State) {
		return nil
	}
	return []kv.Op{kv.Delete(k.unique(j.UniqueKey))}
}

// finishedIndexValue is the value of a finished job's index entry: its
// state and, if it still holds its unique key, that key, so that retention
// can free the key without reading the record.
func finishedIndexValue(j *Job) []byte {
	if j.holdsUnique(j.State) {
		return []byte(string(j.State) + "\x00" + j.UniqueKey)
	}
	return []byte(j.State)
}

// parseIndexValue splits an index entry's value into the state and the
// unique key it holds (if any).
func parseIndexValue(v []byte) (State, string) {
	st, key, _ := strings.Cut(string(v), "\x00")
	return State(st), key
}

// releaseHeldUnique returns the write that frees the unique key a finished
// job still holds (per its index entry x), if the key is still its own.
func (c *Coordinator) releaseHeldUnique(x kv.KeyValue) []kv.Op {
	_, key := parseIndexValue(x.Value)
	if key == "" {
		return nil
	}
	uk := c.keys.unique(key)
	id := idFromIndex(x.Key)
	return []kv.Op{kv.Nested(kv.Txn{
		If:   []kv.Cmp{{Key: uk, Target: kv.Value, Op: kv.Equal, Bytes: []byte(id)}},
		Then: []kv.Op{kv.Delete(uk)},
	})}
}
