package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/robfig/cron/v3"
)

// DefaultCatchUp is how far back the periodic loop enqueues ticks that fell
// due while no leader ran them (a leader change, every daemon down).
const DefaultCatchUp = time.Hour

// maxTicksPerTxn bounds the ticks of one schedule enqueued by one
// transaction.
const maxTicksPerTxn = 32

// PeriodicJob is a schedule: enqueue Job at every tick of Spec.
//
// Spec is robfig/cron syntax: five fields (minute hour day-of-month month
// day-of-week), or six with a leading seconds field, or a descriptor
// (@hourly, @daily, @weekly, @monthly, @yearly, @every 90s). Times are UTC
// unless the spec starts with CRON_TZ=Zone (e.g. "CRON_TZ=Europe/Paris 0 9
// * * 1-5").
//
// Each tick is enqueued at most once, by the elected maintenance leader: the
// schedule's last enqueued tick is stored (p/NAME) and advanced by a
// compare-and-set in the same transaction that inserts the tick's job, so a
// leader change, or two leaders briefly overlapping, never enqueues a tick
// twice. A tick that fell due while no leader ran is enqueued late if it is
// within CatchUp of now, and skipped (counted in Skipped) if older. The
// job's unique key is "periodic:NAME:TICK", which shows which tick it was;
// a tick whose key a job already holds is skipped (and counted) too.
type PeriodicJob struct {
	// Name identifies the schedule (its stored state); letters, digits
	// and _ . : -.
	Name string
	Spec string
	// Job is the template of every tick's job. ScheduledAt, UniqueKey
	// and Unique are ignored.
	Job EnqueueParams
	// CatchUp is the catch-up window. Default: DefaultCatchUp.
	CatchUp time.Duration
}

// PeriodicState is a schedule's stored state, as `periodic list` shows it.
type PeriodicState struct {
	Name  string `json:"name"`
	Spec  string `json:"spec"`
	Kind  string `json:"kind"`
	Queue string `json:"queue"`
	// Since is when the schedule was first seen by a leader, or when its
	// spec last changed: ticks start after it.
	Since time.Time `json:"since"`
	// LastTick is the last tick enqueued (or skipped), LastJobID its job.
	LastTick       *time.Time `json:"last_tick,omitempty"`
	LastJobID      string     `json:"last_job_id,omitempty"`
	LastEnqueuedAt *time.Time `json:"last_enqueued_at,omitempty"`
	// Enqueued and Skipped count the ticks enqueued and those skipped:
	// older than the catch-up window (of a spec with a seconds field,
	// about a million at most per downtime), or whose unique key a job
	// already held (a user's job enqueued with that key).
	Enqueued int `json:"enqueued"`
	Skipped  int `json:"skipped,omitempty"`
	// NextAt is the next tick.
	NextAt time.Time `json:"next_at"`
	// CatchUpMS is the schedule's catch-up window.
	CatchUpMS int64 `json:"catch_up_ms"`
}

