package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/worker"
)

// outageBound bounds how long a test waits for what must happen; it fails
// the test, it times nothing.
const outageBound = 20 * time.Second

// gate holds the requests that reach it while it is cut, until it is
// healed or their context ends (a store without quorum answers nothing).
type gate struct {
	mu sync.Mutex
	up chan struct{} // nil: open
}

func (g *gate) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.up == nil {
		g.up = make(chan struct{})
	}
}

func (g *gate) heal() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.up != nil {
		close(g.up)
		g.up = nil
	}
}

// pass waits while the gate is cut; it reports whether it waited.
func (g *gate) pass(ctx context.Context) (waited bool, err error) {
	g.mu.Lock()
	up := g.up
	g.mu.Unlock()
	if up == nil {
		return false, nil
	}
	select {
	case <-up:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// outageStore cuts reads and writes (data), the replies to writes
// (reply: the write is applied, its caller is not told), and lease
// requests (lease) apart, and says when a read or write, or a reply, is
// held.
type outageStore struct {
	kv.Store
	data, reply, lease gate
	held, replyHeld    chan struct{}
}

func newOutageStore() *outageStore {
	return &outageStore{held: make(chan struct{}, 1), replyHeld: make(chan struct{}, 1)}
}

// holdAt waits while g is cut, saying so on held first.
func holdAt(ctx context.Context, g *gate, held chan struct{}) error {
	g.mu.Lock()
	cut := g.up != nil
	g.mu.Unlock()
	if cut {
		signal(held)
	}
	_, err := g.pass(ctx)
	return err
}

func (s *outageStore) holdData(ctx context.Context) error { return holdAt(ctx, &s.data, s.held) }

func (s *outageStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if err := s.holdData(ctx); err != nil {
		return kv.RangeResult{}, err
	}
	return s.Store.Range(ctx, r)
}

func (s *outageStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if err := s.holdData(ctx); err != nil {
		return kv.TxnResult{}, err
	}
	res, err := s.Store.Txn(ctx, t)
	if herr := holdAt(ctx, &s.reply, s.replyHeld); herr != nil {
		return kv.TxnResult{}, herr
	}
	return res, err
}

func (s *outageStore) Grant(ctx context.Context, ttl time.Duration) (kv.LeaseID, error) {
	if _, err := s.lease.pass(ctx); err != nil {
		return 0, err
	}
	return s.Store.Grant(ctx, ttl)
}

func (s *outageStore) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	if _, err := s.lease.pass(ctx); err != nil {
		return 0, err
	}
	return s.Store.KeepAliveOnce(ctx, id)
}

func (s *outageStore) Revoke(ctx context.Context, id kv.LeaseID) error {
	if _, err := s.lease.pass(ctx); err != nil {
		return err
	}
	return s.Store.Revoke(ctx, id)
}

// logRecords is a slog.Handler that sends every record on a channel.
type logRecords chan slog.Record

func (l logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l logRecords) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- r.Clone():
	default:
	}
	return nil
}
func (l logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logRecords) WithGroup(string) slog.Handler      { return l }

// await returns the next record with message msg.
func (l logRecords) await(t *testing.T, msg string) slog.Record {
	t.Helper()
	bound := time.After(outageBound)
	for {
		select {
		case r := <-l:
			if r.Message == msg {
				return r
			}
		case <-bound:
			t.Fatalf("no log %q", msg)
		}
	}
}

func attrOf(r slog.Record, key string) string {
	v := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
		}
		return true
	})
	return v
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func awaitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(outageBound):
		t.Fatalf("never: %s", what)
	}
}

// outageEnv is a worker over an outageStore, with a coordinator that
// enqueues past the outage.
type outageEnv struct {
	*env
	st   *outageStore
	raw  *coordinator.Coordinator
	logs logRecords
}

