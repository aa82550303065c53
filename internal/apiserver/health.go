package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// readyTimeout bounds the store read of one /readyz.
const readyTimeout = 2 * time.Second

// ReadyResponse is the body of GET /readyz.
type ReadyResponse struct {
	Status string `json:"status"` // ready or unready
	Error  string `json:"error,omitempty"`
	Store  string `json:"store"`
	// Lease says how long the worker's session lease is still known to be
	// valid; absent without a worker.
	Lease         string `json:"lease,omitempty"`
	Worker        string `json:"worker,omitempty"`
	SessionsLost  int64  `json:"sessions_lost,omitempty"`
	RunningJobs   int    `json:"running_jobs"`
	ValidUntilUTC string `json:"valid_until,omitempty"`
}

// readyMargin is how long the session's lease must still be known to be
// valid for the daemon to be ready: a quarter of its TTL. A session renews
// every third of its TTL and is valid for the TTL less a fifth after each
// acknowledged renewal, so a healthy daemon never has less than about
// half its TTL left; less than a quarter means renewals are failing.
func readyMargin(ttl time.Duration) time.Duration { return ttl / 4 }

// ready answers /readyz: 200 when the store answers a read within
// readyTimeout and the worker's session is valid with at least
// readyMargin to spare; 503 otherwise (the store is unreachable, or the
// daemon lost its lease and fenced itself). An orchestrator that sees 503
// for long restarts the daemon.
func (a *Handler) ready(w http.ResponseWriter, r *http.Request) {
	resp := ReadyResponse{Status: "ready", Store: "ok"}
	var problems []string
	if a.draining.Load() {
		problems = append(problems, "the daemon is stopping: it drains its running jobs and claims no more")
	}
	if err := a.probe.check(r.Context()); err != nil {
		resp.Store = "unreachable: " + OneLine(err.Error())
		problems = append(problems, "the store did not answer a read within "+a.probe.timeout.String())
	}
	if wk := a.cfg.Worker; wk != nil {
		resp.Worker, resp.SessionsLost, resp.RunningJobs = wk.ID(), wk.SessionsLost(), wk.Running()
		s := wk.Session()
		switch {
		case s == nil:
			resp.Lease = "none"
			problems = append(problems, "the worker has no session yet")
		case !s.Valid():
			resp.Lease = "lost"
			problems = append(problems, "the session's lease is lost: running jobs were fenced; a new session is being started")
		default:
			left := time.Until(s.ValidUntil())
			resp.Lease = fmt.Sprintf("valid for %s", left.Round(time.Millisecond))
			resp.ValidUntilUTC = s.ValidUntil().UTC().Format(time.RFC3339Nano)
			if margin := readyMargin(s.Config().TTL); left < margin {
				problems = append(problems, fmt.Sprintf("the session's lease is valid for only %s (under %s): renewals are failing", left.Round(time.Millisecond), margin))
			}
		}
	}
	status := http.StatusOK
	if len(problems) > 0 {
		status = http.StatusServiceUnavailable
		resp.Status = "unready"
		resp.Error = problems[0]
		for _, p := range problems[1:] {
			resp.Error += "; " + p
		}
	}
	WriteJSON(w, status, resp)
}

// errProbeStopped answers the probes that come after the API's stop.
var errProbeStopped = errors.New("the daemon is stopping")

// storeProbe runs the store read of /readyz. The read runs in a goroutine
// of its own and a probe waits for it at most timeout, so that a store
// that does not watch its context (a local store's read waits for its lock
// while a write stall holds it) cannot hang /readyz: the probe answers
// 503 instead. At most one read is in flight: a probe that finds one
// awaits its answer rather than starting another. stop awaits the read
// left in flight.
type storeProbe struct {
	store   kv.Store
	timeout time.Duration
	// ctx is the parent of the reads, cancelled by stop.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	cur     *probeRead // in flight; nil if none
	stopped bool
}

// probeRead is one read of the store; done is closed once err is set.
type probeRead struct {
	done chan struct{}
	err  error
}

func newStoreProbe(store kv.Store, timeout time.Duration) *storeProbe {
	p := &storeProbe{store: store, timeout: timeout}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// check reads the store, or awaits the read in flight, for at most
// p.timeout or until ctx is done.
func (p *storeProbe) check(ctx context.Context) error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return errProbeStopped
	}
	rd := p.cur
	if rd == nil {
		rd = &probeRead{done: make(chan struct{})}
		p.cur = rd
		go p.read(rd)
	}
	p.mu.Unlock()
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	select {
	case <-rd.done:
		return rd.err
	case <-t.C:
		return fmt.Errorf("no answer within %s", p.timeout)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (p *storeProbe) read(rd *probeRead) {
	defer close(rd.done)
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	// A one-key read: linearizable on etcd, so it needs a quorum.
	_, rd.err = p.store.Range(ctx, kv.RangeRequest{Start: "/leasehold-readyz"})
	p.mu.Lock()
	p.cur = nil
	p.mu.Unlock()
}

// stop cancels the read in flight, starts no other, and waits for it to
// return until ctx is done.
func (p *storeProbe) stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopped = true
	rd := p.cur
	p.mu.Unlock()
	p.cancel()
	if rd == nil {
		return nil
	}
	select {
	case <-rd.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the store's read of /readyz has not returned: %w", context.Cause(ctx))
	}
}
