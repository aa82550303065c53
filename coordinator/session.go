package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// SessionConfig configures a daemon session.
type SessionConfig struct {
	// Clock times renewals and the validity deadline. It is separate from
	// the coordinator's clock, which stamps jobs, so tests can move job
	// time without expiring sessions. Default: RealClock.
	Clock Clock
	// BootClock reads elapsed time on a clock that goes on counting while
	// the system is suspended, as the server's TTL does: Go's monotonic
	// clock (Clock's, on Linux CLOCK_MONOTONIC) stops then, so after a
	// resume the deadline alone would hold for the rest of its old
	// interval. The deadline is also kept on this clock, and a session
	// found past it ends within a second. Default: CLOCK_BOOTTIME on Linux
	// when Clock is RealClock and the store's leases expire
	// (kv.Limits.LeasesExpire: etcd, not localstore, whose leases outlive
	// a suspend); none on other systems or with another Clock.
	BootClock func() time.Duration
	// Margin is subtracted from the validity deadline to absorb clock-rate
	// error and the time it takes handlers to stop. Default: TTL/5.
	Margin time.Duration
	// TTL of the session lease. Default: 30s; at least 2s.
	TTL time.Duration
	// Worker describes the daemon in `workers list`. Its ID must be set
	// (see NewWorkerID).
	Worker WorkerInfo
}

// Defaults of SessionConfig.
const (
	DefaultLeaseTTL = 30 * time.Second
	MinLeaseTTL     = 2 * time.Second
)

// RenewInterval is how often a session renews: a third of its TTL.
func (cfg SessionConfig) RenewInterval() time.Duration { return cfg.TTL / 3 }

// ValidateLeaseTTL checks a session lease TTL: whole seconds (etcd grants
// whole seconds), at least MinLeaseTTL. The error wraps ErrInvalid.
func ValidateLeaseTTL(ttl time.Duration) error {
	if ttl < MinLeaseTTL || ttl%time.Second != 0 {
		return fmt.Errorf("%w: lease TTL %s: want whole seconds, at least %s", ErrInvalid, ttl, MinLeaseTTL)
	}
	return nil
}

// ValidateLeaseMargin checks a session's Margin against its TTL (a valid
// one): TTL - margin must leave more than one and a half renewal
// intervals, so that a session renews at least once before its deadline,
// with time to spare. Margin 0 is the default, DefaultLeaseMargin. The
// error wraps ErrInvalid.
func ValidateLeaseMargin(ttl, margin time.Duration) error {
	if margin == 0 {
		margin = DefaultLeaseMargin(ttl)
	}
	renew := SessionConfig{TTL: ttl}.RenewInterval()
	if margin < 0 || ttl-margin <= renew*3/2 {
		return fmt.Errorf("%w: lease margin %s leaves too little of TTL %s beyond one renewal every %s: want under %s", ErrInvalid, margin, ttl, renew, ttl-renew*3/2)
	}
	return nil
}

// DefaultLeaseMargin is a session's Margin when its config sets none: a
// fifth of ttl. It is also the least time between the session's deadline,
// when its handlers are cancelled, and the earliest moment the store can
// expire its lease.
func DefaultLeaseMargin(ttl time.Duration) time.Duration { return ttl / 5 }

// withDefaults fills defaults and checks the timing relationships:
// TTL > TTL - Margin > renew interval, so a session renews at least once
// before its deadline, with time to spare.
func (cfg SessionConfig) withDefaults() (SessionConfig, error) {
	if cfg.Clock == nil {
		cfg.Clock = RealClock
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultLeaseTTL
	}
	if err := ValidateLeaseTTL(cfg.TTL); err != nil {
		return cfg, err
	}
	if err := ValidateLeaseMargin(cfg.TTL, cfg.Margin); err != nil {
		return cfg, err
	}
	if cfg.Margin == 0 {
		cfg.Margin = DefaultLeaseMargin(cfg.TTL)
	}
	if cfg.Worker.ID == "" {
		return cfg, fmt.Errorf("%w: session without a worker id", ErrInvalid)
	}
	return cfg, nil
}

