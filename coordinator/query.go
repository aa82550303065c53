package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// Get reads one job, with its pending cancel request if any.
func (c *Coordinator) Get(ctx context.Context, id string) (*Job, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	res, err := c.store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Get(c.keys.job(id)), kv.Get(c.keys.cancel(id))}})
	if err != nil {
		return nil, fmt.Errorf("coordinator: get job %s: %w", id, err)
	}
	rec := res.Results[0].KV
	if rec == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	j, err := decodeKV(rec)
	if err != nil {
		return nil, err
	}
	j.CancelRequested = res.Results[1].KV != nil && j.State == StateRunning
	return j, nil
}

// ListParams filter and page a listing.
type ListParams struct {
	// State, Kind and Queue filter when set.
	State State
	Kind  string
	Queue string
	// Limit bounds the page; 0 means 100. At most 10000. A page also ends
	// after about 16 MiB of records, with Next set: large jobs come in
	// smaller pages. A filtered page ends, with Next set, after looking at
	// 10000 jobs (or 64 MiB of them): it may hold fewer than Limit jobs,
	// even none, with more to come.
	Limit int
	// After is the Next cursor of the previous page (of a listing with
	// the same State and Queue); anything else is ErrInvalid.
	After string
}

// ListPage is one page of a listing.
type ListPage struct {
	Jobs []*Job `json:"jobs"`
	// Next is the cursor of the following page; empty on the last one.
	Next string `json:"next,omitempty"`
}

// MaxListLimit bounds ListParams.Limit.
const MaxListLimit = 10000

// A page of List also ends once it holds about listPageBytes of records
// (with Next set), so that a page of large jobs stays small in memory: it
// reads one record, then at most listChunk at a time, fewer when they are
// large.
var listPageBytes = 16 << 20

const listChunk = 1000

// A List call looks at no more than listScanMax index entries or records,
// and reads no more than about listScanBytes of records: a filter that
// few jobs match ends its page short, even empty, with Next set, rather
// than reading the whole store in one request.
var (
	listScanMax   = ListScanMax
	listScanBytes = 64 << 20
)

// ListScanMax is the number of jobs a filtered List call looks through at
// most.
const ListScanMax = 10 * listChunk

// listLimit is a page's limit as List and QueuePage take it: 0 means 100,
// and more than MaxListLimit or less than 0 is refused.
func listLimit(n int) (int, error) {
	if n == 0 {
		return 100, nil
	}
	if n < 0 || n > MaxListLimit {
		return 0, fmt.Errorf("%w: limit %d: want 1 to %d", ErrInvalid, n, MaxListLimit)
	}
	return n, nil
}

