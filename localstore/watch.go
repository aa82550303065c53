package localstore

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// maxWatchEvents is how many events one watch response carries at most,
// unless one revision alone has more: a revision is never split.
const maxWatchEvents = 1024

// Watch implements kv.Store. It streams the changes to keys with prefix
// from revision fromRev on (0: from the next revision), replayed from the
// in-memory history of recent events and then live, in revision order, one
// revision never split across responses. Events are delivered only once on
// disk.
//
// The watch ends with an error wrapping kv.ErrCompacted, and
// CompactRevision set, when fromRev is older than the history holds (at
// most Options.WatchHistory events, none from before this process opened the
// store), or when its reader falls so far behind that the events it has not
// read yet leave the history: writers never wait for watchers. It ends
// without an error when ctx ends, and with kv.ErrClosed (when its buffer has
// room for it) when the store is closed.
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	out := make(chan kv.WatchResponse, s.opts.WatchBuffer)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		out <- kv.WatchResponse{Err: kv.ErrClosed} // the buffer has room: WatchBuffer >= 1
		close(out)
		return out
	}
	if fromRev <= 0 {
		fromRev = s.rev + 1
	}
	s.watchers.Add(1)
	s.mu.Unlock()
	go s.watch(ctx, out, prefix, fromRev)
	return out
}

func (s *Store) watch(ctx context.Context, out chan<- kv.WatchResponse, prefix string, next int64) {
	defer s.watchers.Done()
	defer close(out)
	send := func(resp kv.WatchResponse) bool {
		select {
		case out <- resp:
			return true
		case <-ctx.Done():
		case <-s.done:
			// Say why the watch ends, as an idle one does: a channel
			// closed without an error reads as the caller's context
			// ending. The select above picks at random when the
			// buffer has room too.
			closedErr(out)
		}
		return false
	}
	w := &idleWatch{prefix: prefix, wake: make(chan struct{}, 1)}
	for {
		synced, _, failed := s.syncState()
		if next <= synced {
			evs, n, compactRev, ok := s.hist.read(next, synced, prefix, maxWatchEvents)
			if !ok {
				send(kv.WatchResponse{
					Err:             fmt.Errorf("localstore: watch %q from revision %d: history starts after revision %d: %w", prefix, next, compactRev, kv.ErrCompacted),
					CompactRevision: compactRev,
				})
				return
			}
			next = n
			if len(evs) > 0 && !send(kv.WatchResponse{Events: evs}) {
				return
			}
			continue
		}
		if failed != nil {
			send(kv.WatchResponse{Err: failed})
			return
		}
		if !s.waitEvents(ctx, out, w, next) {
			return
		}
		s.watchWakes.Add(1)
	}
}

// waitEvents waits, for the watch w, until the synced watermark reaches
// next with an event for its prefix among the revisions marked since, or
// the store fails. It returns false when the watch is to end (ctx ended,
// or the store closes: then it says so on out).
func (s *Store) waitEvents(ctx context.Context, out chan<- kv.WatchResponse, w *idleWatch, next int64) bool {
	s.smu.Lock()
	if s.synced >= next || s.failed != nil {
		s.smu.Unlock()
		return true
	}
	// Under smu, with synced below next: every revision from next on is
	// marked later, by a markSynced that sees w.
	s.idle.add(w)
	s.smu.Unlock()
	defer func() {
		s.smu.Lock()
		s.idle.remove(w)
		s.smu.Unlock()
	}()
	select {
	case <-w.wake:
	case <-s.failCh:
	case <-ctx.Done():
		return false
	case <-s.done:
		closedErr(out)
		return false
	}
	return true
}

// idleWatch is a watch as idleWatches holds it.
type idleWatch struct {
	prefix string
	wake   chan struct{} // buffer 1
}

// idleWatches are the watches waiting for events, by prefix, under the
// store's smu.
type idleWatches struct {
	byPrefix map[string]map[*idleWatch]struct{}
	// lens counts the watches by the length of their prefix: an event's
	// key is looked up once for each length, not compared with each
	// prefix.
	lens map[int]int
}

func newIdleWatches() idleWatches {
	return idleWatches{byPrefix: map[string]map[*idleWatch]struct{}{}, lens: map[int]int{}}
}

func (iw *idleWatches) add(w *idleWatch) {
	set := iw.byPrefix[w.prefix]
	if set == nil {
		set = map[*idleWatch]struct{}{}
		iw.byPrefix[w.prefix] = set
	}
	if _, ok := set[w]; !ok {
		set[w] = struct{}{}
		iw.lens[len(w.prefix)]++
	}
}

func (iw *idleWatches) remove(w *idleWatch) {
	set := iw.byPrefix[w.prefix]
	if _, ok := set[w]; !ok {
		return
	}
	delete(set, w)
	if len(set) == 0 {
		delete(iw.byPrefix, w.prefix)
	}
	if iw.lens[len(w.prefix)]--; iw.lens[len(w.prefix)] == 0 {
		delete(iw.lens, len(w.prefix))
	}
}