// WorkerInfo is what a daemon registers about itself under its lease.
type WorkerInfo struct {
	ID          string    `json:"id"`
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	StartedAt   time.Time `json:"started_at"`
	Queues      []string  `json:"queues"`
	Kinds       []string  `json:"kinds"`
	Concurrency int       `json:"concurrency"`
	LeaseTTLMS  int64     `json:"lease_ttl_ms"`
	// Periodic names the schedules the daemon enqueues while it leads
	// maintenance (none if it does not maintain): only the leader's run,
	// so a schedule that the leader does not declare waits for one that
	// does (periodic list says so). Empty in registrations of versions
	// before it.
	Periodic []string `json:"periodic,omitempty"`
	// Reaps says the daemon runs a reaper (worker Config.Reap): a death's
	// reap is ranked among those that do (ADR 0062). False in
	// registrations of versions before it.
	Reaps bool `json:"reaps,omitempty"`
	// Running is filled in by Workers from the ownership keys.
	Running int `json:"running"`
	// Lease is the worker's current session lease.
	Lease int64 `json:"lease"`
	// LeaseID is Lease in hexadecimal, as etcdctl prints lease ids (a
	// string: JSON readers that hold numbers as doubles, jq 1.6 and
	// JavaScript among them, round ids above 2^53). Empty in
	// registrations of versions before it.
	LeaseID string `json:"lease_id,omitempty"`
	// ClusterVersion is the newest cluster version the daemon's build
	// can run at (ClusterVersion; 0 in registrations of builds before
	// it, which run at 1).
	ClusterVersion int `json:"cluster_version,omitempty"`
}

// Session is one lease of a daemon, renewed every third of its TTL. Every
// job the daemon claims under it hangs on that lease, so the heartbeat costs
// one request per renewal whatever the number of running jobs.
//
// The session keeps a conservative validity deadline: the send time of the
// last acknowledged renewal plus the TTL minus a margin. The server cannot
// expire the lease before that (it starts its TTL on receipt, after the
// send). When the deadline passes without a renewal, or a renewal finds the
// lease gone, the session ends: Ctx is cancelled with cause
// ErrSessionExpired, and every fenced write through it is refused locally.
type Session struct {
	c     *Coordinator
	cfg   SessionConfig
	lease kv.LeaseID

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the heartbeat goroutine has exited

	kick chan struct{} // renew now
	log  *slog.Logger  // with the worker and the lease
	// registered is the revision of the worker's registration (watched
	// from, where leases expire: see watchRegistration).
	registered int64
	// validUntil keeps the clock's monotonic reading (RealClock's times
	// have one): the deadline is compared and waited for in elapsed
	// time, as the server counts the lease's TTL, and a step of the wall
	// clock (NTP, a VM's clock set after a resume) neither extends nor
	// cuts it short. The monotonic clock stops while the system is
	// suspended, the server's TTL does not: bootValidUntil is the same
	// deadline on cfg.BootClock, which counts that time (unused without
	// one).
	validUntil     atomic.Pointer[time.Time]
	bootValidUntil atomic.Int64 // a cfg.BootClock reading

	renewals  atomic.Int64
	fenced    atomic.Bool // see fence
	closeMu   sync.Mutex
	revoked   bool                     // Close revoked the lease (or found it gone); under closeMu
	peers     atomic.Pointer[[]string] // see SetPeers
	claimsMu  sync.Mutex
	claiming  map[string]bool // ids of the jobs that claims in flight try; see takeJobs
	lastClaim atomic.Int64    // Unix nanoseconds of the latest claimTime
}

// claimTime returns now, or just after the time it last returned if now
// is not later: each claim of the session has a time of its own, written
// into its jobs' records as their attempt's start, by which a claim whose
// reply was lost tells its jobs from those of the session's earlier claims
// (resolveClaims).
func (s *Session) claimTime(now time.Time) time.Time {
	for {
		last := s.lastClaim.Load()
		t := now
		if t.UnixNano() <= last {
			t = time.Unix(0, last+1).UTC()
		}
		if s.lastClaim.CompareAndSwap(last, t.UnixNano()) {
			return t
		}
	}
}

