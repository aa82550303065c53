package coordinator

import (
	"fmt"
	"github.com/leasehold/leasehold/coordinator/kv"
	"strings"
	"time"
)

// keys builds the key layout under one namespace. See the package doc.
type keys struct {
	root string // "/leasehold/NS/"
}

func newKeys(namespace string) keys { return keys{root: "/leasehold/" + namespace + "/"} }

// tsKey encodes t as a fixed-width, sortable decimal of Unix nanoseconds.
func tsKey(t time.Time) string { return fmt.Sprintf("%020d", t.UnixNano()) }

func (k keys) job(id string) string     { return k.root + "j/" + id }
func (k keys) jobs() string             { return k.root + "j/" }
func (k keys) owner(id string) string   { return k.root + "o/" + id }
func (k keys) owners() string           { return k.root + "o/" }
func (k keys) running(id string) string { return k.root + "r/" + id }
func (k keys) runningAll() string       { return k.root + "r/" }
func (k keys) cancel(id string) string  { return k.root + "c/" + id }
func (k keys) cancels() string          { return k.root + "c/" }
func (k keys) unique(key string) string { return k.root + "u/" + key }
func (k keys) worker(id string) string  { return k.root + "w/" + id }
func (k keys) workers() string          { return k.root + "w/" }
func (k keys) timers() string           { return k.root + "t/" }
func (k keys) finished() string         { return k.root + "f/" }
func (k keys) available() string        { return k.root + "q/" }
func (k keys) queue(q string) string    { return k.root + "q/" + q + "/" }

// index returns the one index key of j in its current state.
func (k keys) index(j *Job) string {
	switch j.State {
	case StateAvailable:
		return fmt.Sprintf("%sq/%s/%d/%s/%s", k.root, j.Queue, j.Priority, tsKey(j.ScheduledAt), j.ID)
	case StateScheduled, StateRetryable:
		return k.root + "t/" + tsKey(j.ScheduledAt) + "/" + j.ID
	case StateRunning:
		return k.running(j.ID)
	default: // final
		return k.root + "f/" + tsKey(*j.FinalizedAt) + "/" + j.ID
	}
}

// put returns the writes that store j: its record, and its index key. An
// available job's index entry carries a copy of the record, so that a claim
// reads candidates and their records in one range read and compares on the
// entry itself; other index entries hold the state name, so that counting
// by state needs no record reads. The record is encoded once.
func (k keys) put(j *Job) (rec []byte, ops []kv.Op) {
	rec = encodeJob(j)
	idx := []byte(j.State)
	if j.State == StateAvailable {
		idx = rec
	}
	return rec, []kv.Op{kv.Put(k.job(j.ID), rec, 0), kv.Put(k.index(j), idx, 0)}
}

// idFromIndex returns the job id at the end of an index key.
func idFromIndex(key string) string { return key[strings.LastIndexByte(key, '/')+1:] }
