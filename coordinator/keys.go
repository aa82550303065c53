package coordinator

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// keys builds the key layout under one namespace. See the package doc.
type keys struct {
	root string // "/leasehold/NS/"
}

func newKeys(namespace string) keys { return keys{root: "/leasehold/" + namespace + "/"} }

// tsKey encodes t as a fixed-width, sortable decimal of Unix nanoseconds.
func tsKey(t time.Time) string { return nanosKey(t.UnixNano()) }

// nanosKey is tsKey of a time given in Unix nanoseconds.
func nanosKey(ns int64) string { return fmt.Sprintf("%020d", ns) }

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

// clusterVersion is the key whose presence says that the namespace runs at
// cluster version v; registrations is written by every registration
// (docs/adr/0028).
func (k keys) clusterVersion(v int) string { return k.root + "cv/" + strconv.Itoa(v) }
func (k keys) clusterVersions() string     { return k.root + "cv/" }
func (k keys) registrations() string       { return k.root + "cv-registered" }

// Queue management (pause, global limits) lives under one prefix so that
// one watch covers it: qm/c/QUEUE is a queue's configuration, and
// qm/s/QUEUE/N is slot N of its global concurrency limit, held by a run
// under its daemon's lease. p/NAME is the state of a periodic schedule.
func (k keys) queueMgmt() string           { return k.root + "qm/" }
func (k keys) queueConf(q string) string   { return k.root + "qm/c/" + q }
func (k keys) queueConfs() string          { return k.root + "qm/c/" }
func (k keys) slots(q string) string       { return k.root + "qm/s/" + q + "/" }
func (k keys) slot(q string, n int) string { return fmt.Sprintf("%sqm/s/%s/%d", k.root, q, n) }
func (k keys) periodic(name string) string { return k.root + "p/" + name }
func (k keys) periodics() string           { return k.root + "p/" }

// qm/g/QUEUE is written by every claim of a slot while slots at or above
// the queue's limit are held (docs/adr/0044).
func (k keys) slotsGen(q string) string { return k.root + "qm/g/" + q }

// availableAt is the available-index key of queue at priority prio and
// scheduled time ts (Unix nanoseconds), before any job id: the start of
// the entries at that time.
func (k keys) availableAt(queue string, prio int, ts int64) string {
	return k.queue(queue) + strconv.Itoa(prio) + "/" + nanosKey(ts)
}

// parseAvailable reads the priority and scheduled time from key, an
// available-index key of queue (or one cut after its time); ok is false
// for any other key.
func (k keys) parseAvailable(queue, key string) (prio int, ts int64, ok bool) {
	rest, found := strings.CutPrefix(key, k.queue(queue))
	if !found || len(rest) < 22 || rest[0] < '1' || rest[0] > '9' || rest[1] != '/' {
		return 0, 0, false
	}
	ts, err := strconv.ParseInt(rest[2:22], 10, 64)
	if err != nil || ts < 0 {
		return 0, 0, false
	}
	return int(rest[0] - '0'), ts, true
}

// index returns the one index key of j in its current state.
func (k keys) index(j *Job) string {
	switch j.State {
	case StateAvailable:
		return k.availableAt(j.Queue, j.Priority, j.ScheduledAt.UnixNano()) + "/" + j.ID
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
	switch {
	case j.State == StateAvailable:
		idx = rec
	case j.State == StateRunning:
		idx = runningValue(j.Owner, j.Queue)
	case j.State.Final():
		idx = finishedIndexValue(j)
	}
	return rec, []kv.Op{kv.Put(k.job(j.ID), rec, 0), kv.Put(k.index(j), idx, 0)}
}

// idFromIndex returns the job id at the end of an index key.
func idFromIndex(key string) string { return key[strings.LastIndexByte(key, '/')+1:] }
