package etcdnode

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Once the member is stopping, the errors of the listeners that Close
// closes are logged at level info; other errors, and the same errors
// before the stop, keep their level.
func TestQuietStopCoreLevels(t *testing.T) {
	obs, logs := observer.New(zapcore.InfoLevel)
	stopping := new(atomic.Bool)
	lg := zap.New(&quietStopCore{Core: obs, stopping: stopping})
	closed := fmt.Errorf("accept tcp 127.0.0.1:2379: %w", net.ErrClosed)
	disk := errors.New("write: no space left on device")

	lg.Error("serve failed", zap.Error(closed))
	stopping.Store(true)
	lg.Error("serve failed", zap.Error(closed))
	lg.With(zap.String("member", "m1")).Warn("stopping grpc server due to error", zap.Error(closed))
	lg.Error("serve failed", zap.Error(disk))
	lg.Error("no error field")
	// What the client servers of a member stopped before it was ready return.
	lg.Error("setting up serving from embedded etcd failed.", zap.Error(errors.New(errServerStopping)))

	want := []zapcore.Level{zapcore.ErrorLevel, zapcore.InfoLevel, zapcore.InfoLevel, zapcore.ErrorLevel, zapcore.ErrorLevel, zapcore.InfoLevel}
	got := logs.All()
	if len(got) != len(want) {
		t.Fatalf("%d entries logged, want %d: %v", len(got), len(want), got)
	}
	for i, e := range got {
		if e.Level != want[i] {
			t.Errorf("entry %d %q (%v): level %v, want %v", i, e.Message, e.ContextMap(), e.Level, want[i])
		}
	}
}

// At etcd's default level, error, what a stop downgrades is not logged.
func TestQuietStopCoreDropsBelowLevel(t *testing.T) {
	obs, logs := observer.New(zapcore.ErrorLevel)
	stopping := new(atomic.Bool)
	stopping.Store(true)
	lg := zap.New(&quietStopCore{Core: obs, stopping: stopping})
	lg.Error("serve failed", zap.Error(fmt.Errorf("accept: %w", net.ErrClosed)))
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d entries logged at level error for a closed listener during a stop: %v", n, logs.All())
	}
}