func newOutageEnv(t *testing.T) *outageEnv {
	st := newOutageStore()
	e := newEnv(t, func(s kv.Store) kv.Store { st.Store = s; return st })
	raw, err := coordinator.New(st.Store, coordinator.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return &outageEnv{env: e, st: st, raw: raw, logs: make(logRecords, 1024)}
}

func (o *outageEnv) config(cfg worker.Config) worker.Config {
	cfg.LeaseTTL = coordinator.MinLeaseTTL
	cfg.PollInterval = time.Hour
	cfg.ReapInterval = time.Hour
	cfg.Logger = slog.New(o.logs)
	return cfg
}

// cutWithClaimInFlight cuts the store off and enqueues a job past the
// outage: the worker's claim of it is held.
func (o *outageEnv) cutWithClaimInFlight(t *testing.T) {
	o.st.data.cut()
	o.st.lease.cut()
	if _, err := o.raw.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	awaitSignal(t, o.st.held, "a claim reached the cut store")
}

func stopChecked(t *testing.T, w *worker.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// TestSessionReplacedWhileClaimInFlight: when the session fences itself
// during an outage, the worker starts replacing it at once, although a
// claim made before is held by the store; each attempt at a new session is
// bounded and logged (an unbounded grant said nothing for the whole
// outage). The held claim, applied by the store but its reply lost, ends
// with its session and starts nothing: its job is re-queued once the old
// lease is revoked and runs once, under the new session.
func TestSessionReplacedWhileClaimInFlight(t *testing.T) {
	o := newOutageEnv(t)
	var runs, abandons atomic.Int32
	completed := make(chan struct{}, 1)
	w := o.worker(o.config(worker.Config{
		OnOutcome: func(out worker.Outcome) {
			switch out.Op {
			case "abandon":
				abandons.Add(1)
			case "complete":
				signal(completed)
			}
		},
	}), map[string]worker.Handler{"k": func(context.Context, *worker.Job) error {
		runs.Add(1)
		return nil
	}})
	o.st.reply.cut()
	o.st.lease.cut()
	if _, err := o.raw.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	awaitSignal(t, o.st.replyHeld, "the claim was applied and its reply held")
	o.logs.await(t, "session ended: running jobs were interrupted and fenced; starting a new session")
	r := o.logs.await(t, "cannot start a new session; retrying")
	if err := attrOf(r, "err"); !strings.Contains(err, "no answer within") || attrOf(r, "in") == "" {
		t.Fatalf("failed attempt logged with err %q, in %q; want the bound it missed and the next delay", err, attrOf(r, "in"))
	}
	o.st.reply.heal()
	o.st.lease.heal()
	awaitSignal(t, completed, "the job completed under the new session")
	stopChecked(t, w)
	if n := runs.Load(); n != 1 || abandons.Load() != 0 {
		t.Fatalf("%d runs, %d abandoned; want 1 run and none abandoned (the lost claim's run must not start)", n, abandons.Load())
	}
	if n := w.SessionsLost(); n != 1 {
		t.Fatalf("SessionsLost = %d, want 1", n)
	}
}

// TestSelfFencingCountedAsItHappens: a session that fences itself counts
// as lost at once, even while the claim loop waits on a claim the store
// holds and Stop comes before the store answers.
func TestSelfFencingCountedAsItHappens(t *testing.T) {
	o := newOutageEnv(t)
	w := o.worker(o.config(worker.Config{}), map[string]worker.Handler{"k": func(context.Context, *worker.Job) error { return nil }})
	s := w.Session()
	o.cutWithClaimInFlight(t)
	awaitSignal(t, s.Ctx().Done(), "the session fenced itself")
	o.st.lease.heal() // Stop's revoke answers; the claim stays held
	stopChecked(t, w)
	if n := w.SessionsLost(); n != 1 {
		t.Fatalf("SessionsLost = %d after one self-fencing, want 1", n)
	}
}

// TestClosedSessionNotCountedAsFencing: a session closed on purpose is
// replaced, but it was not lost: leasehold_self_fencing_total counts
// self-fencing only.
func TestClosedSessionNotCountedAsFencing(t *testing.T) {
	o := newOutageEnv(t)
	w := o.worker(o.config(worker.Config{}), map[string]worker.Handler{"k": func(context.Context, *worker.Job) error { return nil }})
	if err := w.Session().Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	o.logs.await(t, "new session started")
	stopChecked(t, w)
	if n := w.SessionsLost(); n != 0 {
		t.Fatalf("SessionsLost = %d after a session closed on purpose, want 0", n)
	}
}