// ParseSchedule parses a cron spec as PeriodicJob.Spec describes.
func ParseSchedule(spec string) (sched cron.Schedule, err error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, fmt.Errorf("%w: cron spec is empty: use e.g. \"0 3 * * *\" or \"@every 10m\"", ErrInvalid)
	}
	full := spec
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		if !strings.Contains(spec, " ") {
			return nil, fmt.Errorf("%w: cron spec %q has a time zone but no schedule: use e.g. \"CRON_TZ=Europe/Paris 0 9 * * *\"", ErrInvalid, spec)
		}
	} else {
		full = "CRON_TZ=UTC " + spec
	}
	defer func() {
		if p := recover(); p != nil {
			sched, err = nil, fmt.Errorf("%w: cron spec %q: %v", ErrInvalid, spec, p)
		}
	}()
	parser := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	sched, err = parser.Parse(full)
	if err != nil && strings.Contains(err.Error(), "location") {
		return nil, fmt.Errorf("%w: cron spec %q: %v: use an IANA time zone such as CRON_TZ=Europe/Paris", ErrInvalid, spec, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: cron spec %q: %v: use five fields (minute hour day-of-month month day-of-week), e.g. \"0 3 * * *\", or a descriptor such as @hourly or \"@every 10m\"", ErrInvalid, spec, err)
	}
	if cd, ok := sched.(cron.ConstantDelaySchedule); ok && cd.Delay < time.Second {
		return nil, fmt.Errorf("%w: cron spec %q: @every needs at least 1s", ErrInvalid, spec)
	}
	// robfig/cron rounds an @every under 1s up to 1s, and truncates one
	// to whole seconds (@every 1500ms ran every second): check what was
	// written, after any time zone (which @every does not use).
	body := spec
	if full != "CRON_TZ=UTC "+spec {
		_, body, _ = strings.Cut(spec, " ")
		body = strings.TrimSpace(body)
	}
	if rest, ok := strings.CutPrefix(body, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d < time.Second {
			return nil, fmt.Errorf("%w: cron spec %q: @every needs a duration of at least 1s, e.g. \"@every 10m\"", ErrInvalid, spec)
		}
		if d%time.Second != 0 {
			return nil, fmt.Errorf("%w: cron spec %q: @every runs in whole seconds only: use whole seconds, e.g. \"@every 2s\"", ErrInvalid, spec)
		}
	}
	if ss, ok := sched.(*cron.SpecSchedule); ok && ss.Location != nil && ss.Location != time.UTC {
		sched = zonedSchedule{ss}
	}
	if sched.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("%w: cron spec %q never fires", ErrInvalid, spec)
	}
	return sched, nil
}

// zonedSchedule is a spec in a time zone with daylight saving time, run as
// cron runs it across the changes (robfig/cron does not): a wall-clock time
// that occurs twice when the clocks go back is one tick, unless the spec
// runs every hour (then the repeated hour runs again, as real time passes);
// wall-clock times that do not occur when the clocks go forward, if the
// spec has any, are one tick at the change. robfig/cron assumes changes of
// whole hours: across a change of half an hour (Australia/Lord_Howe) it
// can return a time whose wall clock the spec does not match, which is
// passed over.
type zonedSchedule struct{ s *cron.SpecSchedule }

// maxZoneSteps bounds the zone changes and repeated spans that one Next
// looks through.
const maxZoneSteps = 64

func (z zonedSchedule) Next(t time.Time) time.Time {
	for range maxZoneSteps {
		n := z.s.Next(t)
		if n.IsZero() {
			return n
		}
		if m := z.firstInOffsets(t, n); !m.IsZero() {
			n = m
		}
		if tr, ok := z.gapTick(t, n); ok {
			return tr
		}
		if end, ok := z.repeated(n); ok {
			t = end // the wall-clock times up to end ran before the change
			continue
		}
		if !z.matches(n) {
			t = n
			continue
		}
		return n
	}
	return z.s.Next(t)
}

// firstInOffsets returns the first time after t and before n whose
// wall-clock time, read with the zone's offset in force then, the spec
// matches, or zero if none. robfig/cron steps hours in the zone, and near
// a change of half an hour it steps over such times: after the clocks went
// back at Lord Howe, a daily 03:00 job ran a day later, and a daily 00:00
// job skipped the next day. Each span of one offset is exact read as a
// fixed zone.
func (z zonedSchedule) firstInOffsets(t, n time.Time) time.Time {
	from, in := t, t // search after from, in the offset in force at in
	for range maxZoneSteps {
		l := in.In(z.s.Location)
		_, off := l.Zone()
		_, end := l.ZoneBounds()
		fixed := *z.s
		fixed.Location = time.FixedZone("", off)
		if m := fixed.Next(from); !m.IsZero() && m.Before(n) && (end.IsZero() || m.Before(end)) {
			return m
		}
		if end.IsZero() || !end.Before(n) {
			return time.Time{}
		}
		from, in = end.Add(-time.Nanosecond), end
	}
	return time.Time{}
}

// matches reports whether the spec matches t's wall-clock time in its
// zone, day-of-month and day-of-week as cron combines them.
func (z zonedSchedule) matches(t time.Time) bool {
	const star = 1 << 63 // robfig/cron's mark of a field given as *
	l := t.In(z.s.Location)
	bit := func(field uint64, v int) bool { return field&(1<<uint(v)) != 0 }
	if !bit(z.s.Second, l.Second()) || !bit(z.s.Minute, l.Minute()) || !bit(z.s.Hour, l.Hour()) || !bit(z.s.Month, int(l.Month())) {
		return false
	}
	dom, dow := bit(z.s.Dom, l.Day()), bit(z.s.Dow, int(l.Weekday()))
	if z.s.Dom&star != 0 || z.s.Dow&star != 0 {
		return dom && dow
	}
	return dom || dow
}

