package coordinator

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// floors remember, per queue, a key before which the available index holds
// nothing but deleted entries, so that a claim can seek past them instead
// of scanning the tombstones every claimed job leaves behind (in Pebble
// until compaction, in etcd's index until compaction). A floor is used only
// while the watch of a WatchAvailable of that queue is up in this process:
// the watch lowers it whenever a job becomes available before it (a higher
// priority, an older time), and resets it when the watch restarts; a claim
// lowers it to the candidates it did not get. While no such watch is up (it
// ended, and its loop reads again or pauses before watching again), nothing
// lowers the floor, and claims read from the queue's start. Each queue's
// record also serialises the reads of its claims and holds the keys (and
// global-limit slots) that claims in flight try, watched or not.
type floors struct {
	mu sync.Mutex
	m  map[string]*floor
}

// of returns queue's floor, creating it. The caller holds mu.
func (f *floors) of(queue string) *floor {
	if f.m == nil {
		f.m = map[string]*floor{}
	}
	fl := f.m[queue]
	if fl == nil {
		fl = &floor{tail: -1, reads: make(chan struct{}, 1), pending: map[string]bool{}, released: map[string]bool{}, slots: map[string]bool{}, releasedSlots: map[string]bool{}}
		f.m[queue] = fl
	}
	return fl
}

// hold marks keys, and the global-limit slots, as tried by a claim in
// flight, until release.
func (f *floors) hold(queue string, keys map[string]bool, slots []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.of(queue)
	for k := range keys {
		fl.pending[k] = true
	}
	for _, s := range slots {
		fl.slots[s] = true
	}
}

// release ends a claim's hold on keys. In the same step it lowers the
// floor to back, a key the claim did not get (none if ""), or with reset
// puts it back to the queue's start (the claim failed: any key may be
// back). Not before: a claim that read while the keys were held skipped
// them, and one that started between a lowering and the release would
// skip them again and move the floor past them for good.
//
// The claim that holds the queue's read lock may have read before this
// claim committed: its answer may still hold these slots (since it took
// the lock) and keys (since it took its start from the floor), taken or
// refused meanwhile. It skips them too (see dropPending, freeSlots); a key
// this claim did not get is under the floor, lowered (or reset) after the
// reader's start, so that the reader cannot move the floor past it; a slot
// it did not get is free for the next claim. A release before the reader
// took its start is not recorded: the reader's read comes after it, and
// sees the keys as they are.
func (f *floors) release(queue string, keys map[string]bool, slots []string, back string, reset bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.of(queue)
	for k := range keys {
		delete(fl.pending, k)
		if fl.readingKeys {
			fl.released[k] = true
		}
	}
	for _, s := range slots {
		delete(fl.slots, s)
		if fl.reading {
			fl.releasedSlots[s] = true
		}
	}
	if len(slots) > 0 && fl.slotsBack != nil {
		close(fl.slotsBack)
		fl.slotsBack = nil
	}
	switch {
	case reset:
		fl.reset()
	case back != "":
		fl.lower(back, 0)
	}
}

// pendingFrom returns how many keys of queue at or after from claims in
// flight try, or tried since the caller took its start (see start): those
// a read from there may find and dropPending drop. Claims move the floor
// past the keys they try before they commit, so a read from the floor
// usually finds none of them.
func (f *floors) pendingFrom(queue, from string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.of(queue)
	n := 0
	for _, keys := range []map[string]bool{fl.pending, fl.released} {
		for k := range keys {
			if k >= from {
				n++
			}
		}
	}
	return n
}

// dropPending returns xs without the entries claims in flight try, or
// tried since the caller took its start (a new slice when it drops any).
// The caller holds the read lock.
func (f *floors) dropPending(queue string, xs []kv.KeyValue) []kv.KeyValue {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.of(queue)
	if len(fl.pending) == 0 && len(fl.released) == 0 {
		return xs
	}
	out := make([]kv.KeyValue, 0, len(xs))
	for _, x := range xs {
		if !fl.pending[x.Key] && !fl.released[x.Key] {
			out = append(out, x)
		}
	}
	return out
}

// slotsTried returns how many global-limit slots of queue claims in flight
// try, or tried since the caller took the read lock.
func (f *floors) slotsTried(queue string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.of(queue)
	return len(fl.slots) + len(fl.releasedSlots)
}

