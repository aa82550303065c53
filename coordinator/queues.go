package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// QueueConfig is what operators set on a queue, stored in the store (so it
// holds for every daemon and survives restarts).
type QueueConfig struct {
	Name string `json:"name"`
	// Paused queues are not claimed from; their jobs stay where they are
	// (available, scheduled, ...) until the queue is resumed.
	Paused   bool       `json:"paused"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
	// Limit bounds the jobs of the queue running at once across all
	// daemons; 0 means no limit. See docs/adr/0005.
	Limit     int       `json:"limit,omitempty"`
	UpdatedAt time.Time `json:"updated_at,omitzero"` // zero (left out) for a queue never configured
}

// MaxQueueLimit bounds QueueConfig.Limit.
const MaxQueueLimit = 10000

// QueueInfo describes a queue for `queues list`.
type QueueInfo struct {
	QueueConfig
	// Available counts the jobs ready to run now.
	Available int `json:"available"`
	// Held counts the slots of the global limit held by running jobs
	// (only counted when Limit is set).
	Held int `json:"held,omitempty"`
	// Workers lists the live daemons that serve the queue.
	Workers []string `json:"workers"`
}

// queueCache keeps the queue configurations while a WatchQueues runs in the
// process, so that claims need not read them; without a watch, claims read
// them from the store. Either way the claim transaction compares the
// configuration's modification revision, so a stale copy can delay a claim
// but never let one through a pause.
type queueCache struct {
	mu       sync.Mutex
	watchers int
	ready    bool
	m        map[string]cachedQueue
}

type cachedQueue struct {
	conf QueueConfig
	rev  int64 // modification revision; 0: no record
	seen int64 // revision of the event that set this entry
}

func (qc *queueCache) get(q string) (QueueConfig, int64, bool) {
	qc.mu.Lock()
	defer qc.mu.Unlock()
	if qc.watchers == 0 || !qc.ready {
		return QueueConfig{}, 0, false
	}
	e := qc.m[q]
	return e.conf, e.rev, true
}

func (qc *queueCache) set(q string, e cachedQueue) {
	qc.mu.Lock()
	defer qc.mu.Unlock()
	if qc.m == nil {
		qc.m = map[string]cachedQueue{}
	}
	if old, ok := qc.m[q]; ok && old.seen > e.seen {
		return
	}
	qc.m[q] = e
}

func (qc *queueCache) setReady(ready bool) {
	qc.mu.Lock()
	defer qc.mu.Unlock()
	qc.ready = ready
}

func (qc *queueCache) watch(delta int) {
	qc.mu.Lock()
	defer qc.mu.Unlock()
	qc.watchers += delta
	if qc.watchers == 0 {
		qc.ready = false
	}
}

// queueConfig returns the configuration of queue q and the modification
// revision of its record (0 if there is none).
func (c *Coordinator) queueConfig(ctx context.Context, q string) (QueueConfig, int64, error) {
	if conf, rev, ok := c.qconf.get(q); ok {
		return conf, rev, nil
	}
	rr, err := c.store.Range(ctx, kv.RangeRequest{Start: c.keys.queueConf(q), Serializable: true})
	if err != nil {
		return QueueConfig{}, 0, fmt.Errorf("coordinator: read configuration of queue %s: %w", q, err)
	}
	if len(rr.KVs) == 0 {
		return QueueConfig{Name: q}, 0, nil
	}
	conf, err := decodeQueueConfig(&rr.KVs[0])
	return conf, rr.KVs[0].ModRevision, err
}

func decodeQueueConfig(x *kv.KeyValue) (QueueConfig, error) {
	var conf QueueConfig
	if err := json.Unmarshal(x.Value, &conf); err != nil {
		return QueueConfig{}, fmt.Errorf("%w: %s: %v", ErrCorrupt, x.Key, err)
	}
	return conf, nil
}

// QueueConfig returns the configuration of queue q (the zero configuration,
// named, if none was ever set).
func (c *Coordinator) QueueConfig(ctx context.Context, q string) (QueueConfig, error) {
	if err := ValidateQueue(q); err != nil {
		return QueueConfig{}, err
	}
	conf, _, err := c.readQueueConfig(ctx, q)
	return conf, err
}

// readQueueConfig reads q's configuration linearizably.
func (c *Coordinator) readQueueConfig(ctx context.Context, q string) (QueueConfig, int64, error) {
	res, err := c.store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Get(c.keys.queueConf(q))}})
	if err != nil {
		return QueueConfig{}, 0, fmt.Errorf("coordinator: read configuration of queue %s: %w", q, err)
	}
	x := res.Results[0].KV
	if x == nil {
		return QueueConfig{Name: q}, 0, nil
	}
	conf, err := decodeQueueConfig(x)
	return conf, x.ModRevision, err
}

// updateQueue applies change to q's configuration by compare-and-set and
// returns the result, and whether anything changed.
func (c *Coordinator) updateQueue(ctx context.Context, q string, change func(*QueueConfig)) (QueueConfig, bool, error) {
	if err := ValidateQueue(q); err != nil {
		return QueueConfig{}, false, err
	}
	key := c.keys.queueConf(q)
	for range 16 {
		conf, rev, err := c.readQueueConfig(ctx, q)
		if err != nil {
			return QueueConfig{}, false, err
		}
		next := conf
		change(&next)
		if next == conf {
			return conf, false, nil
		}
		next.Name = q
		next.UpdatedAt = c.clock.Now().UTC()
		b, _ := json.Marshal(next)
		res, err := c.store.Txn(ctx, kv.Txn{
			If:   []kv.Cmp{kv.ModRevisionIs(key, kv.Equal, rev)},
			Then: []kv.Op{kv.Put(key, b, 0)},
		})
		if err != nil {
			return QueueConfig{}, false, fmt.Errorf("coordinator: write configuration of queue %s: %w", q, err)
		}
		if res.Succeeded {
			c.qconf.set(q, cachedQueue{conf: next, rev: res.Revision, seen: res.Revision})
			return next, next.Paused != conf.Paused || next.Limit != conf.Limit, nil
		}
	}
	return QueueConfig{}, false, fmt.Errorf("coordinator: configure queue %s: %w", q, ErrConflict)
}

// PauseQueue pauses queue q: once it returns, no daemon claims a job of q
// (a claim in flight that read the queue unpaused is refused by the store,
// because every claim compares the configuration's revision). Running jobs
// go on. changed is false when q was already paused.
func (c *Coordinator) PauseQueue(ctx context.Context, q string) (conf QueueConfig, changed bool, err error) {
	now := c.clock.Now().UTC()
	return c.updateQueue(ctx, q, func(qc *QueueConfig) {
		if !qc.Paused {
			qc.Paused, qc.PausedAt = true, &now
		}
	})
}

// ResumeQueue resumes queue q. changed is false when q was not paused.
func (c *Coordinator) ResumeQueue(ctx context.Context, q string) (conf QueueConfig, changed bool, err error) {
	return c.updateQueue(ctx, q, func(qc *QueueConfig) { qc.Paused, qc.PausedAt = false, nil })
}

// SetQueueLimit sets the global concurrency limit of queue q: at most n of
// its jobs run at once across all daemons; 0 removes the limit. Jobs
// running when it is lowered are not interrupted.
func (c *Coordinator) SetQueueLimit(ctx context.Context, q string, n int) (conf QueueConfig, changed bool, err error) {
	if n < 0 || n > MaxQueueLimit {
		return QueueConfig{}, false, fmt.Errorf("%w: queue limit %d: want 0 (none) to %d", ErrInvalid, n, MaxQueueLimit)
	}
	return c.updateQueue(ctx, q, func(qc *QueueConfig) { qc.Limit = n })
}

// WatchQueues keeps this coordinator's copy of every queue configuration up
// to date, so that claims need not read them, and calls fn (which must not
// block) whenever a configuration changes or a slot of a global limit is
// freed: a daemon waiting for either should try to claim again. It blocks
// until ctx ends and returns ctx's error.
func (c *Coordinator) WatchQueues(ctx context.Context, fn func()) error {
	c.qconf.watch(1)
	defer c.qconf.watch(-1)
	retry := newWatchRetry(c)
	for {
		rr, err := c.store.Range(ctx, kv.Prefix(c.keys.queueConfs(), 0))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.log.Warn("queue configurations: read failed; retrying", slog.Any("err", err))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-c.clock.After(500 * time.Millisecond):
			}
			continue
		}
		for i := range rr.KVs {
			x := &rr.KVs[i]
			conf, err := decodeQueueConfig(x)
			if err != nil {
				c.log.Error("skipping corrupt queue configuration", slog.Any("err", err))
				continue
			}
			c.qconf.set(conf.Name, cachedQueue{conf: conf, rev: x.ModRevision, seen: rr.Revision})
		}
		c.qconf.setReady(true)
		fn()
		wctx, cancel := context.WithCancel(ctx)
		retry.begin()
		ch := c.store.Watch(wctx, c.keys.queueMgmt(), rr.Revision+1)
		var ended error
		for resp := range ch {
			if resp.Err != nil {
				ended = resp.Err
				break
			}
			if len(resp.Events) > 0 {
				retry.delivered()
			}
			wake := false
			for _, ev := range resp.Events {
				switch {
				case strings.HasPrefix(ev.KV.Key, c.keys.queueConfs()):
					q := strings.TrimPrefix(ev.KV.Key, c.keys.queueConfs())
					e := cachedQueue{conf: QueueConfig{Name: q}, seen: ev.KV.ModRevision}
					if ev.Type == kv.EventPut {
						conf, err := decodeQueueConfig(&ev.KV)
						if err != nil {
							c.log.Error("skipping corrupt queue configuration", slog.Any("err", err))
							continue
						}
						e.conf, e.rev = conf, ev.KV.ModRevision
					}
					c.qconf.set(q, e)
					wake = true
				case ev.Type == kv.EventDelete:
					wake = true // a slot was freed
				}
			}
			if wake {
				fn()
			}
		}
		cancel()
		for range ch {
		}
		// The watch ended (compaction, reconnect): claims read the store
		// until the copy is reloaded.
		c.qconf.setReady(false)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := retry.wait(ctx, "queue configurations", ended); err != nil {
			return err
		}
	}
}

// freeSlots returns up to want free slots of queue q's global limit, in a
// random order when spread (so that daemons do not all race for slot 0).
// confRev is the modification revision of the configuration that set the
// limit, which the claim compares.
//
// While slots at or above the limit are held (it was lowered while their
// jobs ran), the slots below it that are free outnumber the room left, and
// claims that took different ones of them would together run more jobs
// than the limit: guard is then not nil, and the claim compares it and
// writes the queue's slot generation with the one job it may take (ADR
// 0044). Otherwise guard is nil: every slot held is below the limit, and
// the slot's own compare is enough.
func (c *Coordinator) freeSlots(ctx context.Context, q string, limit, want int, spread bool, confRev int64) (free []string, guard *kv.Cmp, err error) {
	read := func(serializable bool) (kv.RangeResult, error) {
		rr, err := c.store.Range(ctx, kv.RangeRequest{Start: c.keys.slots(q), End: kv.PrefixEnd(c.keys.slots(q)), KeysOnly: true, Serializable: serializable})
		if err != nil {
			return rr, fmt.Errorf("coordinator: read slots of queue %s: %w", q, err)
		}
		return rr, nil
	}
	rr, err := read(true)
	if err == nil && (len(rr.KVs) >= limit || rr.Revision < confRev) {
		// Every slot looks held, and the caller would wait for a watch
		// event: but the one that woke it may be a slot's release that
		// a lagging member has not applied yet. Read again at the
		// current revision before saying so (as ADR 0016 does for jobs).
		// So too when the read predates the configuration: it could
		// miss slots held at or above a limit lowered since.
		rr, err = read(false)
	}
	if err != nil {
		return nil, nil, err
	}
	if slotsAbove(rr.KVs, limit) {
		// The generation is read first, then the slots: a claim that
		// committed after the slots were read changed it.
		res, err := c.store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Get(c.keys.slotsGen(q))}})
		if err != nil {
			return nil, nil, fmt.Errorf("coordinator: read slot generation of queue %s: %w", q, err)
		}
		var gen int64
		if x := res.Results[0].KV; x != nil {
			gen = x.ModRevision
		}
		if rr, err = read(false); err != nil {
			return nil, nil, err
		}
		if slotsAbove(rr.KVs, limit) {
			g := kv.ModRevisionIs(c.keys.slotsGen(q), kv.Equal, gen)
			guard = &g
			want = min(want, 1)
		}
	}
	held := map[int]bool{}
	for _, x := range rr.KVs {
		if n, err := strconv.Atoi(idFromIndex(x.Key)); err == nil {
			held[n] = true
		}
	}
	room := limit - len(rr.KVs)
	if room <= 0 {
		return nil, nil, nil
	}
	var idx []int
	for i := range limit {
		if !held[i] {
			idx = append(idx, i)
		}
	}
	if spread {
		rand.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	}
	free = make([]string, 0, min(room, want, len(idx)))
	for _, i := range idx[:min(room, want, len(idx))] {
		free = append(free, c.keys.slot(q, i))
	}
	return free, guard, nil
}

// slotsAbove reports whether any of the slot keys xs is not one of slots
// 0 to limit-1: held since before the limit was lowered.
func slotsAbove(xs []kv.KeyValue, limit int) bool {
	for _, x := range xs {
		if n, err := strconv.Atoi(idFromIndex(x.Key)); err != nil || n < 0 || n >= limit {
			return true
		}
	}
	return false
}

// KnownQueue reports whether queue q is known: it has a configuration, a
// live daemon serves it, or it has available jobs. It reads at most one
// key, the live daemons' registrations and one index entry.
func (c *Coordinator) KnownQueue(ctx context.Context, q string) (bool, error) {
	if err := ValidateQueue(q); err != nil {
		return false, err
	}
	res, err := c.store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Get(c.keys.queueConf(q))}})
	if err != nil {
		return false, fmt.Errorf("coordinator: read configuration of queue %s: %w", q, err)
	}
	if res.Results[0].KV != nil {
		return true, nil
	}
	rr, err := c.store.Range(ctx, kv.RangeRequest{Start: c.keys.queue(q), End: kv.PrefixEnd(c.keys.queue(q)), Limit: 1, KeysOnly: true})
	if err != nil {
		return false, fmt.Errorf("coordinator: read available jobs of queue %s: %w", q, err)
	}
	if len(rr.KVs) > 0 {
		return true, nil
	}
	served, err := c.ServedQueues(ctx)
	if err != nil {
		return false, err
	}
	return len(served[q]) > 0, nil
}

// QueueConfigs returns the stored configuration of every queue that has
// one (paused or resumed, or given a limit, at some time), by name.
func (c *Coordinator) QueueConfigs(ctx context.Context) ([]QueueConfig, error) {
	var out []QueueConfig
	if err := c.scan(ctx, c.keys.queueConfs(), false, func(x kv.KeyValue) error {
		conf, err := decodeQueueConfig(&x)
		if err != nil {
			return err
		}
		out = append(out, conf)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("coordinator: read queue configurations: %w", err)
	}
	return out, nil
}

// Queues lists the known queues: those with a configuration, those a live
// daemon serves, and those with available jobs; sorted by name.
func (c *Coordinator) Queues(ctx context.Context) ([]QueueInfo, error) {
	qs, err := c.knownQueues(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.countHeld(ctx, qs); err != nil {
		return nil, err
	}
	return qs, nil
}

// QueueListParams asks QueuePage for a page of the known queues.
type QueueListParams struct {
	// Limit bounds the page; 0 means 100. At most MaxListLimit.
	Limit int
	// After is the Next of the previous page: the page holds the queues
	// named after it. Empty: from the first queue.
	After string
}

// QueuePage is one page of the known queues.
type QueuePage struct {
	Queues []QueueInfo `json:"queues"`
	// Next is the cursor of the following page (the name of the last
	// queue on this one); empty on the last page.
	Next string `json:"next,omitempty"`
}

// ValidateQueueCursor checks a cursor of the pages of queues
// (QueueListParams.After): the name of the last queue of a page. A cursor
// is a position in name order, not a queue to create or address by path,
// so "." and "..", which ValidateQueue refuses but which builds before
// 2026-12-03 took as names, are cursors: a page can end on such a queue.
func ValidateQueueCursor(after string) error {
	if validName("queue cursor", after) != nil {
		return fmt.Errorf("%w: bad cursor %q: pass the next value of the previous page", ErrInvalid, truncate(after, 80))
	}
	return nil
}

// QueuePage returns the known queues (as Queues) named after p.After, at
// most p.Limit of them, in name order. Pages are read one at a time, not
// at one revision: a queue known from the first page to the last is on
// exactly one page; one that becomes known or unknown meanwhile is on at
// most one (on it if it is known when the page that would hold its name
// is read), and each queue's counts are those of its page's read. A page
// costs a read of every queue's configuration, the live daemons and the
// available index, but the slots of the limited queues on it only.
func (c *Coordinator) QueuePage(ctx context.Context, p QueueListParams) (QueuePage, error) {
	var err error
	if p.Limit, err = listLimit(p.Limit); err != nil {
		return QueuePage{}, err
	}
	if p.After != "" {
		if err := ValidateQueueCursor(p.After); err != nil {
			return QueuePage{}, err
		}
	}
	qs, err := c.knownQueues(ctx)
	if err != nil {
		return QueuePage{}, err
	}
	qs = qs[sort.Search(len(qs), func(i int) bool { return qs[i].Name > p.After }):]
	var page QueuePage
	if len(qs) > p.Limit {
		qs = qs[:p.Limit]
		page.Next = qs[len(qs)-1].Name
	}
	page.Queues = slices.Clip(qs)
	if err := c.countHeld(ctx, page.Queues); err != nil {
		return QueuePage{}, err
	}
	return page, nil
}

// knownQueues is Queues without the slots held.
func (c *Coordinator) knownQueues(ctx context.Context) ([]QueueInfo, error) {
	byName := map[string]*QueueInfo{}
	get := func(q string) *QueueInfo {
		if x := byName[q]; x != nil {
			return x
		}
		x := &QueueInfo{QueueConfig: QueueConfig{Name: q}, Workers: []string{}}
		byName[q] = x
		return x
	}
	confs, err := c.QueueConfigs(ctx)
	if err != nil {
		return nil, err
	}
	for _, conf := range confs {
		get(conf.Name).QueueConfig = conf
	}
	served, err := c.ServedQueues(ctx)
	if err != nil {
		return nil, err
	}
	for q, ids := range served {
		get(q).Workers = ids
	}
	if err := c.scan(ctx, c.keys.available(), true, func(x kv.KeyValue) error {
		q, _, _ := strings.Cut(strings.TrimPrefix(x.Key, c.keys.available()), "/")
		get(q).Available++
		return nil
	}); err != nil {
		return nil, fmt.Errorf("coordinator: count available jobs: %w", err)
	}
	out := make([]QueueInfo, 0, len(byName))
	for _, x := range byName {
		out = append(out, *x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// countHeld counts the slots held of each limited queue of qs.
func (c *Coordinator) countHeld(ctx context.Context, qs []QueueInfo) error {
	for i := range qs {
		x := &qs[i]
		if x.Limit > 0 {
			if err := c.scan(ctx, c.keys.slots(x.Name), true, func(kv.KeyValue) error {
				x.Held++
				return nil
			}); err != nil {
				return fmt.Errorf("coordinator: count slots of queue %s: %w", x.Name, err)
			}
		}
	}
	return nil
}

// slotOf returns the key of the global-limit slot that job j holds on
// sess's lease, or "" if it holds none.
func (c *Coordinator) slotOf(ctx context.Context, sess *Session, j *Job) (string, error) {
	rr, err := c.store.Range(ctx, kv.Prefix(c.keys.slots(j.Queue), 0))
	if err != nil {
		return "", fmt.Errorf("coordinator: read the global-limit slots of queue %s: %w", j.Queue, err)
	}
	for _, x := range rr.KVs {
		if x.Lease == sess.lease && string(x.Value) == j.ID {
			return x.Key, nil
		}
	}
	return "", nil
}