// everyHour reports whether the spec runs in every hour of the day.
func (z zonedSchedule) everyHour() bool {
	const all = 1<<24 - 1
	return z.s.Hour&all == all
}

// gapTick returns the first change after t and not after n at which the
// clocks go forward over wall-clock times that the spec matches.
func (z zonedSchedule) gapTick(t, n time.Time) (time.Time, bool) {
	at := t
	for range maxZoneSteps {
		_, end := at.In(z.s.Location).ZoneBounds()
		if end.IsZero() || end.After(n) {
			return time.Time{}, false
		}
		_, before := end.Add(-time.Nanosecond).In(z.s.Location).Zone()
		_, after := end.In(z.s.Location).Zone()
		if gap := time.Duration(after-before) * time.Second; gap > 0 {
			// The skipped wall-clock times are [end, end+gap) read with
			// the offset before the change.
			fixed := *z.s
			fixed.Location = time.FixedZone("", before)
			if m := fixed.Next(end.Add(-time.Nanosecond)); !m.IsZero() && m.Before(end.Add(gap)) {
				return end, true
			}
		}
		at = end
	}
	return time.Time{}, false
}

// repeated reports whether n's wall-clock time already occurred before the
// clocks went back (and the spec does not run every hour), and if so the
// end of the repeated span.
func (z zonedSchedule) repeated(n time.Time) (time.Time, bool) {
	if z.everyHour() {
		return time.Time{}, false
	}
	start, _ := n.In(z.s.Location).ZoneBounds()
	if start.IsZero() {
		return time.Time{}, false
	}
	_, before := start.Add(-time.Nanosecond).In(z.s.Location).Zone()
	_, after := start.In(z.s.Location).Zone()
	back := time.Duration(before-after) * time.Second
	if back <= 0 || n.Sub(start) >= back {
		return time.Time{}, false
	}
	return start.Add(back - time.Nanosecond), true
}

// periodicEntry is a validated PeriodicJob.
type periodicEntry struct {
	PeriodicJob
	sched cron.Schedule
}

// validatePeriodic checks every schedule (and that names are distinct)
// without writing anything.
func (c *Coordinator) validatePeriodic(pjs []PeriodicJob) ([]periodicEntry, error) {
	out := make([]periodicEntry, 0, len(pjs))
	seen := map[string]bool{}
	for _, pj := range pjs {
		if err := validName("periodic job name", pj.Name); err != nil {
			return nil, err
		}
		if seen[pj.Name] {
			return nil, fmt.Errorf("%w: two periodic jobs are named %s", ErrInvalid, pj.Name)
		}
		seen[pj.Name] = true
		sched, err := ParseSchedule(pj.Spec)
		if err != nil {
			return nil, fmt.Errorf("periodic job %s: %w", pj.Name, err)
		}
		if pj.CatchUp < 0 {
			return nil, fmt.Errorf("%w: periodic job %s: catch-up window %s is negative", ErrInvalid, pj.Name, pj.CatchUp)
		}
		if pj.CatchUp == 0 {
			pj.CatchUp = DefaultCatchUp
		}
		pj.Job.ScheduledAt, pj.Job.UniqueKey, pj.Job.Unique = time.Time{}, "", nil
		p := pj.Job
		if err := p.normalize(c.cfg.MaxPayloadBytes); err != nil {
			return nil, fmt.Errorf("periodic job %s: %w", pj.Name, err)
		}
		pj.Job = p
		// A tick's job must fit in one request of the store, as stored
		// (JSON escaping can grow a payload several times), or every
		// tick would be refused by the store.
		p.UniqueKey = tickKey(pj.Name, c.clock.Now())
		j, err := c.jobOf(&p, c.clock.Now().UTC())
		if err != nil {
			return nil, fmt.Errorf("periodic job %s: %w", pj.Name, err)
		}
		if _, _, n := c.tickWrite(j); !c.fitsBytes(n) {
			return nil, fmt.Errorf("%w: periodic job %s: a tick's job is %d bytes as stored (its record and its queue's copy), over the %d bytes the store takes in one request: use a smaller payload", ErrInvalid, pj.Name, n, c.limits.MaxBytes-requestOverhead)
		}
		out = append(out, periodicEntry{PeriodicJob: pj, sched: sched})
	}
	return out, nil
}