// NewSession grants a lease, registers the worker under it and starts the
// heartbeat. The session ends when parent ends, when its lease is lost, or on
// Close.
func (c *Coordinator) NewSession(parent context.Context, cfg SessionConfig) (*Session, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.BootClock == nil && cfg.Clock == RealClock && c.store.Limits().LeasesExpire {
		cfg.BootClock = bootClock // nil where there is none
	}
	// A session is valid for TTL − margin from the grant's send time: a
	// grant and registration that take longer (a store without quorum
	// that answers once it is back) would start a session already past
	// its deadline, which would fence itself at once. They get that long;
	// the caller tries again.
	window := cfg.TTL - cfg.Margin
	sctx, scancel := context.WithTimeout(parent, window)
	defer scancel()
	late := func(err error) error {
		if parent.Err() == nil && sctx.Err() != nil {
			return fmt.Errorf("no answer within the session's validity window %s (TTL − margin): %w", window, err)
		}
		return err
	}
	sent, bootSent := cfg.Clock.Now(), bootNow(cfg.BootClock)
	lease, err := c.store.Grant(sctx, cfg.TTL)
	if err != nil {
		return nil, fmt.Errorf("coordinator: grant session lease: %w", late(err))
	}
	s := &Session{c: c, cfg: cfg, lease: lease, done: make(chan struct{}), kick: make(chan struct{}, 1)}
	s.setValidUntil(sent.Add(cfg.TTL - cfg.Margin))
	s.bootValidUntil.Store(int64(bootSent + cfg.TTL - cfg.Margin))
	info := cfg.Worker
	info.Lease = int64(lease)
	info.LeaseID = strconv.FormatInt(int64(lease), 16)
	s.log = c.log.With(slog.String("worker", info.ID), slog.Int64("lease", info.Lease), slog.String("lease_id", info.LeaseID))
	info.LeaseTTLMS = cfg.TTL.Milliseconds()
	info.ClusterVersion = c.maxVersion()
	b, _ := json.Marshal(info)
	gate, gateOps := c.registrationGate()
	res, err := c.store.Txn(sctx, kv.Txn{If: gate, Then: append([]kv.Op{kv.Put(c.keys.worker(info.ID), b, lease)}, gateOps...)})
	if err == nil && !res.Succeeded {
		err = c.versionRefused(sctx)
	}
	if err == nil && !cfg.Clock.Now().Before(s.ValidUntil()) {
		err = fmt.Errorf("registered after the session's validity deadline (%s after the grant was sent): %w", cfg.Clock.Now().Sub(sent), ErrSessionExpired)
	}
	if err != nil {
		err = late(err)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(parent), time.Second)
		defer cancel()
		_ = c.store.Revoke(rctx, lease)
		return nil, fmt.Errorf("coordinator: register worker %s: %w", info.ID, err)
	}
	s.ctx, s.cancel = context.WithCancelCause(parent)
	s.registered = res.Revision
	go s.heartbeat()
	s.log.Info("session started", slog.Duration("ttl", cfg.TTL))
	return s, nil
}

// Ctx is cancelled when the session ends; context.Cause says why
// (ErrSessionExpired, ErrSessionClosed, or the parent's cause).
func (s *Session) Ctx() context.Context { return s.ctx }

// bound returns ctx, ended also when the session ends, and its cancel
// (which may be called more than once).
func (s *Session) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// Done is closed once the session has ended and its heartbeat stopped.
func (s *Session) Done() <-chan struct{} { return s.done }

// Lease returns the session's lease.
func (s *Session) Lease() kv.LeaseID { return s.lease }

// WorkerID returns the id of the daemon the session belongs to.
func (s *Session) WorkerID() string { return s.cfg.Worker.ID }

// Config returns the session's configuration with defaults filled.
func (s *Session) Config() SessionConfig { return s.cfg }

// ValidUntil is the conservative deadline before which the lease is known
// to be alive. It keeps the monotonic reading of the session clock's
// times (see package time), so time.Until and comparisons with the clock's
// Now measure elapsed time, whatever the wall clock does meanwhile.
func (s *Session) ValidUntil() time.Time { return *s.validUntil.Load() }