// List returns jobs matching p. Without a state filter jobs come in id order
// (which is creation order); with one, in the order of that state's index
// (queue and priority for available jobs, due time for scheduled and
// retryable ones, finishing time for final ones).
func (c *Coordinator) List(ctx context.Context, p ListParams) (ListPage, error) {
	var err error
	if p.Limit, err = listLimit(p.Limit); err != nil {
		return ListPage{}, err
	}
	if p.State != "" {
		if _, err := ParseState(string(p.State)); err != nil {
			return ListPage{}, err
		}
	}
	if p.Queue != "" {
		if err := ValidateQueue(p.Queue); err != nil {
			return ListPage{}, err
		}
	}
	if p.Kind != "" {
		// A name no job can have would list nothing, silently: the API
		// refuses it, and a client straight on the store must too.
		if err := ValidateKind(p.Kind); err != nil {
			return ListPage{}, err
		}
	}
	prefix, byIndex := c.keys.jobs(), false
	switch p.State {
	case StateAvailable:
		prefix, byIndex = c.keys.available(), true
		if p.Queue != "" {
			prefix = c.keys.queue(p.Queue)
		}
	case StateScheduled, StateRetryable:
		prefix, byIndex = c.keys.timers(), true
	case StateRunning:
		prefix, byIndex = c.keys.runningAll(), true
	case StateCompleted, StateDiscarded, StateCancelled:
		prefix, byIndex = c.keys.finished(), true
	}
	start := prefix
	if p.After != "" {
		if !validCursor(p.State, p.Queue != "", p.After) {
			return ListPage{}, fmt.Errorf("%w: bad cursor %q: pass the next value of the previous page, with the same state and queue filters", ErrInvalid, truncate(p.After, 80))
		}
		start = prefix + p.After + "\x00"
	}
	var page ListPage
	end := kv.PrefixEnd(prefix)
	// Filters the store cannot apply are applied after reading: the kind,
	// and the queue except on one queue's index. The state of a timer or
	// finished entry is in the entry's value, so entries of other states
	// are skipped before their records are read.
	filtered := p.Kind != "" || (p.Queue != "" && p.State != StateAvailable)
	stateInIndex := prefix == c.keys.timers() || prefix == c.keys.finished()
	size := 0             // bytes of the records on the page
	scanned, read := 0, 0 // bytes of records, and records, read so far
	examined := 0         // index entries or records looked at
	for len(page.Jobs) < p.Limit {
		if size >= listPageBytes || examined >= listScanMax || scanned >= listScanBytes {
			break // page.Next is the key after the last one examined
		}
		// One record first, then as many records as large as those read
		// so far fit in what is left. A filtered listing reads them in
		// chunks whatever the page still lacks: most may be skipped, and
		// reading only what it lacks made a round trip per skipped job.
		want := 1
		if read > 0 {
			want = min(listChunk, max(1, (listPageBytes-size)/max(1, scanned/read)))
			if !filtered {
				want = min(want, p.Limit-len(page.Jobs))
			}
		}
		rangeWant := want
		if stateInIndex {
			rangeWant = listChunk // small entries, records read only for matches
		}
		rangeWant = min(rangeWant, listScanMax-examined)
		rr, err := c.store.Range(ctx, kv.RangeRequest{Start: start, End: end, Limit: rangeWant, KeysOnly: byIndex && !stateInIndex})
		if err != nil {
			return ListPage{}, fmt.Errorf("coordinator: list jobs: %w", err)
		}
		if len(rr.KVs) == 0 {
			page.Next = ""
			break
		}
		last, more := rr.KVs[len(rr.KVs)-1].Key, rr.More
		entries := rr.KVs
		if stateInIndex {
			entries = nil
			for i, x := range rr.KVs {
				examined++
				if st, _ := parseIndexValue(x.Value); st != p.State {
					continue
				}
				entries = append(entries, x)
				if len(entries) == want && i < len(rr.KVs)-1 {
					// The entries after this one are read again
					// with the next records.
					last, more = x.Key, true
					break
				}
			}
		} else {
			examined += len(rr.KVs)
		}
		recs := entries
		at := make([]string, len(entries)) // the key read for each of recs
		for i, x := range entries {
			at[i] = x.Key
		}
		if byIndex && len(entries) > 0 {
			jkeys := make([]string, len(entries))
			for i, x := range entries {
				jkeys[i] = c.keys.job(idFromIndex(x.Key))
			}
			got, err := c.getMany(ctx, jkeys)
			if err != nil {
				return ListPage{}, fmt.Errorf("coordinator: list jobs: %w", err)
			}
			recs, at = recs[:0:0], at[:0]
			for i, g := range got {
				if g != nil { // finished and purged between the reads
					recs = append(recs, *g)
					at = append(at, entries[i].Key)
				}
			}
		}
		for i := range recs {
			scanned += len(recs[i].Value)
			read++
			j, err := decodeKV(&recs[i])
			if err != nil {
				c.log.Error("skipping corrupt job record in listing", slog.Any("err", err))
				continue
			}
			if (p.State != "" && j.State != p.State) || (p.Kind != "" && j.Kind != p.Kind) || (p.Queue != "" && j.Queue != p.Queue) {
				continue
			}
			size += len(recs[i].Value)
			page.Jobs = append(page.Jobs, j)
			if (size >= listPageBytes || len(page.Jobs) == p.Limit) && i < len(recs)-1 {
				// The page is full: the records read after this
				// one (a filtered chunk, or sized by those before,
				// which may have been much smaller) come on the
				// next page.
				last, more = at[i], true
				break
			}
		}
		page.Next = strings.TrimPrefix(last, prefix)
		start = last + "\x00"
		if !more {
			page.Next = ""
			break
		}
	}
	if page.Jobs == nil {
		page.Jobs = []*Job{}
	}
	return page, nil
}