// ValidatePeriodic checks schedules as RunPeriodic would, writing nothing.
func (c *Coordinator) ValidatePeriodic(pjs []PeriodicJob) error {
	_, err := c.validatePeriodic(pjs)
	return err
}

// RunPeriodic enqueues the ticks of pjs until ctx ends. Run it on one
// daemon at a time (under RunElected, as the worker does with its
// maintenance); two overlapping is safe, each tick is enqueued once. It
// returns ctx's error, or at once an error wrapping ErrInvalid for a bad
// schedule.
func (c *Coordinator) RunPeriodic(ctx context.Context, pjs []PeriodicJob) error {
	entries, err := c.validatePeriodic(pjs)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	// When each schedule was last read, and its next tick then: a pass
	// reads only the schedules with a tick due, and the others once a
	// minute, as every pass read all of them before. A pass comes as
	// often as the most frequent schedule ticks: one ticking every second
	// beside a thousand hourly ones made a thousand reads a second.
	readAt := make([]time.Time, len(entries))
	nextAt := make([]time.Time, len(entries))
	for {
		// Without its monotonic reading: wake is a time of day, and the
		// wait for it below must see the wall clock step or the host
		// wake from a suspend (a time with a monotonic reading would
		// measure the minute on the monotonic clock).
		now := c.clock.Now().Round(0)
		wake := now.Add(time.Minute)
		for i := range entries {
			if since := now.Sub(readAt[i]); !readAt[i].IsZero() && since >= 0 && since < time.Minute &&
				(nextAt[i].IsZero() || now.Before(nextAt[i])) {
				// Nothing due since the read: it would find nothing.
				if !nextAt[i].IsZero() && nextAt[i].Before(wake) {
					wake = nextAt[i]
				}
				if again := readAt[i].Add(time.Minute); again.Before(wake) {
					wake = again
				}
				continue
			}
			next, err := c.enqueueDueTicks(ctx, &entries[i], now)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.log.Warn("periodic job: enqueueing due ticks failed; retrying", slog.String("periodic", entries[i].Name), slog.Any("err", err))
				next = now.Add(time.Second)
				if errors.Is(err, kv.ErrNoSpace) {
					next = now.Add(periodicNoSpaceRetry)
				}
			}
			readAt[i], nextAt[i] = now, next
			if !next.IsZero() && next.Before(wake) {
				wake = next
			}
		}
		// Wait for wake, looking at the clock at least every
		// periodicRecheck: a timer runs on the monotonic clock, which
		// stops while the host is suspended, and schedules follow the
		// wall clock; a clock that moved while the timer was being armed
		// is noticed too.
		for d := wake.Sub(c.clock.Now()); d > 0; d = wake.Sub(c.clock.Now()) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-c.clock.After(min(d, periodicRecheck)):
			}
		}
	}
}

// periodicNoSpaceRetry is how long RunPeriodic waits before it tries again
// the ticks of a store short of room: space is freed by an operator or by
// retention, not in a second, and each try logs a warning. A tick missed
// meanwhile is caught up within its window.
const periodicNoSpaceRetry = 15 * time.Second

// periodicRecheck bounds how long RunPeriodic trusts one timer.
const periodicRecheck = time.Second

// EnqueueDueTicks enqueues the ticks of pj due at now (within its catch-up
// window) that no one enqueued yet, and returns the schedule's state after
// it. RunPeriodic calls it; tests and tools may call it directly.
func (c *Coordinator) EnqueueDueTicks(ctx context.Context, pj PeriodicJob) (PeriodicState, error) {
	entries, err := c.validatePeriodic([]PeriodicJob{pj})
	if err != nil {
		return PeriodicState{}, err
	}
	if _, err := c.enqueueDueTicks(ctx, &entries[0], c.clock.Now()); err != nil {
		return PeriodicState{}, err
	}
	st, _, err := c.readPeriodic(ctx, pj.Name)
	return st, err
}