// freeSlots returns up to n of free (slots of queue's global limit that
// the store held free when the caller, which holds the read lock, read
// them) that no claim in flight tries, nor tried since that read may have
// begun: a claim that tried them too would see each of its jobs refused,
// as if other daemons contended for them. When claims in flight try every
// one of them, it returns none and a channel closed when one of those
// claims ends: a slot it did not get is free again, and no watch event
// says so. When claims that ended meanwhile tried the rest, the channel is
// closed already: read the slots again.
func (f *floors) freeSlots(queue string, free []string, n int) ([]string, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.of(queue)
	out := free
	inFlight := false
	if len(fl.slots) > 0 || len(fl.releasedSlots) > 0 {
		out = make([]string, 0, len(free))
		for _, s := range free {
			switch {
			case fl.slots[s]:
				inFlight = true
			case !fl.releasedSlots[s]:
				out = append(out, s)
			}
		}
	}
	if len(out) == 0 && len(free) > 0 {
		if !inFlight {
			return nil, claimAgain
		}
		if fl.slotsBack == nil {
			fl.slotsBack = make(chan struct{})
		}
		return nil, fl.slotsBack
	}
	return out[:min(n, len(out))], nil
}

// read records the entries a claim of queue read (see fitting).
func (f *floors) read(queue string, xs []kv.KeyValue) {
	if len(xs) == 0 {
		return
	}
	total := 0
	for _, x := range xs {
		total += len(x.Value)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.of(queue).entryBytes = total / len(xs)
}

// fitting returns how many entries of queue fit in budget bytes, by the
// mean size of those the last claim read (at least one; MaxInt before any
// read): claims of large jobs read fewer, where a claim that will take
// only as many as fit would read the rest for nothing.
func (f *floors) fitting(queue string, budget int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.of(queue).entryBytes; b > 0 {
		return max(1, budget/b)
	}
	return math.MaxInt
}

// lockReads takes queue's read lock, or fails when ctx ends first, and
// returns its release, which may be called more than once. Until then,
// the global-limit slots that claims in flight release are remembered for
// the holder, and from its start the keys (see release).
func (f *floors) lockReads(ctx context.Context, queue string) (unlock func(), err error) {
	f.mu.Lock()
	fl := f.of(queue)
	f.mu.Unlock()
	select {
	case fl.reads <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	f.mu.Lock()
	fl.reading = true
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			fl.reading, fl.readingKeys = false, false
			clear(fl.released)
			clear(fl.releasedSlots)
			f.mu.Unlock()
			<-fl.reads
		})
	}, nil
}

type floor struct {
	reads   chan struct{}   // one claim of the queue reads at a time
	reading bool            // a claim holds reads
	pending map[string]bool // index keys that claims in flight try
	// released are keys of pending released since the claim that holds
	// reads took its start (readingKeys).
	released    map[string]bool
	readingKeys bool
	lastFull    time.Time // last claim that read from the queue's start on purpose
	key         string    // claim reads from here; "" is the queue's start
	horizon     string    // the last key an earlier read saw: reads up to it count few keys
	epoch       uint64    // bumped by every lowering and reset
	lows        []low     // the latest lowerings and resets, oldest first
	// lowRev is the highest store revision at which the watch saw a job
	// become available. A claim's read older than that may miss the job
	// although the floor was lowered to it before the claim began (etcd
	// tells watchers of a write just before reads can see it).
	lowRev int64
	// live is how many watches of the queue are up (see restart, ended).
	live int
	// tail is how many entries the last claim that moved the floor found
	// from the key it moved it to (its next candidate) to the queue's end
	// (-1: unknown, or its read stopped before the end); tailEpoch is the
	// epoch that claim began in. See floorStart.tail.
	tail      int
	tailEpoch uint64
	// slots are the global-limit slots that claims in flight try, and
	// releasedSlots those of slots released since reading began;
	// slotsBack, when not nil, is closed by the next release of slots: a
	// claim that found every free slot tried by claims in flight waits
	// for it.
	slots         map[string]bool
	releasedSlots map[string]bool
	slotsBack     chan struct{}
	// entryBytes is the mean size of the values of the entries the last
	// claim's read returned (0: none read yet). See fitting.
	entryBytes int
}

// low is one lowering of a floor: a job that became available at key, or
// a reset (key ""), which began epoch.
type low struct {
	epoch uint64
	key   string
}

// maxLows bounds the lowerings a floor remembers. A claim that started
// before the oldest of them does not raise the floor.
const maxLows = 256

// lowered records a lowering (or, with key "", a reset) in a new epoch.
func (fl *floor) lowered(key string) {
	fl.epoch++
	if len(fl.lows) == maxLows {
		fl.lows = append(fl.lows[:0], fl.lows[maxLows/2:]...)
	}
	fl.lows = append(fl.lows, low{epoch: fl.epoch, key: key})
}

// lowestSince returns the lowest key lowered to after epoch (ok is false
// if the floor no longer remembers every lowering since), and whether
// there was any.
func (fl *floor) lowestSince(epoch uint64) (key string, found, ok bool) {
	if epoch == fl.epoch {
		return "", false, true
	}
	if len(fl.lows) == 0 || fl.lows[0].epoch > epoch+1 {
		return "", false, false
	}
	for _, l := range fl.lows {
		if l.epoch > epoch && (!found || l.key < key) {
			key, found = l.key, true
		}
	}
	return key, found, true
}