func (s *Session) setValidUntil(t time.Time) { s.validUntil.Store(&t) }

// BootDeadline is ValidUntil as a reading of the session's boot clock
// (SessionConfig.BootClock; by default CLOCK_BOOTTIME, which every process
// of the machine reads alike), so that another process can act on it while
// this one cannot: a daemon's exec guard stops the commands of its jobs at
// it when the daemon is paused. It moves with each renewal. ok is false
// without a boot clock (a store whose leases do not expire, another Clock,
// systems other than Linux).
func (s *Session) BootDeadline() (d time.Duration, ok bool) {
	if s.cfg.BootClock == nil {
		return 0, false
	}
	return time.Duration(s.bootValidUntil.Load()), true
}

// Valid reports whether the session has not ended and its deadline has not
// passed. Fenced writes are not attempted when it is false. It does not
// read the boot clock (a system call, and Valid runs before every write):
// a session past its deadline on that clock is ended within suspendCheck
// (watchSuspend), and until then the store's fence refuses the writes of
// a lease that expired.
func (s *Session) Valid() bool {
	return s.ctx.Err() == nil && s.cfg.Clock.Now().Before(s.ValidUntil())
}

// expired reports whether the validity deadline has passed, on the
// session's clock or on its boot clock.
func (s *Session) expired() bool {
	return !s.cfg.Clock.Now().Before(s.ValidUntil()) || s.bootExpired()
}

// lapsed reports whether the session has ended or its deadline has
// passed, on its clock or its boot clock; a deadline passed ends the
// session at once. Unlike Valid, it reads the boot clock (a system call):
// it is for the rare moments that decide whether a handler starts, which
// must not wait for watchSuspend to notice a suspend.
func (s *Session) lapsed() bool {
	if s.ctx.Err() != nil {
		return true
	}
	if s.expired() {
		s.fence("session past its validity deadline when a claim was answered: fencing self", slog.Time("valid_until", s.ValidUntil()))
		return true
	}
	return false
}

// bootExpired reports whether the validity deadline has passed on the boot
// clock, which counts time suspended (false without one).
func (s *Session) bootExpired() bool {
	return s.cfg.BootClock != nil && s.cfg.BootClock() >= time.Duration(s.bootValidUntil.Load())
}

// bootNow reads boot, or returns 0 without one.
func bootNow(boot func() time.Duration) time.Duration {
	if boot == nil {
		return 0
	}
	return boot()
}

// RenewNow asks for a renewal at once, without waiting for the next
// interval: a fenced write that found its ownership key gone suggests the
// lease is gone too, and a renewal that finds it so ends the session.
func (s *Session) RenewNow() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Renewals counts acknowledged renewals (for tests and metrics).
func (s *Session) Renewals() int64 { return s.renewals.Load() }

func (s *Session) end(cause error) {
	s.cancel(cause)
}

// fence ends the session because its lease cannot be counted on, logging
// why at warning level, once: the heartbeat and the boot-clock check may
// both find the deadline passed as the process resumes from a pause.
func (s *Session) fence(msg string, attrs ...any) {
	if s.fenced.CompareAndSwap(false, true) {
		s.log.Warn(msg, attrs...)
	}
	s.end(ErrSessionExpired)
}

