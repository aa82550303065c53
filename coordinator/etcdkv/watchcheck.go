package etcdkv

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// DefaultWatchCheck is the default of Options.WatchCheck.
const DefaultWatchCheck = time.Second

// watchStreamKey is the gRPC metadata that names a Store's watch stream:
// clientv3 puts every watch whose context carries the same metadata on
// one gRPC stream, to one member.
const watchStreamKey = "leasehold-watch-stream"

// watchStream is the gRPC stream that a Store's watches share (ADR 0030).
// A member that hangs keeps the stream open and silent: its watches
// report nothing, and nothing says so until gRPC's keepalive closes the
// connection, 15 s later. The Store's checker asks a silent stream for
// progress (an answer that every member sends from memory, without raft
// or the disk); one that does not answer in time is given up: its watches
// end with ErrNoAnswer, and later watches go on a new stream, which the
// client's balancer opens to the next member.
type watchStream struct {
	gen   int
	heard atomic.Int64 // Unix nanoseconds of its last response, to any of its watches
	users int          // watches on it (Store.wmu)
	// ctx ends when it is given up.
	ctx    context.Context
	giveUp context.CancelFunc
}

func newWatchStream(gen int) *watchStream {
	ws := &watchStream{gen: gen}
	ws.ctx, ws.giveUp = context.WithCancel(context.Background())
	return ws
}

// watchContext returns ctx for a new watch, on the current stream, and
// that stream; the caller must call s.leaveStream(ws) once the watch has
// ended. It starts the checker with the first watch.
func (s *Store) watchContext(ctx context.Context) (context.Context, *watchStream) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	ws := s.wstream
	if ws == nil {
		ws = newWatchStream(0)
		s.wstream = ws
	}
	if ws.users == 0 {
		ws.heard.Store(time.Now().UnixNano()) // a stream is silent only while it has watches
	}
	ws.users++
	if !s.checking && s.watchCheck > 0 {
		s.checking = true
		s.wg.Go(s.checkWatches)
	}
	return metadata.AppendToOutgoingContext(ctx, watchStreamKey, strconv.Itoa(ws.gen)), ws
}

func (s *Store) leaveStream(ws *watchStream) {
	s.wmu.Lock()
	ws.users--
	idle := s.wstream.users == 0
	s.wmu.Unlock()
	if idle {
		select {
		case s.watchesIdle <- struct{}{}:
		default:
		}
	}
}

// heardFrom records a response on ws.
func (ws *watchStream) heardFrom() { ws.heard.Store(time.Now().UnixNano()) }

// checkWatches runs while the store has watches (and until Close): every
// half WatchCheck it asks the current stream for progress when it has been
// silent for WatchCheck, and gives it up when nothing came for WatchCheck
// after asking.
func (s *Store) checkWatches() {
	tick := time.NewTicker(s.watchCheck / 2)
	defer tick.Stop()
	var asked int64 // when askedOf was asked, in Unix nanoseconds
	var askedOf *watchStream
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		case <-s.watchesIdle:
		}
		s.wmu.Lock()
		ws := s.wstream
		if ws.users == 0 {
			s.checking = false // the next watch starts another
			s.wmu.Unlock()
			return
		}
		now, heard, check := time.Now().UnixNano(), ws.heard.Load(), int64(s.watchCheck)
		silent := now-heard >= check
		if silent && askedOf == ws && heard < asked && now-asked >= check {
			ws.giveUp()
			s.wstream = newWatchStream(ws.gen + 1)
			s.wmu.Unlock()
			askedOf = nil
			continue
		}
		ask := silent && (askedOf != ws || heard >= asked)
		s.wmu.Unlock()
		if !ask {
			continue
		}
		asked, askedOf = now, ws
		// It only queues the request on the stream; a stream that no
		// longer exists is opened again by it, and answers or is given
		// up in turn.
		ctx, cancel := context.WithTimeout(s.ctx, s.watchCheck)
		ctx = metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), watchStreamKey, strconv.Itoa(ws.gen))
		_ = s.cli.RequestProgress(ctx)
		cancel()
	}
}