// validCursor reports whether after has the shape of a Next cursor of a
// listing by state st (queue set when byQueue): the rest of an index key
// after the listing's prefix. That is a job id, preceded by the time for
// timer and finished entries, and by the priority and time (and the queue,
// across queues) for available ones. Whether the job still exists does
// not matter.
func validCursor(st State, byQueue bool, after string) bool {
	parts := strings.Split(after, "/")
	n := 1 // id
	switch st {
	case StateAvailable:
		n = 3 // prio/time/id
		if !byQueue {
			n = 4 // queue/prio/time/id
		}
	case StateScheduled, StateRetryable, StateCompleted, StateDiscarded, StateCancelled:
		n = 2 // time/id
	}
	if len(parts) != n || ValidateID(parts[n-1]) != nil {
		return false
	}
	if n >= 2 {
		ts := parts[n-2]
		if _, err := strconv.ParseInt(ts, 10, 64); err != nil || len(ts) != len(nanosKey(0)) {
			return false
		}
	}
	if n >= 3 {
		if prio := parts[n-3]; len(prio) != 1 || prio[0] < '1' || prio[0] > '9' {
			return false
		}
	}
	return n < 4 || ValidateQueue(parts[0]) == nil
}

// Counts returns the number of jobs in each state, read from the state
// indexes (no record reads).
//
// The indexes are read one after the other, not at one revision, so a job
// that moves meanwhile from an index not read yet to one already read (a
// failed attempt, running to retryable) is counted nowhere. Counts that
// are off by a moving job or two are fine for a gauge, but not when they
// say that nothing is pending while something is (jobs wait --all stops
// there): such a count is confirmed by reading the unfinished indexes
// (then small) again until one read saw no write between its first and
// last page.
func (c *Coordinator) Counts(ctx context.Context) (map[State]int, error) {
	out := newCounts()
	first, last, err := c.countInto(ctx, out, append(c.unfinishedIndexes(), c.keys.finished()))
	if err != nil {
		return nil, err
	}
	if err := c.confirmPending(ctx, out, first, last); err != nil {
		return nil, err
	}
	return out, nil
}

// newCounts returns counts of 0 in every state.
func newCounts() map[State]int {
	out := make(map[State]int, len(States))
	for _, st := range States {
		out[st] = 0
	}
	return out
}

// unfinishedIndexes are the prefixes of the unfinished states' indexes.
func (c *Coordinator) unfinishedIndexes() []string {
	return []string{c.keys.available(), c.keys.timers(), c.keys.runningAll()}
}

// confirmPending confirms counts out, read between store revisions first
// and last, that say that no job is pending: it reads the unfinished
// indexes again until one read saw no write between its first and last
// page (see Counts).
func (c *Coordinator) confirmPending(ctx context.Context, out map[State]int, first, last int64) error {
	var err error
	for range 8 {
		if first == last || pending(out) {
			break
		}
		again := map[State]int{}
		if first, last, err = c.countInto(ctx, again, c.unfinishedIndexes()); err != nil {
			return err
		}
		for _, st := range []State{StateScheduled, StateAvailable, StateRunning, StateRetryable} {
			out[st] = again[st]
		}
	}
	return nil
}