// heartbeat renews the lease every RenewInterval (see renew); the send
// time of the renewal acknowledged becomes the new base of the validity
// deadline. Failures are retried quickly until the deadline, at which
// point the session ends.
func (s *Session) heartbeat() {
	defer close(s.done)
	var wg sync.WaitGroup
	defer wg.Wait() // the watches end with s.ctx, as every return here does
	if s.cfg.BootClock != nil {
		wg.Go(s.watchSuspend)
	}
	if s.c.store.Limits().LeasesExpire {
		wg.Go(s.watchRegistration)
	}
	next := s.cfg.RenewInterval()
	retry := min(500*time.Millisecond, s.cfg.RenewInterval()/2)
	for {
		// Never sleep to the deadline: a session that began late (its
		// grant slow to come) or whose renewals failed renews in half
		// the time it has left.
		deadline := s.ValidUntil()
		wait := min(next, deadline.Sub(s.cfg.Clock.Now())/2)
		select {
		case <-s.ctx.Done():
			return
		case <-s.cfg.Clock.After(max(wait, 0)):
		case <-s.kick:
		}
		if s.expired() {
			s.fence("session lease not renewed before its validity deadline: fencing self", slog.Time("valid_until", s.ValidUntil()))
			return
		}
		r := s.renew()
		switch err := r.err; {
		case err == nil && s.expired():
			// Acknowledged, but only after the deadline passed: Valid
			// has been false since, so fenced writes were refused locally
			// and their runs abandoned while their handlers ran on. The
			// deadline passed without an acknowledged renewal: the session
			// ends, as it would have had the reply come a moment later.
			s.fence("session lease renewal acknowledged after its validity deadline: fencing self", slog.Time("valid_until", s.ValidUntil()))
			return
		case err == nil:
			// Never more than asked for; a smaller TTL (a lease's time
			// left, as etcd may answer) moves the deadline less, or not
			// at all. None at all is a lease gone (see renew).
			ttl := min(r.ttl, s.cfg.TTL)
			if v := r.sent.Add(ttl - s.cfg.Margin); v.After(s.ValidUntil()) {
				s.setValidUntil(v)
			}
			if v := int64(r.bootSent + ttl - s.cfg.Margin); v > s.bootValidUntil.Load() {
				s.bootValidUntil.Store(v)
			}
			s.renewals.Add(1)
			next = s.cfg.RenewInterval()
		case errors.Is(err, kv.ErrLeaseNotFound):
			s.fence("session lease is gone: fencing self")
			return
		case s.ctx.Err() != nil:
			return
		default:
			s.log.Warn("session lease renewal failed", slog.Any("err", err), slog.Int("attempts", r.attempts), slog.Time("valid_until", s.ValidUntil()))
			next = retry
		}
	}
}

// renewal is what renew learned: the acknowledged attempt's send times
// (on the session's clock and its boot clock) and the TTL the store gave,
// or the error of the last attempt to fail.
type renewal struct {
	sent     time.Time
	bootSent time.Duration
	ttl      time.Duration
	err      error
	attempts int
}

// maxRenewAttempts bounds the renewal attempts in flight at once.
const maxRenewAttempts = 3

// renew sends a renewal (KeepAliveOnce) and, while none has answered,
// another every half renewal interval, up to maxRenewAttempts at once,
// each on a stream of its own: a store that hangs (an etcd member
// blackholed, or a follower waiting for its lost leader) would otherwise
// hold the only attempt until the deadline, while a new stream may reach
// a member that answers (etcd's client balances streams over the
// endpoints). No attempt is cut short before the deadline: a slow member
// that answers is as good as a fast one. It returns the first
// acknowledgement (or the lease found gone), or once every attempt has
// failed, the last error; it waits for the attempts it cancels.
func (s *Session) renew() renewal {
	ctx, cancel := context.WithDeadline(s.ctx, s.ValidUntil())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	results := make(chan renewal, maxRenewAttempts)
	attempts, inFlight := 0, 0
	send := func() {
		sent, bootSent := s.cfg.Clock.Now(), bootNow(s.cfg.BootClock)
		attempts++
		inFlight++
		wg.Go(func() {
			ttl, err := s.c.store.KeepAliveOnce(ctx, s.lease)
			if err == nil && ttl <= 0 {
				// No time left: etcd answers so for a lease that is
				// gone (clientv3 makes it ErrLeaseNotFound). Taken
				// for the full TTL, it would extend a lost session.
				err = fmt.Errorf("coordinator: renewal answered with TTL %s: %w", ttl, kv.ErrLeaseNotFound)
			}
			results <- renewal{sent: sent, bootSent: bootSent, ttl: ttl, err: err}
		})
	}
	// Real time, not the session's clock: this paces requests on the
	// network, and reads no deadline.
	hedge := time.NewTicker(max(s.cfg.RenewInterval()/2, time.Millisecond))
	defer hedge.Stop()
	send()
	for {
		select {
		case r := <-results:
			inFlight--
			r.attempts = attempts
			if r.err == nil || errors.Is(r.err, kv.ErrLeaseNotFound) || inFlight == 0 {
				return r
			}
		case <-hedge.C:
			if inFlight < maxRenewAttempts {
				send()
			}
		}
	}
}

