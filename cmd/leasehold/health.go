package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// readyTimeout bounds the store read of one /readyz.
const readyTimeout = 2 * time.Second

// readyResponse is the body of GET /readyz.
type readyResponse struct {
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
func (a *api) ready(w http.ResponseWriter, r *http.Request) {
	resp := readyResponse{Status: "ready", Store: "ok"}
	var problems []string
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	// A one-key read: linearizable on etcd, so it needs a quorum.
	if _, err := a.cfg.Coord.Store().Range(ctx, kv.RangeRequest{Start: "/leasehold-readyz"}); err != nil {
		resp.Store = "unreachable: " + oneLine(err.Error())
		problems = append(problems, "the store did not answer a read within "+readyTimeout.String())
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
	writeJSON(w, status, resp)
}
