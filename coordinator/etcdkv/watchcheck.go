package etcdkv

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
// connection, 15 s later. The Store's checker sets up a watch on a stream
// that has been silent for a while (the member answers that at once,
// from memory, however quiet the cluster; etcd does not answer a progress
// request while a watch waits for a future revision); a stream whose
// member does not answer in time is given up: its watches end with
// ErrNoAnswer, and later watches go on a new stream, which the client's
// balancer opens to the next member.
type watchStream struct {
	gen   int
	heard atomic.Int64 // s.clock() of its last response, to any of its watches
	users int          // watches on it (Store.wmu)
	key   string       // a key one of its watches watches, for the check (Store.wmu)
	// ctx ends when it is given up.
	ctx    context.Context
	giveUp context.CancelFunc
	// w is the stream's own watcher, closed once it is given up and its
	// last watch has ended (a check left waiting on a hung member would
	// otherwise keep clientv3's stream open, idle, for good); nil when the
	// client's Watcher is wrapped, which then carries every stream.
	w clientv3.Watcher
}

// newWatchStream starts stream gen.
func (s *Store) newWatchStream(gen int) *watchStream {
	ws := &watchStream{gen: gen}
	ws.ctx, ws.giveUp = context.WithCancel(context.Background())
	if s.ownWatcher {
		ws.w = clientv3.NewWatcher(s.cli)
	}
	return ws
}

// watcher is what ws's watches and checks are set up with.
func (s *Store) watcher(ws *watchStream) clientv3.Watcher {
	if ws.w != nil {
		return ws.w
	}
	return s.cli
}

// closeStream closes ws's watcher, if it has one.
func closeStream(ws *watchStream) {
	if ws != nil && ws.w != nil {
		_ = ws.w.Close()
	}
}

// context returns ctx with the metadata of a watch on ws: the stream's
// name and etcd's require-leader flag. Any other outgoing metadata of ctx
// is dropped: all of ws's watches, and its checks, must carry the same.
func (ws *watchStream) context(ctx context.Context) context.Context {
	return metadata.NewOutgoingContext(ctx, metadata.Pairs(
		rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataHasLeader,
		watchStreamKey, strconv.Itoa(ws.gen)))
}

// clock is a monotonic time in nanoseconds, for the checker.
func (s *Store) clock() int64 { return int64(time.Since(s.epoch)) }

// watchContext returns ctx for a new watch of key, on the current stream,
// and that stream; the caller must call s.leaveStream(ws) once the watch
// has ended. It starts the checker with the first watch.
func (s *Store) watchContext(ctx context.Context, key string) (context.Context, *watchStream) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	ws := s.wstream
	if ws == nil {
		ws = s.newWatchStream(0)
		s.wstream = ws
	}
	if ws.users == 0 {
		ws.heard.Store(s.clock()) // a stream is silent only while it has watches
		ws.key = key
	}
	ws.users++
	if !s.checking && s.watchCheck > 0 {
		s.checking = true
		s.wg.Go(s.checkWatches)
	}
	return ws.context(ctx), ws
}

func (s *Store) leaveStream(ws *watchStream) {
	s.wmu.Lock()
	ws.users--
	idle := s.wstream.users == 0
	done := ws != s.wstream && ws.users == 0 // given up, and its last watch ended
	s.wmu.Unlock()
	if done {
		closeStream(ws)
	}
	if idle {
		select {
		case s.watchesIdle <- struct{}{}:
		default:
		}
	}
}

// heardFrom records a response on ws.
func (s *Store) heardFrom(ws *watchStream) { ws.heard.Store(s.clock()) }

// checkWatches runs while the store has watches (and until Close): every
// half WatchCheck it checks the current stream if it has been silent for
// WatchCheck, and gives it up if its member does not answer the check
// within WatchCheck.
func (s *Store) checkWatches() {
	tick := time.NewTicker(max(s.watchCheck/2, time.Millisecond))
	defer tick.Stop()
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
		silent := s.clock()-ws.heard.Load() >= int64(s.watchCheck)
		key := ws.key
		s.wmu.Unlock()
		if !silent {
			continue
		}
		if s.answers(ws, key) {
			s.heardFrom(ws)
			continue
		}
		if s.ctx.Err() != nil {
			return
		}
		s.wmu.Lock()
		done := false
		if s.wstream == ws {
			ws.giveUp()
			s.wstream = s.newWatchStream(ws.gen + 1)
			done = ws.users == 0 // else the last watch to end closes it
		}
		s.wmu.Unlock()
		if done {
			closeStream(ws)
		}
	}
}

// answers sets up a watch of key on ws and reports whether its member
// answered within WatchCheck: clientv3 returns from Watch once the member
// has created the watch (or refused it, which is an answer too).
func (s *Store) answers(ws *watchStream, key string) bool {
	ctx, cancel := context.WithTimeout(s.ctx, s.watchCheck)
	defer cancel()
	_, ok := <-s.watcher(ws).Watch(ws.context(ctx), key, clientv3.WithCreatedNotify())
	// A channel closed without a response: ctx ended before an answer.
	return ok
}