// wakePrefix wakes (and forgets) the watches of prefix.
func (iw *idleWatches) wakePrefix(prefix string) {
	for w := range iw.byPrefix[prefix] {
		select {
		case w.wake <- struct{}{}:
		default:
		}
		iw.remove(w)
	}
}

// wake wakes the watches that an event of a revision after from, up to
// upto, concerns; every watch when some of those events are no longer
// held (they then learn so from the history).
func (iw *idleWatches) wake(h *history, from, upto int64) {
	if len(iw.byPrefix) == 0 {
		return
	}
	if !h.writtenBetween(from, upto, func(key string) {
		for n := range iw.lens {
			if n <= len(key) {
				iw.wakePrefix(key[:n])
			}
		}
	}) {
		for prefix := range iw.byPrefix {
			iw.wakePrefix(prefix)
		}
	}
}

// closedErr sends kv.ErrClosed on out if its buffer has room: the watch
// ends because the store closes, and Close does not wait for readers.
func closedErr(out chan<- kv.WatchResponse) {
	select {
	case out <- kv.WatchResponse{Err: kv.ErrClosed}:
	default: // the reader is behind; the closed channel will tell it
	}
}

// history is the bounded in-memory ring of the most recent events, in
// revision order, within a count and a byte budget.
type history struct {
	mu   sync.RWMutex
	buf  []kv.Event
	head int // index of the oldest event
	n    int // events held
	// bytes is the size of the events held (eventBytes), at most maxBytes
	// unless the newest revision alone is larger.
	bytes, maxBytes int
	// compact is the highest revision of which some event is no longer
	// held (or the revision at open): every event of a later revision is.
	compact int64
}

func newHistory(size, maxBytes int, rev int64) *history {
	return &history{buf: make([]kv.Event, size), maxBytes: maxBytes, compact: rev}
}

// eventBytes is what an event held costs: its key and value, and about
// what the event itself takes.
func eventBytes(e *kv.Event) int { return len(e.KV.Key) + len(e.KV.Value) + 96 }

// append adds the events of one revision. The caller holds the store's
// mutex, so revisions arrive in order.
func (h *history) append(evs []kv.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range evs {
		if h.n == len(h.buf) {
			h.evictOldest()
		}
		h.buf[(h.head+h.n)%len(h.buf)] = evs[i]
		h.n++
		h.bytes += eventBytes(&evs[i])
	}
	if len(evs) == 0 {
		return
	}
	newest := evs[len(evs)-1].KV.ModRevision
	for h.bytes > h.maxBytes && h.at(0).KV.ModRevision < newest {
		h.evictOldest()
	}
}

// evictOldest drops the oldest event held. The caller holds mu.
func (h *history) evictOldest() {
	old := &h.buf[h.head]
	if r := old.KV.ModRevision; r > h.compact {
		h.compact = r
	}
	h.bytes -= eventBytes(old)
	*old = kv.Event{} // its value is garbage now
	h.head = (h.head + 1) % len(h.buf)
	h.n--
}

func (h *history) at(i int) *kv.Event { return &h.buf[(h.head+i)%len(h.buf)] }

// last returns the revision of the newest event held, or the revision at
// open when there is none.
func (h *history) last() int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.n == 0 {
		return h.compact
	}
	return h.at(h.n - 1).KV.ModRevision
}

// writtenSince calls visit with the key of every event of a revision after
// rev. It returns false, visiting nothing, when some of those events are no
// longer held.
func (h *history) writtenSince(rev int64, visit func(key string)) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if rev < h.compact {
		return false
	}
	for i := sort.Search(h.n, func(i int) bool { return h.at(i).KV.ModRevision > rev }); i < h.n; i++ {
		visit(h.at(i).KV.Key)
	}
	return true
}

// writtenBetween calls visit with the key of every event of a revision
// after from, up to upto. It returns false, visiting nothing, when some of
// those events are no longer held.
func (h *history) writtenBetween(from, upto int64, visit func(key string)) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if from < h.compact {
		return false
	}
	for i := sort.Search(h.n, func(i int) bool { return h.at(i).KV.ModRevision > from }); i < h.n && h.at(i).KV.ModRevision <= upto; i++ {
		visit(h.at(i).KV.Key)
	}
	return true
}

// read returns copies of the events for keys with prefix, of revisions from
// from to upto, and the revision to read from next. It stops early, between
// two revisions, once it has max events. ok is false when events of
// revision from are no longer held; compact then says up to which revision
// history is lost.
func (h *history) read(from, upto int64, prefix string, max int) (evs []kv.Event, next, compact int64, ok bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if from <= h.compact {
		return nil, from, h.compact, false
	}
	next = upto + 1
	last := int64(0) // revision of the last event taken
	for i := sort.Search(h.n, func(i int) bool { return h.at(i).KV.ModRevision >= from }); i < h.n; i++ {
		e := h.at(i)
		r := e.KV.ModRevision
		if r > upto {
			break
		}
		if len(evs) >= max && r != last {
			next = r
			break
		}
		if strings.HasPrefix(e.KV.Key, prefix) {
			c := *e
			c.KV.Value = bytes.Clone(e.KV.Value) // each reader owns its events
			evs = append(evs, c)
			last = r
		}
	}
	return evs, next, h.compact, true
}