// floorStart is where a claim of a queue starts: the floor's key, its
// horizon ("" if none), the epoch to hand back to advance, and the lowest
// revision the claim's read must be at to see every job that lowered the
// floor so far (lowRev).
type floorStart struct {
	key, horizon string
	epoch        uint64
	lowRev       int64
	// tail estimates the entries from the floor to the queue's end:
	// those the last claim that moved the floor found there, plus one for
	// each lowering since (-1: unknown). One lowering may stand for
	// several candidates a claim did not get, so it is no bound; but it
	// is 0 only when every entry that claim found to the end was tried
	// and nothing was lowered or reset since: the claim has nothing to
	// read.
	tail int
}

// start returns where a claim of queue should read from; tracked is false
// when no watch keeps the queue's floor. The caller holds the read lock:
// from now until it lets go, the keys claims in flight release are
// remembered for it (see release).
func (f *floors) start(queue string) (st floorStart, tracked bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.of(queue)
	fl.readingKeys = true
	if fl.live == 0 {
		return floorStart{tail: -1}, false
	}
	st = floorStart{key: fl.key, horizon: fl.horizon, epoch: fl.epoch, lowRev: fl.lowRev, tail: -1}
	if fl.tail >= 0 {
		st.tail = fl.tail + int(min(fl.epoch-fl.tailEpoch, 1<<20))
	}
	return st, true
}

// advance raises the floor to key after a claim that read from the floor
// at epoch, but never past a job that became available since (a lowering
// after epoch), and records horizon, the last key that claim's read saw
// ("": keep the one there is), and tail, how many entries it found from
// key to the queue's end (-1: its read stopped before the end).
func (f *floors) advance(queue, key, horizon string, epoch uint64, tail int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.m[queue]
	if fl == nil || fl.live == 0 {
		return
	}
	lowest, found, ok := fl.lowestSince(epoch)
	if !ok {
		return
	}
	if found {
		key = min(key, lowest)
	}
	fl.key = max(fl.key, key)
	fl.horizon = max(fl.horizon, horizon)
	if !found || lowest != "" {
		// Each lowering since epoch (start) adds one to the tail; a
		// reset since (lowest "") voided what the claim read.
		fl.tail, fl.tailEpoch = tail, epoch
	}
}

// lower makes sure the floor is at or before key, where a job may be
// available: one that just became available at revision rev, or (rev 0) a
// candidate a claim did not get. It also voids every claim in flight: one
// that read before this job landed must not raise the floor past it.
func (f *floors) lower(queue, key string, rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.m[queue]; fl != nil {
		fl.lower(key, rev)
	}
}

func (fl *floor) lower(key string, rev int64) {
	fl.key = min(fl.key, key)
	fl.lowered(key)
	fl.lowRev = max(fl.lowRev, rev)
}

// restart puts the floor back to the queue's start when a watch of the
// queue is up again after a read at revision rev: jobs may have become
// available up to rev without a watch event, so only a read at rev or
// later moves the floor. Each restart is followed by one ended, when that
// watch ends.
func (f *floors) restart(queue string, rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.of(queue)
	fl.live++
	fl.reset()
	fl.lowRev = max(fl.lowRev, rev)
}

// ended records that a watch of queue that restart reported is down.
func (f *floors) ended(queue string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.m[queue]; fl != nil {
		fl.live--
	}
}

// reset puts the floor back to the queue's start.
func (f *floors) reset(queue string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.m[queue]; fl != nil {
		fl.reset()
	}
}

func (fl *floor) reset() {
	fl.key, fl.horizon, fl.tail = "", "", -1
	fl.lowered("")
}

// watch is called as a WatchAvailable of queue begins (at now), before its
// first read: the next claim reads from the start anyway.
func (f *floors) watch(queue string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.of(queue).lastFull = now
}

// fullReadEvery bounds how often a claim reads its queue from the start, as
// a safety net: the floor is lowered wherever a job may be, so such a read
// should find nothing new. Promotion passes read the timer index from its
// start as often (RunMaintenance).
const fullReadEvery = time.Minute

// fullReadDue reports whether a read from the start is due at now, the
// last one having been at last: fullReadEvery later, or at once when the
// clock stepped back before last. An injected clock need not carry a
// monotonic reading: after it steps back an hour, waiting for now to pass
// last+fullReadEvery would leave the net off for an hour (ADR 0039).
func fullReadDue(now, last time.Time) bool {
	d := now.Sub(last)
	return d < 0 || d >= fullReadEvery
}

// dueFullRead reports whether a claim that read from the floor should read
// the queue from its start instead (at most once per fullReadEvery since
// the last such read, or since the watch started, or at once when the
// clock stepped back before that: see fullReadDue), and records that it
// does.
func (f *floors) dueFullRead(queue string, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.m[queue]
	if fl == nil || !fullReadDue(now, fl.lastFull) {
		return false
	}
	fl.lastFull = now
	return true
}