// countInto adds the jobs of the index prefixes to out and returns the
// store revisions its first and last reads saw.
func (c *Coordinator) countInto(ctx context.Context, out map[State]int, prefixes []string) (first, last int64, err error) {
	for i, prefix := range prefixes {
		byValue := prefix == c.keys.timers() || prefix == c.keys.finished()
		f, l, err := c.scanRevs(ctx, prefix, !byValue, func(x kv.KeyValue) error {
			switch prefix {
			case c.keys.runningAll():
				out[StateRunning]++
			case c.keys.available():
				out[StateAvailable]++
			default:
				st, _ := parseIndexValue(x.Value)
				out[st]++
			}
			return nil
		})
		if err != nil {
			return 0, 0, fmt.Errorf("coordinator: count jobs: %w", err)
		}
		if i == 0 {
			first = f
		}
		last = l
	}
	return first, last, nil
}

// scan visits every key with prefix in pages.
func (c *Coordinator) scan(ctx context.Context, prefix string, keysOnly bool, visit func(kv.KeyValue) error) error {
	_, _, err := c.scanRevs(ctx, prefix, keysOnly, visit)
	return err
}

// scanRevs is scan, returning the store revisions its first and last
// pages were read at. Past its first page, a store that can scans the rest
// in one pass (kv.Scanner); the last revision is then the scan's.
func (c *Coordinator) scanRevs(ctx context.Context, prefix string, keysOnly bool, visit func(kv.KeyValue) error) (first, last int64, err error) {
	start, end := prefix, kv.PrefixEnd(prefix)
	for page := 0; ; page++ {
		if sc, ok := c.store.(kv.Scanner); ok && page == 1 {
			// More than a page: on etcd every further page would cost
			// a walk of the index to the prefix's end (a million
			// finished jobs took a minute to count in pages, against
			// 1.5 s with the rest in one pass). Small prefixes stay one
			// Range: with etcd auth, every stream clientv3 opens
			// authenticates again.
			rev, err := sc.Scan(ctx, kv.RangeRequest{Start: start, End: end, KeysOnly: keysOnly}, visit)
			switch {
			case err == nil:
				return first, rev, nil
			case !errors.Is(err, kv.ErrScanUnsupported):
				return 0, 0, err
			}
		}
		rr, err := c.store.Range(ctx, kv.RangeRequest{Start: start, End: end, Limit: 1000, KeysOnly: keysOnly})
		if err != nil {
			return 0, 0, err
		}
		if page == 0 {
			first = rr.Revision
		}
		last = rr.Revision
		for _, x := range rr.KVs {
			if err := visit(x); err != nil {
				return 0, 0, err
			}
		}
		if !rr.More || len(rr.KVs) == 0 {
			return first, last, nil
		}
		start = rr.KVs[len(rr.KVs)-1].Key + "\x00"
	}
}

// Cancel cancels a job. An available, scheduled or retryable job is
// cancelled at once. For a running job a cancel request is written under its
// own key, where the owner's writes cannot overwrite it; the owner's daemon
// cancels the handler's context and records the job cancelled. Cancelling a
// finished job is ErrWrongState. The returned job is the state after the call.
func (c *Coordinator) Cancel(ctx context.Context, id string) (*Job, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	for range 16 {
		res, err := c.store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Get(c.keys.job(id))}})
		if err != nil {
			return nil, fmt.Errorf("coordinator: cancel job %s: %w", id, err)
		}
		rec := res.Results[0].KV
		if rec == nil {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		j, err := decodeKV(rec)
		if err != nil {
			return nil, err
		}
		guard := []kv.Cmp{kv.ModRevisionIs(rec.Key, kv.Equal, rec.ModRevision)}
		switch {
		case j.State.Final():
			return j, fmt.Errorf("%w: job %s is already %s: only unfinished jobs can be cancelled", ErrWrongState, id, j.State)
		case j.State == StateRunning:
			res, err := c.store.Txn(ctx, c.cancelRequest(j, c.clock.Now().UTC()))
			if err != nil {
				return nil, fmt.Errorf("coordinator: request cancel of job %s: %w", id, err)
			}
			if res.Succeeded {
				j.CancelRequested = true
				return j, nil
			}
		default:
			old := c.keys.index(j)
			now := c.clock.Now().UTC()
			j.State, j.FinalizedAt = StateCancelled, &now
			_, puts := c.keys.put(j)
			then := append([]kv.Op{kv.Delete(old)}, puts...)
			then = append(then, c.keys.releaseUnique(j)...)
			res, err := c.store.Txn(ctx, kv.Txn{If: guard, Then: then})
			if err != nil {
				return nil, fmt.Errorf("coordinator: cancel job %s: %w", id, err)
			}
			if res.Succeeded {
				return j, nil
			}
		}
	}
	return nil, fmt.Errorf("coordinator: cancel job %s: %w", id, ErrConflict)
}

