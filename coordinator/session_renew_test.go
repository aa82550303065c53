package coordinator_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/coordtest"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/localstore"
)

// sessionFailBound bounds waits for things that must happen without the
// session's clock moving: how long a test waits before it fails, never a
// measure.
const sessionFailBound = 20 * time.Second

// timerClock is a coordtest.Clock that reports the due time of every After
// it hands out: a test learns that the heartbeat has come back to wait.
type timerClock struct {
	*coordtest.Clock
	timers chan time.Time
}

func newTimerClock() *timerClock {
	return &timerClock{Clock: coordtest.NewClock(time.Now()), timers: make(chan time.Time, 1024)}
}

func (c *timerClock) After(d time.Duration) <-chan time.Time {
	due := c.Now().Add(d)
	ch := c.Clock.After(d)
	c.timers <- due
	return ch
}

func (c *timerClock) next(t *testing.T) time.Time {
	t.Helper()
	select {
	case due := <-c.timers:
		return due
	case <-time.After(sessionFailBound):
		t.Fatal("no timer set: the heartbeat did not come back to wait")
		return time.Time{}
	}
}

// sessionOn opens a session over store with cfg (a worker id is added) and
// closes it when the test ends.
func sessionOn(t testing.TB, store kv.Store, cfg coordinator.SessionConfig) *coordinator.Session {
	t.Helper()
	c, err := coordinator.New(store, coordinator.Config{Namespace: "s", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Worker = coordinator.WorkerInfo{ID: coordinator.NewWorkerID()}
	s, err := c.NewSession(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

func openLocalstore(t testing.TB) kv.Store {
	t.Helper()
	s, err := localstore.Open(t.TempDir(), localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// hangStore's first KeepAliveOnce hangs until its context ends, as a
// renewal sent to a blackholed member, or to a follower cut off from its
// leader, does; the session's clock moves on a little meanwhile, so that
// a later attempt's send time differs from it. The calls after it reach
// the store.
type hangStore struct {
	kv.Store
	clock *coordtest.Clock
	calls atomic.Int64
	mu    sync.Mutex
	sent  []time.Time // on the session's clock, when each call started
}

func (s *hangStore) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	s.mu.Lock()
	s.sent = append(s.sent, s.clock.Now())
	s.mu.Unlock()
	if s.calls.Add(1) > 1 {
		return s.Store.KeepAliveOnce(ctx, id)
	}
	s.clock.Advance(100 * time.Millisecond)
	<-ctx.Done()
	return 0, ctx.Err()
}

// A renewal that hangs (a blackholed etcd member, a follower without its
// leader) must not use up the session's validity window: while it has no
// answer, another attempt goes out every half renewal interval, on a
// stream of its own that may reach another member, and the first
// acknowledgement renews the lease, from its own send time. Before, the
// one attempt ran until the validity deadline and the daemon fenced
// itself while the store was healthy.
func TestSessionRenewsPastHungRenewal(t *testing.T) {
	const ttl = 3 * time.Second // renew every 1 s; deadline 2.4 s after a send
	clock := newTimerClock()
	hs := &hangStore{Store: openLocalstore(t), clock: clock.Clock}
	s := sessionOn(t, hs, coordinator.SessionConfig{TTL: ttl, Clock: clock})
	clock.next(t) // the heartbeat waits for its first renewal
	clock.Advance(s.Config().RenewInterval())
	clock.next(t) // renewed: the heartbeat waits for the next renewal
	if n := hs.calls.Load(); n != 2 {
		t.Fatalf("%d renewals sent, want 2 (the hung one, and one beside it)", n)
	}
	if n := s.Renewals(); n != 1 {
		t.Fatalf("%d renewals acknowledged, want the second attempt's (session cause %v): one hung renewal held the session", n, context.Cause(s.Ctx()))
	}
	hs.mu.Lock()
	second := hs.sent[1]
	hs.mu.Unlock()
	if want := second.Add(ttl - s.Config().Margin); !s.ValidUntil().Equal(want) {
		t.Fatalf("valid until %v, want the second attempt's send time + TTL − margin = %v", s.ValidUntil(), want)
	}
	if !s.Valid() {
		t.Fatalf("session not valid after the second attempt renewed it (cause %v)", context.Cause(s.Ctx()))
	}
}

// bootClock is a fake boot clock (see SessionConfig.BootClock): it moves
// only when told to, as after a suspend.
type bootClock struct{ now atomic.Int64 }

func (b *bootClock) read() time.Duration     { return time.Duration(b.now.Load()) }
func (b *bootClock) advance(d time.Duration) { b.now.Add(int64(d)) }

// A system suspended for longer than the validity window (a laptop lid, a
// VM paused) resumes with the monotonic clock where it was, while the
// store's TTL ran on and the lease is gone. The session counts that time
// on its boot clock: it is invalid at once and ends promptly, with
// ErrSessionExpired, although its monotonic clock has not moved and no
// renewal is due. Before, it stayed valid, its handlers running, for the
// rest of its old window.
func TestSessionEndsAfterSuspend(t *testing.T) {
	const ttl = 30 * time.Second
	boot := &bootClock{}
	boot.advance(time.Hour)
	s := sessionOn(t, openLocalstore(t), coordinator.SessionConfig{TTL: ttl, Clock: coordtest.NewClock(time.Now()), BootClock: boot.read})
	if !s.Valid() {
		t.Fatal("new session not valid")
	}
	boot.advance(ttl) // suspended for a TTL; the monotonic clock stood still
	select {
	case <-s.Done():
	case <-time.After(sessionFailBound):
		t.Fatal("session did not end after the system was suspended for its TTL")
	}
	if cause := context.Cause(s.Ctx()); !errors.Is(cause, coordinator.ErrSessionExpired) {
		t.Fatalf("session ended with %v, want ErrSessionExpired", cause)
	}
}

// The deadline on the boot clock moves with each acknowledged renewal, from
// the boot clock's reading when it was sent: a session that renews stays
// alive however long it runs, and one past that deadline ends at its next
// renewal, before sending it.
func TestSessionBootDeadlineFollowsRenewals(t *testing.T) {
	const ttl = 30 * time.Second // deadline 24 s after a send
	boot := &bootClock{}
	clock := newTimerClock()
	s := sessionOn(t, openLocalstore(t), coordinator.SessionConfig{TTL: ttl, Clock: clock, BootClock: boot.read})
	clock.next(t) // the heartbeat waits for its first renewal
	boot.advance(10 * time.Second)
	s.RenewNow()
	clock.next(t)                  // renewed; the heartbeat waits again
	boot.advance(20 * time.Second) // 30 s after the start, 20 s after the renewal
	s.RenewNow()
	clock.next(t)
	if n := s.Renewals(); n != 2 || s.Ctx().Err() != nil {
		t.Fatalf("%d renewals acknowledged, want 2 (session cause %v): the boot-clock deadline did not move with the first renewal", n, context.Cause(s.Ctx()))
	}
	boot.advance(24 * time.Second) // TTL − margin after the second renewal
	s.RenewNow()
	select {
	case <-s.Done():
	case <-time.After(sessionFailBound):
		t.Fatal("session still alive TTL − margin after its last renewal, on the boot clock")
	}
	if cause := context.Cause(s.Ctx()); !errors.Is(cause, coordinator.ErrSessionExpired) {
		t.Fatalf("session ended with %v, want ErrSessionExpired", cause)
	}
	if n := s.Renewals(); n != 2 {
		t.Fatalf("%d renewals acknowledged, want no third: the session was past its deadline", n)
	}
}

// slowGrantStore's Grant waits until its context ends (hang), or moves the
// session's clock on by late before it answers (a store that regained its
// quorum answering a grant it held meanwhile).
type slowGrantStore struct {
	kv.Store
	hang    bool
	clock   *coordtest.Clock
	late    time.Duration
	granted atomic.Int64 // the lease granted, if any
}

func (s *slowGrantStore) Grant(ctx context.Context, ttl time.Duration) (kv.LeaseID, error) {
	if s.hang {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	id, err := s.Store.Grant(ctx, ttl)
	s.granted.Store(int64(id))
	s.clock.Advance(s.late)
	return id, err
}

// A session is valid for TTL − margin from its grant's send time. A grant
// the store holds longer than that (etcd without quorum answers once it
// has it back) must not start a session already past its deadline, which
// fenced itself at once (a second self-fence in the logs, after every
// outage): NewSession gives up after that long, or refuses a grant that
// came too late and revokes its lease, and the caller tries again.
func TestNewSessionRefusesGrantPastItsWindow(t *testing.T) {
	const ttl = 2 * time.Second
	t.Run("hung", func(t *testing.T) {
		hs := &slowGrantStore{Store: openLocalstore(t), hang: true}
		hc, err := coordinator.New(hs, coordinator.Config{Namespace: "s", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := hc.NewSession(context.Background(), coordinator.SessionConfig{TTL: ttl, Worker: coordinator.WorkerInfo{ID: coordinator.NewWorkerID()}})
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("NewSession on a store that never answers: %v, want a deadline error", err)
			}
		case <-time.After(sessionFailBound):
			t.Fatal("NewSession waited for a grant longer than the session could be valid")
		}
	})
	t.Run("late", func(t *testing.T) {
		store := openLocalstore(t)
		clock := coordtest.NewClock(time.Now())
		ls := &slowGrantStore{Store: store, clock: clock, late: ttl}
		lc, err := coordinator.New(ls, coordinator.Config{Namespace: "s", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		s, err := lc.NewSession(context.Background(), coordinator.SessionConfig{TTL: ttl, Clock: clock, Worker: coordinator.WorkerInfo{ID: coordinator.NewWorkerID()}})
		if err == nil {
			t.Fatalf("NewSession with a grant answered a TTL late returned a session valid until %v (now %v), want an error", s.ValidUntil(), clock.Now())
		}
		if !errors.Is(err, coordinator.ErrSessionExpired) {
			t.Fatalf("NewSession with a grant answered a TTL late: %v, want ErrSessionExpired", err)
		}
		if _, err := store.KeepAliveOnce(context.Background(), kv.LeaseID(ls.granted.Load())); !errors.Is(err, kv.ErrLeaseNotFound) {
			t.Fatalf("the late grant's lease was not revoked: keep-alive says %v", err)
		}
	})
}

// A worker's registration carries its lease id as a string too: ids are
// above 2^53, which JSON readers that hold numbers as doubles (jq 1.6,
// JavaScript) round, so the number alone names another lease.
func TestWorkerRegistrationCarriesLeaseIDString(t *testing.T) {
	store := openLocalstore(t)
	s := sessionOn(t, store, coordinator.SessionConfig{})
	c, err := coordinator.New(store, coordinator.Config{Namespace: "s", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := c.Workers(context.Background())
	if err != nil || len(ws) != 1 {
		t.Fatalf("Workers: %v, %v", ws, err)
	}
	if want := strconv.FormatInt(int64(s.Lease()), 16); ws[0].LeaseID != want || ws[0].Lease != int64(s.Lease()) {
		t.Fatalf("registration lease %d, lease_id %q; want %d and %q", ws[0].Lease, ws[0].LeaseID, s.Lease(), want)
	}
}

// A session whose grant came late, with less than a renewal interval left
// before its deadline, renews before that deadline: it used to sleep until
// it and fence itself without a single renewal.
func TestSessionBegunLateRenewsBeforeItsDeadline(t *testing.T) {
	const ttl = 3 * time.Second // deadline 2.4 s after the grant's send; renew every 1 s
	clock := newTimerClock()
	ls := &slowGrantStore{Store: openLocalstore(t), clock: clock.Clock, late: 2 * time.Second}
	s := sessionOn(t, ls, coordinator.SessionConfig{TTL: ttl, Clock: clock})
	due := clock.next(t)
	if !due.Before(s.ValidUntil()) {
		t.Fatalf("first renewal due at %v, at or after the deadline %v: the session would fence itself unrenewed", due, s.ValidUntil())
	}
	clock.Advance(due.Sub(clock.Now()))
	clock.next(t) // renewed; the heartbeat waits again
	if n := s.Renewals(); n != 1 || !s.Valid() {
		t.Fatalf("%d renewals, valid %v (cause %v); want one renewal and a live session", n, s.Valid(), context.Cause(s.Ctx()))
	}
}

// expiringStore is a store whose leases expire on their own, as etcd's do.
type expiringStore struct{ kv.Store }

func (s expiringStore) Limits() kv.Limits {
	l := s.Store.Limits()
	l.LeasesExpire = true
	return l
}

// The boot clock counts time suspended against the deadline only where the
// store's leases expire on their own: a localstore lease outlives a
// suspend (only a revoke or the next open ends it), and ending the session
// there would interrupt every running job for nothing.
func TestBootClockOnlyWhereLeasesExpire(t *testing.T) {
	if s := sessionOn(t, openLocalstore(t), coordinator.SessionConfig{}); s.Config().BootClock != nil {
		t.Error("a session on localstore counts time suspended against its deadline")
	}
	s := sessionOn(t, expiringStore{openLocalstore(t)}, coordinator.SessionConfig{})
	if got := s.Config().BootClock != nil; got != (runtime.GOOS == "linux") {
		t.Errorf("a session on a store whose leases expire has a boot clock: %v, want %v on %s", got, runtime.GOOS == "linux", runtime.GOOS)
	}
}

// A lease ended without the session (an operator's revoke, an etcd leader
// that revoked it after losing its leadership) ends the session within
// moments: its registration's deletion makes it renew at once, and the
// renewal finds the lease gone. It ended at the next renewal, up to a
// third of the TTL later (10 s here), while reapers had already handed
// its jobs to others.
func TestSessionEndsAtOnceWhenItsLeaseIsRevokedElsewhere(t *testing.T) {
	srv := etcdtest.Start(t)
	etcdStore := etcdkv.New(srv.Client(t), etcdkv.Options{})
	t.Cleanup(func() { _ = etcdStore.Close() })
	for name, store := range map[string]kv.Store{"etcd": etcdStore, "expiring localstore": expiringStore{openLocalstore(t)}} {
		t.Run(name, func(t *testing.T) {
			s := sessionOn(t, store, coordinator.SessionConfig{TTL: 30 * time.Second})
			if err := store.Revoke(context.Background(), s.Lease()); err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.Ctx().Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the session lives on 5 s after its lease was revoked (its next renewal is 10 s away)")
			}
			if cause := context.Cause(s.Ctx()); !errors.Is(cause, coordinator.ErrSessionExpired) {
				t.Fatalf("session ended with %v, want ErrSessionExpired", cause)
			}
		})
	}
}