// suspendCheck is how often a session with a boot clock checks it: the
// monotonic clock's timers wait out their old intervals after a resume,
// so a periodic check is what notices the time spent suspended. It costs
// one wake-up and one clock read per period.
const suspendCheck = time.Second

// watchSuspend ends the session soon after its deadline passes on the boot
// clock (after a suspend, typically), even while the heartbeat waits for
// a renewal or for its next one. It returns when the session ends.
func (s *Session) watchSuspend() {
	tick := time.NewTicker(suspendCheck)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		if s.bootExpired() {
			// Same line as the heartbeat's: the boot clock counts time
			// suspended, which is why the heartbeat has not noticed.
			s.fence("session lease not renewed before its validity deadline: fencing self", slog.String("clock", "boottime"))
			return
		}
	}
}

// watchRegistration asks for a renewal at once (RenewNow) when the
// worker's registration, a key on the session's lease, is deleted: the
// lease ended without this process (an operator's revoke, an etcd leader
// that revoked it after losing its leadership, etcd-io/etcd#15247), and
// the renewal that finds it gone fences the session within moments. The
// next renewal would, up to a third of the TTL later, while the reapers,
// which watch the registrations too, have handed its jobs to others at
// once: for that long, handlers of two runs of a job ran side by side
// (the older one's writes refused). A deletion while no watch is up (one
// ended, and the key went meanwhile) is found by a read before the next
// watch, or, when that read fails, by the next watch, which starts where
// the ended one was. It returns when the session ends.
func (s *Session) watchRegistration() {
	key := s.c.keys.worker(s.cfg.Worker.ID)
	gone := func(evs []kv.Event) bool {
		return slices.ContainsFunc(evs, func(ev kv.Event) bool { return ev.Type == kv.EventDelete && ev.KV.Key == key })
	}
	retry := newWatchRetry(s.c)
	rev := s.registered + 1
	for {
		retry.begin()
		var werr error
		for resp := range s.c.store.Watch(s.ctx, key, rev) {
			if resp.Err != nil {
				werr = resp.Err
				break
			}
			retry.delivered()
			if gone(resp.Events) {
				s.RenewNow()
				return
			}
			if n := len(resp.Events); n > 0 {
				rev = resp.Events[n-1].KV.ModRevision + 1
			}
		}
		if retry.wait(s.ctx, "session registration "+key, werr) != nil {
			return
		}
		rr, err := s.c.store.Range(s.ctx, kv.RangeRequest{Start: key, KeysOnly: true})
		switch {
		case s.ctx.Err() != nil:
			return
		case err != nil:
			// Watch again from where the watch ended, not from now:
			// a deletion meanwhile would be missed until the next
			// renewal. Its history compacted, that watch ends at
			// once and the key is read again.
		case len(rr.KVs) == 0:
			s.RenewNow()
			return
		default:
			rev = rr.Revision + 1
		}
	}
}

// Close ends the session: it stops the heartbeat and revokes the lease,
// which deletes the worker registration and the ownership keys of any job
// still held (those jobs are then reaped by whoever runs the reaper).
// Callers finish or release their runs first. A Close whose revoke failed
// may be called again: it tries the revoke again (until then the lease
// lives on until its TTL runs out). Once the lease is revoked, Close does
// nothing.
func (s *Session) Close(ctx context.Context) error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.revoked {
		return nil
	}
	s.end(ErrSessionClosed)
	<-s.done
	if err := s.c.store.Revoke(ctx, s.lease); err != nil && !errors.Is(err, kv.ErrLeaseNotFound) {
		return fmt.Errorf("coordinator: revoke session lease %d (Close again to retry; else etcd expires it within %s, and an embedded store drops it at its next open): %w", int64(s.lease), s.cfg.TTL, err)
	}
	s.revoked = true
	return nil
}