// cancelRequest is the write of a cancel request for the run of j, a
// running job as read, made at time at. It is conditional on that run
// still going on (its running-index entry is the one its claim created,
// at its token), not on the record: the run's checkpoints must not make
// a cancel lose races. A request that lands once that run has ended (its
// reply was lost, and it waited on a hung etcd member) is refused, not
// taken for a later run's: the job may have been retried since (ADR 0053).
func (c *Coordinator) cancelRequest(j *Job, at time.Time) kv.Txn {
	req, _ := json.Marshal(map[string]any{"requested_at": at})
	return kv.Txn{
		If:   []kv.Cmp{kv.CreateRevisionIs(c.keys.running(j.ID), kv.Equal, int64(j.Token))},
		Then: []kv.Op{kv.Put(c.keys.cancel(j.ID), req, 0)},
	}
}

// Wait blocks until job id is in a final state and returns it, or until ctx
// ends. It watches the record; it does not poll.
func (c *Coordinator) Wait(ctx context.Context, id string) (*Job, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	key := c.keys.job(id)
	retry := newWatchRetry(c)
	for {
		rr, err := c.store.Range(ctx, kv.RangeRequest{Start: key})
		if err != nil {
			return nil, fmt.Errorf("coordinator: wait for job %s: %w", id, err)
		}
		if len(rr.KVs) == 0 {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		j, err := decodeKV(&rr.KVs[0])
		if err != nil {
			return nil, err
		}
		if j.State.Final() {
			return j, nil
		}
		wctx, cancel := context.WithCancel(ctx)
		retry.begin()
		ch := c.store.Watch(wctx, key, rr.Revision+1)
		j, werr, err := c.waitEvents(ch, key, retry)
		cancel()
		for range ch { // drain so the watcher can exit
		}
		if j != nil || err != nil {
			return j, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The watch ended (compaction, reconnect): read again, after a
		// pause if it keeps ending at once.
		if err := retry.wait(ctx, "wait: "+key, werr); err != nil {
			return nil, err
		}
	}
}

// waitEvents returns the job once an event of ch shows it final, or the
// watch's error (nil if it just closed) when the watch ends first.
func (c *Coordinator) waitEvents(ch <-chan kv.WatchResponse, key string, retry *watchRetry) (j *Job, watchErr, err error) {
	for resp := range ch {
		if resp.Err != nil {
			return nil, resp.Err, nil
		}
		if len(resp.Events) > 0 {
			retry.delivered()
		}
		for _, ev := range resp.Events {
			if ev.KV.Key != key {
				continue
			}
			if ev.Type == kv.EventDelete {
				return nil, nil, fmt.Errorf("%w: %s was deleted", ErrNotFound, idFromIndex(key))
			}
			j, err := decodeKV(&ev.KV)
			if err != nil {
				return nil, nil, err
			}
			if j.State.Final() {
				return j, nil, nil
			}
		}
	}
	return nil, nil, nil
}

// LiveKinds returns the kinds that the live daemons of the namespace run
// (the union of their registrations' Kinds), sorted; none when no daemon is
// live. It reads the registrations only (one key per daemon), not the
// ownership keys that Workers counts, so it is cheap enough to call before
// an insert.
func (c *Coordinator) LiveKinds(ctx context.Context) ([]string, error) {
	ws, err := c.registrations(ctx)
	if err != nil {
		return nil, fmt.Errorf("coordinator: read the live daemons' kinds: %w", err)
	}
	set := map[string]bool{}
	for _, w := range ws {
		for _, k := range w.Kinds {
			set[k] = true
		}
	}
	kinds := make([]string, 0, len(set))
	for k := range set {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds, nil
}

// ServedQueues returns the queues that the live daemons serve, each with
// the ids of those daemons, sorted. Like LiveKinds it reads the
// registrations only, not the ownership keys that Workers counts (one per
// running job).
func (c *Coordinator) ServedQueues(ctx context.Context) (map[string][]string, error) {
	ws, err := c.registrations(ctx)
	if err != nil {
		return nil, fmt.Errorf("coordinator: read the live daemons' queues: %w", err)
	}
	out := map[string][]string{}
	for _, w := range ws {
		for _, q := range w.Queues {
			out[q] = append(out[q], w.ID)
		}
	}
	for _, ids := range out {
		sort.Strings(ids)
	}
	return out, nil
}

// Workers lists the live daemons (those whose session lease is alive) with
// the number of jobs each holds.
func (c *Coordinator) Workers(ctx context.Context) ([]WorkerInfo, error) {
	out, err := c.registrations(ctx)
	if err != nil {
		return nil, fmt.Errorf("coordinator: list workers: %w", err)
	}
	running := map[string]int{}
	if err := c.scan(ctx, c.keys.owners(), false, func(x kv.KeyValue) error {
		running[string(x.Value)]++
		return nil
	}); err != nil {
		return nil, fmt.Errorf("coordinator: count running jobs: %w", err)
	}
	for i := range out {
		out[i].Running = running[out[i].ID]
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if out == nil {
		out = []WorkerInfo{}
	}
	return out, nil
}

// registrations reads the live daemons' registrations (their keys live on
// their sessions' leases).
func (c *Coordinator) registrations(ctx context.Context) ([]WorkerInfo, error) {
	var out []WorkerInfo
	err := c.scan(ctx, c.keys.workers(), false, func(x kv.KeyValue) error {
		var w WorkerInfo
		if err := json.Unmarshal(x.Value, &w); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrCorrupt, x.Key, err)
		}
		out = append(out, w)
		return nil
	})
	return out, err
}

// NextDue returns the due time of the earliest scheduled or retryable job,
// or the zero time if there is none.
func (c *Coordinator) NextDue(ctx context.Context) (time.Time, error) {
	return c.nextDueAfter(ctx, time.Time{})
}

// nextDueAfter is NextDue of the jobs due after t (all of them for the
// zero t).
func (c *Coordinator) nextDueAfter(ctx context.Context, t time.Time) (time.Time, error) {
	start := c.keys.timers()
	if !t.IsZero() {
		start += tsKey(t) + "\xff"
	}
	rr, err := c.store.Range(ctx, kv.RangeRequest{Start: start, End: kv.PrefixEnd(c.keys.timers()), Limit: 1, KeysOnly: true})
	if err != nil {
		return time.Time{}, err
	}
	if len(rr.KVs) == 0 {
		return time.Time{}, nil
	}
	return parseTimerDue(c.keys, rr.KVs[0].Key)
}

func parseTimerDue(k keys, key string) (time.Time, error) {
	rest := strings.TrimPrefix(key, k.timers())
	var ns int64
	if _, err := fmt.Sscanf(rest[:min(20, len(rest))], "%d", &ns); err != nil {
		return time.Time{}, fmt.Errorf("%w: timer key %s", ErrCorrupt, key)
	}
	return time.Unix(0, ns), nil
}