func (c *Coordinator) readPeriodic(ctx context.Context, name string) (PeriodicState, int64, error) {
	key := c.keys.periodic(name)
	res, err := c.store.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Get(key)}})
	if err != nil {
		return PeriodicState{}, 0, fmt.Errorf("coordinator: read periodic job %s: %w", name, err)
	}
	x := res.Results[0].KV
	if x == nil {
		return PeriodicState{}, 0, nil
	}
	var st PeriodicState
	if err := json.Unmarshal(x.Value, &st); err != nil {
		return PeriodicState{}, 0, fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
	}
	return st, x.ModRevision, nil
}

// enqueueDueTicks is EnqueueDueTicks on a validated schedule; it returns
// the next tick.
func (c *Coordinator) enqueueDueTicks(ctx context.Context, e *periodicEntry, now time.Time) (time.Time, error) {
	now = now.UTC()
	key := c.keys.periodic(e.Name)
	conflicts := 0
	for {
		st, rev, err := c.readPeriodic(ctx, e.Name)
		if err != nil {
			return time.Time{}, err
		}
		if rev == 0 {
			st = PeriodicState{Name: e.Name, Since: now}
		} else if strings.TrimSpace(st.Spec) != strings.TrimSpace(e.Spec) {
			// A changed spec starts anew, as a new schedule does: its
			// ticks between the old spec's last tick and now were never
			// due, and are not back-filled.
			st.Since = now
		}
		before := st
		st.Spec, st.Kind, st.Queue, st.CatchUpMS = e.Spec, e.Job.Kind, e.Job.Queue, e.CatchUp.Milliseconds()
		base := periodicBase(st)
		cutoff := now.Add(-e.CatchUp)
		perTxn := c.ticksPerTxn()
		var due []time.Time
		t, last, skipped := skipBefore(e.sched, e.sched.Next(base), cutoff)
		for !t.IsZero() && !t.After(now) && len(due) < perTxn {
			if t.Before(cutoff) {
				skipped++
			} else {
				due = append(due, t)
			}
			last = t
			t = e.sched.Next(t)
		}
		st.NextAt = t
		if last.IsZero() && rev != 0 && sameDefinition(before, st) {
			return t, nil // nothing due, nothing to record
		}
		built := make([]*Job, len(due))
		for i, tick := range due {
			p := e.Job
			p.UniqueKey = tickKey(e.Name, tick)
			j, err := c.buildJob(ctx, &p, now)
			if err != nil {
				return time.Time{}, fmt.Errorf("periodic job %s: %w", e.Name, err)
			}
			built[i] = j
		}
		// As many ticks as fit in one request of the store, as their jobs
		// are stored: the others are the next transaction's.
		if k := c.ticksThatFit(built); k < len(built) {
			if k == 0 {
				_, _, n := c.tickWrite(built[0])
				return time.Time{}, fmt.Errorf("%w: periodic job %s: a tick's job is %d bytes as stored, over the %d bytes the store takes in one request", ErrInvalid, e.Name, n, c.limits.MaxBytes-requestOverhead)
			}
			t, last = due[k], due[k-1]
			due, built, st.NextAt = due[:k], built[:k], t
		}
		if !last.IsZero() {
			lt := last
			st.LastTick = &lt
		}
		if skipped > 0 {
			st.Skipped += skipped
			c.log.Warn("periodic job: ticks older than the catch-up window skipped", slog.String("periodic", e.Name),
				slog.Int("skipped", skipped), slog.Duration("catch_up", e.CatchUp))
		}
		// A tick whose unique key a job already holds (a user's job
		// enqueued with that key) is not enqueued: it is skipped, and
		// counted and logged so. The keys read free are compared in the
		// write, so one taken meanwhile refuses it and the ticks are read
		// again: the counts are exact.
		holders, err := c.uniqueHolders(ctx, built)
		if err != nil {
			return time.Time{}, fmt.Errorf("coordinator: enqueue ticks of periodic job %s: %w", e.Name, err)
		}
		cmps := []kv.Cmp{kv.ModRevisionIs(key, kv.Equal, rev)}
		var nested []kv.Op
		var jobs []*Job
		var ticks []time.Time
		for i, j := range built {
			if holders[i] != "" {
				continue
			}
			cmp, op, _ := c.tickWrite(j)
			cmps = append(cmps, cmp)
			nested = append(nested, op)
			jobs = append(jobs, j)
			ticks = append(ticks, due[i])
		}
		if len(jobs) > 0 {
			st.LastJobID = jobs[len(jobs)-1].ID
			st.LastEnqueuedAt = &now
			st.Enqueued += len(jobs)
		}
		st.Skipped += len(due) - len(jobs)
		if err := c.checkSpace(len(jobs)); err != nil {
			return time.Time{}, fmt.Errorf("coordinator: enqueue ticks of periodic job %s: %w", e.Name, err)
		}
		b, _ := json.Marshal(st)
		res, err := c.store.Txn(ctx, kv.Txn{
			If:   cmps,
			Then: append(nested, kv.Put(key, b, 0)),
		})
		if err != nil {
			return time.Time{}, fmt.Errorf("coordinator: enqueue ticks of periodic job %s: %w", e.Name, err)
		}
		if !res.Succeeded {
			// Another leader moved the schedule, or a job took a tick's
			// unique key: read again.
			if conflicts++; conflicts > 16 {
				return time.Time{}, fmt.Errorf("coordinator: enqueue ticks of periodic job %s: %w", e.Name, ErrConflict)
			}
			continue
		}
		for i, j := range jobs {
			if r := res.Results[i].Txn; r != nil && r.Succeeded {
				c.log.Info("periodic job enqueued", slog.String("periodic", e.Name), slog.String("job", j.ID), slog.String("tick", ticks[i].Format(time.RFC3339)))
			}
		}
		for i, j := range built {
			if holders[i] != "" {
				c.log.Warn("periodic job tick skipped: a job already holds its unique key", slog.String("periodic", e.Name),
					slog.String("tick", due[i].Format(time.RFC3339)), slog.String("unique_key", j.UniqueKey), slog.String("holder", holders[i]))
			}
		}
		if t.IsZero() || t.After(now) {
			return t, nil
		}
		// More ticks are due than one transaction takes: go on.
	}
}

