package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/etcdtest"
)

// A daemon started while etcd is out of space (its NOSPACE alarm refuses
// the session's lease) waits for room, as it waits for a quorum, saying
// what to do, and starts once the alarm is disarmed: it exited 1 with
// "starting the worker: grant session lease: ... database space exceeded",
// which told the operator neither what to do nor that a restart under the
// alarm would fail the same way.
func TestDaemonStartedUnderNoSpaceWaitsForRoom(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithQuota(4<<20))
	cli := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcdtest.FillQuota(ctx, t, cli)
	addr := closedPort(t)
	p := spStart(t, "daemon", binPath, "daemon", "--etcd", srv.Endpoint(), "--listen", addr, "--lease-ttl", "2s", "--log-format", "json")
	_, at := p.waitLog(t, 0, "a warning that it waits for room in etcd", func(l spLine) bool {
		return strings.HasPrefix(l.Msg, "cannot start a session: etcd is out of space") && strings.Contains(l.Msg, "disarm")
	})
	if code, r := getReady(t, "http://"+addr); code != http.StatusServiceUnavailable || !strings.Contains(r.Error, "no session yet") {
		t.Errorf("/readyz while the daemon waits for room: %d %+v, want 503 saying it has no session yet", code, r)
	}
	etcdtest.MakeRoom(ctx, t, cli, srv.Endpoint())
	p.waitLog(t, at, "the worker's start", func(l spLine) bool { return l.Msg == "worker started" })
	p.stopCleanly(t)
}

// An enqueue refused under etcd's NOSPACE alarm says so in one line and
// what to do, ending with the step every remedy needs: disarming the alarm
// (it read "..., then disarm the alarm (etcdctl alarm disarm), or raise
// the members' --quota-backend-bytes", as if a larger quota were enough).
func TestSharedEnqueueUnderNoSpaceSaysWhatToDo(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.WithQuota(4<<20))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	etcdtest.FillQuota(ctx, t, srv.Client(t))
	r := runCLI(t, nil, "", "enqueue", "echo", "{}", "--etcd", srv.Endpoint())
	checkOneLineError(t, "enqueue under NOSPACE", r, 1, "etcd is out of space")
	for _, want := range []string{"was applied all the same, so retry an enqueue with the same unique_key", "etcdctl defrag", "or raise their --quota-backend-bytes, then disarm the alarm (etcdctl alarm disarm)"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("enqueue under NOSPACE: %q does not say %q", r.stderr, want)
		}
	}
}
