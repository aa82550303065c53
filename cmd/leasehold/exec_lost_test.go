package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/testutil"
)

// A command of a run that was lost (its daemon's session reached its
// deadline) and that ignores SIGTERM is killed before the lease can
// expire, not execKillGrace later: with a short --lease-ttl another daemon
// would otherwise start the job again while the command still runs.
func TestExecLostRunKilledBeforeLeaseCanExpire(t *testing.T) {
	old := execKillGrace
	execKillGrace = time.Hour // a command of a run not lost keeps this
	t.Cleanup(func() { execKillGrace = old })
	for _, cause := range []error{coordinator.ErrSessionExpired} {
		t.Run(fmt.Sprint(cause), func(t *testing.T) {
			l := newLifeLine(t)
			spec, err := parseExec(fmt.Sprintf(`t=exec 3>%s; trap "" TERM; echo $$ >%s; echo >&3; while :; do sleep 1; done`, l.path, l.pidFile))
			if err != nil {
				t.Fatal(err)
			}
			spec.lostGrace = execLostGrace(2 * time.Second)
			if spec.lostGrace <= 0 || spec.lostGrace >= coordinator.DefaultLeaseMargin(2*time.Second) {
				t.Fatalf("lost-run grace at a 2s TTL is %s, want above 0 and below the session's margin %s", spec.lostGrace, coordinator.DefaultLeaseMargin(2*time.Second))
			}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			errc := make(chan error, 1)
			go func() { errc <- execHandler(spec, testutil.QuietLogger(t))(ctx, execJob(`{}`)) }()
			<-l.started
			cancel(fmt.Errorf("worker: session ended: %w", cause))
			select {
			case <-errc:
			case <-time.After(30 * time.Second):
				t.Fatal("a lost run's command that ignores SIGTERM was not killed (it waited for execKillGrace)")
			}
			l.waitGone(t, "lost run")
		})
	}
	// And a cancel that is not a loss keeps the full grace.
	if g := (execSpec{lostGrace: time.Millisecond}).killGrace(context.Background()); g != execKillGrace {
		t.Errorf("kill grace of a run not lost: %s, want execKillGrace %s", g, execKillGrace)
	}
}