// uniqueHolders returns, for each job, the id of the job that holds its
// unique key, or "" if the key is free.
func (c *Coordinator) uniqueHolders(ctx context.Context, jobs []*Job) ([]string, error) {
	out := make([]string, len(jobs))
	if len(jobs) == 0 {
		return out, nil
	}
	reads := make([]kv.Op, len(jobs))
	for i, j := range jobs {
		reads[i] = kv.Get(c.keys.unique(j.UniqueKey))
	}
	res, err := c.store.Txn(ctx, kv.Txn{Then: reads})
	if err != nil {
		return nil, fmt.Errorf("read unique keys: %w", err)
	}
	for i, r := range res.Results {
		if r.KV != nil {
			out[i] = string(r.KV.Value)
		}
	}
	return out, nil
}

// maxSkipWalk bounds the ticks older than the catch-up window that
// skipBefore walks one by one.
const maxSkipWalk = 1 << 20

// skipBefore returns sched's first tick from t (a tick, or zero) that is
// not before cutoff, the last tick before cutoff (zero if none), and how
// many ticks before cutoff it passed. After a long downtime a schedule can
// have billions of such ticks (@every 1s down a month is 2.6 million):
// walking them tick by tick held the periodic loop (every schedule's
// ticks) for minutes to hours. An @every schedule's ticks are t plus whole
// delays, counted exactly at once; a cron spec's are walked up to
// maxSkipWalk, then the rest are jumped over uncounted (only a spec with a
// seconds field gets that far: a year of every minute is 525,600 ticks).
func skipBefore(sched cron.Schedule, t, cutoff time.Time) (next, last time.Time, n int) {
	if t.IsZero() || !t.Before(cutoff) {
		return t, time.Time{}, 0
	}
	// Next(t) is t+Delay once t is on a whole second, as every tick after
	// the first is (Delay is whole seconds).
	if cd, ok := sched.(cron.ConstantDelaySchedule); ok && cd.Delay > 0 && cd.Delay%time.Second == 0 && t.Nanosecond() == 0 {
		for t.Before(cutoff) { // twice, or more past 292 years (Sub saturates)
			k := max(cutoff.Sub(t)/cd.Delay, 1)
			last, t, n = t.Add((k-1)*cd.Delay), t.Add(k*cd.Delay), n+int(k)
		}
		return t, last, n
	}
	for ; !t.IsZero() && t.Before(cutoff); t = sched.Next(t) {
		if n == maxSkipWalk {
			return sched.Next(cutoff.Add(-time.Nanosecond)), lastBefore(sched, t, cutoff), n + 1
		}
		last = t
		n++
	}
	return t, last, n
}

// lastBefore returns sched's last tick before cutoff, at or after from (a
// tick before cutoff), looking back from cutoff over doubling spans.
func lastBefore(sched cron.Schedule, from, cutoff time.Time) time.Time {
	for span := time.Second; ; span *= 2 {
		at := cutoff.Add(-span)
		if !at.After(from) {
			at = from.Add(-time.Nanosecond)
		}
		p := sched.Next(at)
		if !p.IsZero() && p.Before(cutoff) {
			for i := 0; i < maxSkipWalk; i++ {
				q := sched.Next(p)
				if q.IsZero() || !q.Before(cutoff) {
					break
				}
				p = q
			}
			return p
		}
		if !at.After(from) {
			return from
		}
	}
}

// ticksPerTxn is how many ticks one transaction of the store takes by its
// ops; ticksThatFit bounds them by their bytes.
func (c *Coordinator) ticksPerTxn() int {
	n := maxTicksPerTxn
	if c.limits.MaxOps > 0 {
		n = min(n, c.limits.MaxOps-4)
	}
	return max(n, 1)
}

// tickKey is the unique key of a schedule's tick.
func tickKey(name string, tick time.Time) string {
	return "periodic:" + name + ":" + tick.UTC().Format(time.RFC3339)
}

// tickWrite returns the write of a tick's job j in its schedule's
// transaction: the compare that its unique key is free, the nested
// transaction that inserts it, and their bytes as the store counts them.
func (c *Coordinator) tickWrite(j *Job) (kv.Cmp, kv.Op, int) {
	uk := c.keys.unique(j.UniqueKey)
	_, puts := c.keys.put(j)
	u := unit{txn: kv.Txn{
		If:   []kv.Cmp{kv.Missing(uk)},
		Then: append(puts, kv.Put(uk, []byte(j.ID), 0)),
	}}
	return kv.Missing(uk), kv.Nested(u.txn), u.bytes() + len(uk) + 16
}

// ticksThatFit returns how many of jobs, from the first, fit in one
// transaction of the store by their bytes as stored (JSON escaping can
// make a record several times its payload: an estimate from the payload's
// length made transactions the store refused, again at every try).
func (c *Coordinator) ticksThatFit(jobs []*Job) int {
	n := 0
	for i, j := range jobs {
		_, _, b := c.tickWrite(j)
		if n += b; !c.fitsBytes(n) {
			return i
		}
	}
	return len(jobs)
}

// periodicBase is the time after which st's next tick falls: its last
// tick, or when its spec was first seen (Since) if that is later (the spec
// changed since its last tick).
func periodicBase(st PeriodicState) time.Time {
	if st.LastTick != nil && st.LastTick.After(st.Since) {
		return *st.LastTick
	}
	return st.Since
}

func sameDefinition(a, b PeriodicState) bool {
	return a.Spec == b.Spec && a.Kind == b.Kind && a.Queue == b.Queue && a.CatchUpMS == b.CatchUpMS && a.NextAt.Equal(b.NextAt)
}

// ListPeriodic returns the stored state of every schedule a leader has run,
// sorted by name, with NextAt computed from its spec.
func (c *Coordinator) ListPeriodic(ctx context.Context) ([]PeriodicState, error) {
	out := []PeriodicState{}
	if err := c.scan(ctx, c.keys.periodics(), false, func(x kv.KeyValue) error {
		var st PeriodicState
		if err := json.Unmarshal(x.Value, &st); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrCorrupt, x.Key, err)
		}
		if sched, err := ParseSchedule(st.Spec); err == nil {
			st.NextAt = sched.Next(periodicBase(st)).UTC()
		}
		out = append(out, st)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("coordinator: list periodic jobs: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
