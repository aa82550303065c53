package etcdkv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// Server defaults that Limits reports unless Options say otherwise.
const (
	// DefaultMaxOps is etcd's default --max-txn-ops.
	DefaultMaxOps = 128
	// DefaultMaxRequestBytes is etcd's default --max-request-bytes (1.5 MiB).
	DefaultMaxRequestBytes = 3 << 19
	// RequestBytesMargin is kept free below the server's request size limit
	// for what the coordinator's size estimate does not count (protobuf
	// framing of ops and compares, nested transactions).
	RequestBytesMargin = 64 << 10
)

// Options tune a Store.
type Options struct {
	// MaxOps is the server's --max-txn-ops; 0 means DefaultMaxOps. Set it
	// when the servers were started with a larger value.
	MaxOps int
	// MaxRequestBytes is the server's --max-request-bytes; 0 means
	// DefaultMaxRequestBytes. A client built by [Dial] cannot send requests
	// over 2 MiB unless Config.MaxCallSendMsgSize says so.
	MaxRequestBytes int
	// ReadHedge is how long a Range waits for its answer before it sends
	// the same read again beside it (up to three at once; the first
	// answer wins); 0 means DefaultReadHedge. WriteTimeout is how long a
	// Txn or Grant waits for its answer before it fails (the write may
	// still be applied); 0 means DefaultWriteTimeout. Both are for a
	// member that hangs (SIGSTOP, a disk that does not return, packets
	// dropped): its connection looks healthy until gRPC's keepalive
	// closes it, 15 s later, and the client's balancer keeps sending it
	// every third request. The read sent again, and the write tried again
	// by its caller, go to the next member.
	ReadHedge, WriteTimeout time.Duration
	// WatchCheck is how long the stream that carries the watches may be
	// silent before the store checks it (it sets up a watch there), and
	// how long it then waits for an answer before it gives the stream up: its
	// watches end with ErrNoAnswer (their callers watch again, on a new
	// stream to the next member). 0 means DefaultWatchCheck; negative
	// turns the check off. A hung member would otherwise keep its watches
	// silent until gRPC's keepalive, 15 s.
	WatchCheck time.Duration
	// LeaveOutFor is how long a member is left out of the client's
	// endpoints (clientv3's SetEndpoints) after a read it did not answer
	// was sent again and answered at once by another member: it looks
	// hung, and would otherwise get every third request, writes included,
	// until gRPC's keepalive. 0 leaves the client's endpoints alone; set
	// it only when the store alone manages the client. The endpoint is the
	// one whose host (an IP address, or a name that resolves to it) and
	// port the client connected to. At most half of the other endpoints,
	// rounded down, are out at once, and at least one may be; the last is
	// never left out. Close gives the client back the endpoints left out.
	LeaveOutFor time.Duration
	// Logger receives a warning when a member is left out, and a line
	// when it is back (nil: none).
	Logger *slog.Logger
}

// Defaults of Options.ReadHedge and Options.WriteTimeout. The write
// timeout is far above a healthy cluster's commit (milliseconds; a slow
// disk's fsync, a fraction of a second) and below etcd's own request
// timeout (7 s with its default election timeout). A write that waits out
// a leader election may meet it, and is then tried again by its caller,
// as after any lost reply.
const (
	DefaultReadHedge    = 500 * time.Millisecond
	DefaultWriteTimeout = 3 * time.Second
)

// Store is the kv seam on an etcd client. It is safe for concurrent use.
type Store struct {
	cli *clientv3.Client
	// kvc and callOpts send transactions as the client would, from
	// requests built here (see txnRequest); kvc is nil when the client's
	// KV is wrapped (by package namespace, say), which then sends them.
	kvc      etcdserverpb.KVClient
	callOpts []grpc.CallOption
	limits   kv.Limits

	// lc renews leases on a stream kept open between renewals (see
	// KeepAliveOnce); nil when the client's Lease is wrapped, which then
	// renews them. renewing is held by the renewal using the stream, which
	// is ka (nil: open one) and ends with kaCancel.
	lc       etcdserverpb.LeaseClient
	renewing chan struct{}
	ka       etcdserverpb.Lease_LeaseKeepAliveClient
	kaCancel context.CancelFunc

	// ctx ends with Close; it stops watches.
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // watch goroutines

	// noStream is set once a member has answered a scan's RangeStream
	// with Unimplemented (etcd before 3.7).
	noStream atomic.Bool

	readHedge, writeTimeout time.Duration

	// Watches share a stream, checked by checkWatches (watchcheck.go)
	// while there are any; watchesIdle is poked when the last one ends.
	watchCheck  time.Duration
	epoch       time.Time // of Store.clock
	wmu         sync.Mutex
	wstream     *watchStream
	checking    bool
	watchesIdle chan struct{}
	ownWatcher  bool // the client's Watcher is clientv3's own: streams get their own

	leaveOutFor time.Duration
	leave       leaveOut
	log         *slog.Logger
}

var (
	_ kv.Store   = (*Store)(nil)
	_ kv.Scanner = (*Store)(nil)
)

// New returns a Store on cli. Close does not close cli: the caller owns it.
func New(cli *clientv3.Client, opts Options) *Store {
	maxOps := opts.MaxOps
	if maxOps <= 0 {
		maxOps = DefaultMaxOps
	}
	maxBytes := opts.MaxRequestBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxRequestBytes
	}
	maxBytes -= RequestBytesMargin
	if maxBytes < 1 {
		maxBytes = 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{
		cli:          cli,
		limits:       kv.Limits{MaxOps: maxOps, MaxBytes: maxBytes, RangeCountsAll: true, LeasesExpire: true},
		ctx:          ctx,
		cancel:       cancel,
		readHedge:    cmp.Or(opts.ReadHedge, DefaultReadHedge),
		writeTimeout: cmp.Or(opts.WriteTimeout, DefaultWriteTimeout),
		watchCheck:   cmp.Or(opts.WatchCheck, DefaultWatchCheck),
		watchesIdle:  make(chan struct{}, 1),
		epoch:        time.Now(),
		leaveOutFor:  opts.LeaveOutFor,
		log:          opts.Logger,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cli != nil {
		s.callOpts = callOptions(cli)
		if ownKV(cli) {
			s.kvc = clientv3.RetryKVClient(cli)
		}
		s.ownWatcher = ownWatcher(cli)
		if ownLease(cli) {
			s.lc, s.renewing = clientv3.RetryLeaseClient(cli), make(chan struct{}, 1)
		}
	}
	return s
}

// Client returns the etcd client the store uses.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Close stops every watch of the store and waits for their goroutines.
// Later calls return kv.ErrClosed. It does not close the etcd client.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.closeLeaveOut()
	s.wmu.Lock()
	ws := s.wstream
	s.wmu.Unlock()
	closeStream(ws) // every other stream closed with its last watch
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Limits reports the transaction limits given in Options (or etcd's
// defaults), the byte limit less [RequestBytesMargin].
//
// etcd applies MaxOps per nesting path, not to the total: a transaction's
// max(len(If), len(Then), len(Else)) plus that of each nested transaction
// below it, level by level, must not exceed it; sibling nested transactions
// do not add up (100 nested transactions of 2 puts each pass the default
// 128). Keeping the flattened total within MaxOps is therefore safe but
// conservative; MaxBytes bounds such batches anyway.
func (s *Store) Limits() kv.Limits { return s.limits }

// Txn applies t as one etcd transaction.
func (s *Store) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	if s.isClosed() {
		return kv.TxnResult{}, kv.ErrClosed
	}
	req, err := txnRequest(&t)
	if err != nil {
		return kv.TxnResult{}, fmt.Errorf("etcdkv: txn: %w", err)
	}
	linearized := linearize(req)
	send := func(ctx context.Context, opts []grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
		if s.kvc != nil {
			return s.kvc.Txn(ctx, req, opts...)
		}
		or, err := s.cli.Do(ctx, clientTxn(req))
		return (*etcdserverpb.TxnResponse)(or.Txn()), err
	}
	var resp *etcdserverpb.TxnResponse
	if readOnly(&t) {
		var calls hedgeCalls // the members of the calls
		var winner int
		var hung []int
		resp, winner, hung, err = hedged(ctx, s.readHedge, func(ctx context.Context, call int) (*etcdserverpb.TxnResponse, error) {
			return send(ctx, calls.opts(s.callOpts, call))
		})
		s.leaveOutHung(&calls, winner, hung)
		if err != nil {
			err = mapErr("txn", clientv3.ContextError(ctx, err))
		}
	} else {
		timeout := s.txnTimeout(t.Bytes())
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err = send(wctx, s.callOpts)
		err = s.writeErr(ctx, "txn", timeout, clientv3.ContextError(wctx, err))
	}
	if err != nil {
		return kv.TxnResult{}, err
	}
	results := resp.Responses
	if linearized && len(results) > 0 {
		results = results[:len(results)-1] // linearize's read
	}
	return fromTxnResponse(resp.Header.GetRevision(), resp.Succeeded, results), nil
}

// linearize gives a transaction of compares alone, whose branches hold no
// op, a read of its first compare's key in each branch, and reports
// whether it did; the read's result is the last of the branch that ran.
// etcd serves a transaction whose every op is a serializable Range as a
// serializable read, and one with no op at all counts as such: a member
// would answer it from its own state, however stale (cut off from its
// leader, say), without the leader's read index. A linearizable Range
// makes the whole transaction linearizable. The key is a compare's, which
// an etcd user must already be allowed to read; a transaction without
// compares compares nothing and is left as it is (ADR 0049).
func linearize(req *etcdserverpb.TxnRequest) bool {
	if len(req.Compare) == 0 || len(req.Success) > 0 || len(req.Failure) > 0 {
		return false
	}
	read := func() []*etcdserverpb.RequestOp {
		return []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestRange{RequestRange: &etcdserverpb.RangeRequest{
			Key: req.Compare[0].Key, CountOnly: true,
		}}}}
	}
	req.Success, req.Failure = read(), read()
	return true
}

// readOnly reports whether t writes nothing in any branch: such a
// transaction is a read, and is hedged as Range is.
func readOnly(t *kv.Txn) bool {
	for _, ops := range [][]kv.Op{t.Then, t.Else} {
		for _, o := range ops {
			if o.Type == kv.OpPut || o.Type == kv.OpDelete || o.Type == kv.OpTxn && !readOnly(o.Txn) {
				return false
			}
		}
	}
	return true
}

// txnTimeout is how long a write transaction of size bytes (its keys and
// values) waits for its answer: WriteTimeout, and a second more per MiB,
// since a member takes longer to receive, log, sync and apply a large one
// (three jobs of 1.5 MiB, six copies in one transaction, took over 3 s on
// a loaded machine, and were reported as a member that may hang).
func (s *Store) txnTimeout(size int) time.Duration {
	return s.writeTimeout + time.Duration(size)*time.Second/(1<<20)
}

// writeErr is mapErr for a write made with a context of timeout from ctx;
// if that timeout ended it, the error says so (ErrNoAnswer), and wraps
// context.DeadlineExceeded too, as a write that ran out of its caller's
// time does: its outcome is unknown either way.
func (s *Store) writeErr(ctx context.Context, what string, timeout time.Duration, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w to a %s within %v (a member may hang, or the cluster may have lost its quorum; the write may still be applied): %w", ErrNoAnswer, what, timeout.Round(time.Millisecond), context.DeadlineExceeded)
	case replyLost(err):
		return fmt.Errorf("%w to a %s (the write may still be applied): %w", ErrNoAnswer, what, err)
	}
	return mapErr(what, err)
}

// replyLost reports whether a write's err leaves it without a verdict,
// although it may have reached the leader: its connection failed after it
// was sent (a member that crashed, a connection reset: gRPC's Unavailable,
// which clientv3 does not send again for a write), or etcd gave up waiting
// for it to be applied (its own request timeout, a leader lost meanwhile,
// the member stopping), which leaves the proposal in raft. etcd's refusals
// before a proposal (no leader, too many requests, ...) are verdicts.
func replyLost(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		for _, e := range []error{rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail,
			rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrStopped} {
			if errors.Is(err, e) {
				return true
			}
		}
		return false
	}
	return status.Code(err) == codes.Unavailable
}

// Range reads keys with a linearizable read.
func (s *Store) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	if s.isClosed() {
		return kv.RangeResult{}, kv.ErrClosed
	}
	key, opts := rangeOptions(r)
	var calls hedgeCalls // the members of the calls
	resp, winner, hung, err := hedged(ctx, s.readHedge, func(ctx context.Context, call int) (*clientv3.GetResponse, error) {
		if s.kvc == nil {
			return s.cli.Get(ctx, key, opts...)
		}
		resp, err := s.kvc.Range(ctx, rangeRequest(key, r), calls.opts(s.callOpts, call)...)
		return (*clientv3.GetResponse)(resp), clientv3.ContextError(ctx, err)
	})
	s.leaveOutHung(&calls, winner, hung)
	if err != nil {
		return kv.RangeResult{}, mapErr("range", err)
	}
	res := kv.RangeResult{
		KVs:      make([]kv.KeyValue, len(resp.Kvs)),
		More:     resp.More,
		Revision: resp.Header.GetRevision(),
	}
	for i, e := range resp.Kvs {
		res.KVs[i] = fromKV(e)
	}
	return res, nil
}

// rangeRequest is the request that clientv3's Get would send for key and
// r's rangeOptions.
func rangeRequest(key string, r kv.RangeRequest) *etcdserverpb.RangeRequest {
	return &etcdserverpb.RangeRequest{
		Key:          []byte(key),
		RangeEnd:     []byte(r.End),
		Limit:        int64(max(r.Limit, 0)),
		KeysOnly:     r.KeysOnly,
		Serializable: r.Serializable,
	}
}

// rangeOptions is the key and client options of a Range or Scan.
func rangeOptions(r kv.RangeRequest) (key string, opts []clientv3.OpOption) {
	key = r.Start
	if key == "" && r.End != "" {
		key = "\x00" // etcd rejects an empty key; no key is empty
	}
	if r.End != "" {
		opts = append(opts, clientv3.WithRange(r.End))
	}
	if r.Limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(r.Limit)))
	}
	if r.KeysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	if r.Serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	return key, opts
}

// Scan reads every key of r's range in one pass at one revision (etcd's
// RangeStream, since 3.7) and calls visit for each, in key order. A Range
// with a limit costs the member a walk of its index to the range's end,
// to count the keys; a scan costs what it reads. A member without
// RangeStream answers Unimplemented: Scan then returns
// kv.ErrScanUnsupported, having visited nothing, and so does every later
// Scan of this Store without asking. So does a client whose KV is wrapped
// (package namespace cannot stream). A scan that fails with an unavailable
// member before it has visited a key is tried again, as clientv3 tries
// reads again (up to 100 times, 25 ms apart, within ctx); clientv3 does
// not try streams again itself.
func (s *Store) Scan(ctx context.Context, r kv.RangeRequest, visit func(kv.KeyValue) error) (int64, error) {
	if s.isClosed() {
		return 0, kv.ErrClosed
	}
	if r.Limit != 0 {
		return 0, fmt.Errorf("etcdkv: scan: a limit of %d: scans read the whole range", r.Limit)
	}
	if s.kvc == nil || s.noStream.Load() {
		return 0, kv.ErrScanUnsupported
	}
	key, opts := rangeOptions(r)
	for attempt := 1; ; attempt++ {
		rev, visited, err := s.scanOnce(ctx, key, opts, visit)
		var ve visitError
		switch {
		case err == nil:
			return rev, nil
		case errors.As(err, &ve):
			return 0, ve.err
		case !visited && status.Code(err) == codes.Unimplemented:
			s.noStream.Store(true)
			return 0, kv.ErrScanUnsupported
		case visited || status.Code(err) != codes.Unavailable && !errors.Is(err, errNoFirstChunk) || attempt == scanTries || ctx.Err() != nil:
			return 0, mapErr("scan", rpctypes.Error(err)) // the stream's errors are gRPC's
		}
		t := time.NewTimer(scanRetryWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, mapErr("scan", clientv3.ContextError(ctx, ctx.Err()))
		case <-t.C:
		}
	}
}

// How often, and how far apart, Scan tries a stream that an unavailable
// member ended before it read a key: as clientv3 tries reads. A stream
// whose first chunk has not come within scanFirstChunk is taken as ended
// so (errNoFirstChunk): its member may hang, and a new stream goes to the
// next (see Options.ReadHedge). A first chunk is one read of the member's
// index and store: milliseconds.
const (
	scanTries      = 100
	scanRetryWait  = 25 * time.Millisecond
	scanFirstChunk = 2 * time.Second
)

var errNoFirstChunk = errors.New("no answer to the stream within " + scanFirstChunk.String())

// visitError carries an error of Scan's visit, returned as it is.
type visitError struct{ err error }

func (e visitError) Error() string { return e.err.Error() }

// scanOnce is one try of Scan; visited says whether visit was called.
func (s *Store) scanOnce(ctx context.Context, key string, opts []clientv3.OpOption, visit func(kv.KeyValue) error) (rev int64, visited bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	ch, err := s.cli.GetStream(ctx, key, opts...)
	if err != nil {
		cancel()
		return 0, false, err
	}
	defer func() {
		// The client's goroutine ends once it has sent what it read
		// and the stream has ended: cancel it, and let it send.
		cancel()
		for range ch {
		}
	}()
	first := time.AfterFunc(scanFirstChunk, cancel)
	defer first.Stop()
	answered := false
	for resp := range ch {
		if !answered {
			if answered = first.Stop(); !answered {
				return 0, false, errNoFirstChunk // cancelled, just as it came
			}
		}
		if err := resp.Err(); err != nil {
			return 0, visited, err
		}
		for _, e := range resp.Kvs {
			visited = true
			if err := visit(fromKV(e)); err != nil {
				return 0, true, visitError{err}
			}
		}
		if h := resp.Header; h != nil {
			rev = h.Revision
		}
	}
	if !answered && ctx.Err() != nil && !first.Stop() {
		return 0, false, errNoFirstChunk
	}
	if rev == 0 {
		return 0, visited, errors.New("the stream ended without its last chunk")
	}
	return rev, visited, nil
}

// Watch streams the changes to keys with prefix from fromRev on (0: from
// the revision after the store's current one).
//
// Watch returns once etcd has created the watch (clientv3 waits for it), so
// a watch from revision 0 sees every write made after Watch returned, and
// none at or below the revision etcd created it at, even after clientv3
// resumed it on a new connection; while no member answers, Watch waits,
// until ctx ends. With fromRev > 0 etcd replays history from fromRev, or
// the watch ends with kv.ErrCompacted.
//
// The store's watches share one stream, to one member, and carry no
// outgoing gRPC metadata of ctx. A stream that is silent for
// Options.WatchCheck is checked: a watch is set up on it, and if its
// member does not answer within as long, the stream is given up: its
// watches, and a Watch call still waiting for one to be created, end with
// an error wrapping ErrNoAnswer, and later watches go on a new stream, to
// the next member (ADR 0030).
//
// The watch requires a leader: when the member it is connected to loses its
// leader, the watch ends with an error instead of silently falling behind.
// The channel is closed when ctx ends, when the store is closed, or after a
// response carrying Err.
func (s *Store) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		out := make(chan kv.WatchResponse, 1)
		out <- kv.WatchResponse{Err: kv.ErrClosed}
		close(out)
		return out
	}
	s.wg.Add(1)
	s.mu.Unlock()

	out := make(chan kv.WatchResponse)
	// pctx ends with the caller's context or Close; wctx also when the
	// stream is given up (watchcheck.go), which ends a Watch call that
	// waits for a member that hangs.
	pctx, pcancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, pcancel) // Close ends the watch
	wctx, ws := s.watchContext(pctx, prefix)
	wctx, cancel := context.WithCancel(wctx)
	stopWS := context.AfterFunc(ws.ctx, cancel)
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if fromRev > 0 {
		opts = append(opts, clientv3.WithRev(fromRev))
	} else {
		// clientv3 resumes a watch from revision 0 that lost its stream
		// before its first event at the revision it was created at, which
		// replays a change made before the watch: pumpWatch learns that
		// revision from the created notification and drops such changes.
		opts = append(opts, clientv3.WithCreatedNotify())
	}
	wch := s.watcher(ws).Watch(wctx, prefix, opts...)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer pcancel()
		defer cancel()
		defer stop()
		defer stopWS()
		defer s.leaveStream(ws)
		if s.pumpWatch(pctx, wctx, ws, wch, out, fromRev) && pctx.Err() == nil && ws.ctx.Err() != nil {
			// The stream was given up: say so, so that the caller
			// watches again (on a new stream).
			select {
			case out <- kv.WatchResponse{Err: fmt.Errorf("%w to a check of the watch stream within %v (its member may hang): watch again", ErrNoAnswer, s.watchCheck)}:
			case <-pctx.Done():
			}
		}
	}()
	return out
}

// pumpWatch translates clientv3's responses until the watch ends, dropping
// changes older than fromRev (or, from 0, than the watch's creation). It
// returns true, without a word, when wctx ends; it sends on out until pctx
// ends.
func (s *Store) pumpWatch(pctx, wctx context.Context, ws *watchStream, wch clientv3.WatchChan, out chan<- kv.WatchResponse, fromRev int64) (cut bool) {
	send := func(r kv.WatchResponse) bool {
		select {
		case out <- r:
			return true
		case <-pctx.Done():
			return false
		}
	}
	for {
		var (
			resp clientv3.WatchResponse
			ok   bool
		)
		select {
		case resp, ok = <-wch:
		case <-wctx.Done():
			return true
		}
		if !ok {
			// clientv3 closes the channel without a final response when
			// the watch context ends; anything else is a failure.
			if wctx.Err() == nil {
				send(kv.WatchResponse{Err: errors.New("etcdkv: watch: channel closed by the etcd client")})
				return false
			}
			return true
		}
		s.heardFrom(ws)
		if resp.CompactRevision != 0 {
			send(kv.WatchResponse{
				Err:             fmt.Errorf("etcdkv: watch: %w (compacted at revision %d)", kv.ErrCompacted, resp.CompactRevision),
				CompactRevision: resp.CompactRevision,
			})
			return false
		}
		if err := resp.Err(); err != nil {
			if wctx.Err() == nil { // not our own cancellation
				send(kv.WatchResponse{Err: mapErr("watch", err)})
				return false
			}
			return true
		}
		if resp.Created && fromRev <= 0 {
			fromRev = resp.Header.GetRevision() + 1
		}
		r := kv.WatchResponse{Events: make([]kv.Event, 0, len(resp.Events))}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision < fromRev {
				continue
			}
			e := kv.Event{Type: kv.EventPut, KV: fromKV(ev.Kv)}
			if ev.Type == mvccpb.DELETE {
				e.Type = kv.EventDelete
			}
			r.Events = append(r.Events, e)
		}
		if len(r.Events) == 0 { // created or progress notification, or replayed
			continue
		}
		if !send(r) {
			return false
		}
	}
}

// Grant creates a lease of ttl rounded up to whole seconds, at least 1 s.
// etcd raises TTLs below its own minimum (ceil(1.5 × election timeout),
// 2 s by default) to that minimum.
func (s *Store) Grant(ctx context.Context, ttl time.Duration) (kv.LeaseID, error) {
	if s.isClosed() {
		return 0, kv.ErrClosed
	}
	wctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	resp, err := s.cli.Grant(wctx, ttlSeconds(ttl))
	if err != nil {
		return 0, s.writeErr(ctx, "grant", s.writeTimeout, err)
	}
	return kv.LeaseID(resp.ID), nil
}

func ttlSeconds(ttl time.Duration) int64 {
	secs := int64((ttl + time.Second - 1) / time.Second)
	return max(secs, 1)
}

// KeepAliveOnce renews the lease once, within ctx (give it a deadline: it
// retries while the cluster is unavailable), and returns the TTL granted;
// kv.ErrLeaseNotFound when the lease is gone.
//
// Renewals go over one LeaseKeepAlive stream that the store keeps open
// between them. clientv3's KeepAliveOnce opens a stream per renewal, and
// a client with a username and password authenticates again for every
// stream it opens (a password hash on the server and a raft round): a
// renewal would be two requests, one of them costly. A renewal made while
// another holds the stream uses a stream of its own, as clientv3 does.
// A renewal cut short by ctx drops the kept stream: the next one opens a
// new stream, which the client's round-robin balancer may put on another
// endpoint, and so does a renewal made while another waits for its answer.
// That is how a session gets past a member that does not answer (see
// coordinator's Session.renew): a blackholed member looks connected until
// gRPC's keepalive closes its connection (10 s at least), and a follower
// cut off from its leader holds a renewal for its request timeout (about
// 7 s).
func (s *Store) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	if s.isClosed() {
		return 0, kv.ErrClosed
	}
	if s.lc != nil {
		select {
		case s.renewing <- struct{}{}:
			defer func() { <-s.renewing }()
			ttl, err := s.renew(ctx, id)
			if errors.Is(err, kv.ErrClosed) {
				return 0, err
			}
			if err != nil {
				return 0, mapErr("keepalive", err)
			}
			return ttl, nil
		default:
		}
	}
	resp, err := s.cli.KeepAliveOnce(ctx, clientv3.LeaseID(id))
	if err != nil {
		return 0, mapErr("keepalive", err)
	}
	return time.Duration(resp.TTL) * time.Second, nil
}

// renew renews id on the kept stream, opening a new one after a failure,
// while ctx lasts and the failure is one clientv3's KeepAliveOnce retries
// (the connection failed; the kept stream may have broken since its last
// use) or one a new stream cures (an auth token that expired or is stale:
// opening a stream authenticates again). The caller holds s.renewing.
func (s *Store) renew(ctx context.Context, id kv.LeaseID) (time.Duration, error) {
	authRetried := false
	for {
		resp, err := s.renewOnce(ctx, id)
		if err == nil {
			if resp.TTL <= 0 {
				return 0, rpctypes.ErrLeaseNotFound
			}
			return time.Duration(resp.TTL) * time.Second, nil
		}
		s.kaCancel()
		s.ka, s.kaCancel = nil, nil
		if s.ctx.Err() != nil {
			// Close cancelled the stream under the renewal: report that,
			// not the cancellation it caused (which reads as a failure
			// worth retrying).
			return 0, kv.ErrClosed
		}
		conv := clientv3.ContextError(ctx, err)
		retry, auth := retryRenewal(err, conv)
		if ctx.Err() != nil || !retry || auth && authRetried {
			return 0, conv
		}
		authRetried = authRetried || auth
	}
}

// renewOnce sends one renewal on the kept stream, opening it first if
// there is none. The stream outlives ctx unless ctx ends while it is in
// use: then it is cancelled, as clientv3 cancels its per-renewal stream.
// On an error the caller drops the stream.
func (s *Store) renewOnce(ctx context.Context, id kv.LeaseID) (*etcdserverpb.LeaseKeepAliveResponse, error) {
	if s.ka == nil {
		sctx, cancel := context.WithCancel(s.ctx)
		s.kaCancel = cancel
		stop := context.AfterFunc(ctx, cancel) // opening waits for a connection
		ka, err := s.lc.LeaseKeepAlive(sctx, s.callOpts...)
		if !stop() && err == nil {
			err = ctx.Err()
		}
		if err != nil {
			return nil, err
		}
		s.ka = ka
	}
	stop := context.AfterFunc(ctx, s.kaCancel)
	resp, err := keepAliveExchange(s.ka, id)
	if !stop() && err == nil {
		// Answered, but ctx ended meanwhile and cancelled the stream:
		// the renewal stands; the next one opens a new stream.
		s.kaCancel()
		s.ka = nil
	}
	return resp, err
}

// keepAliveExchange sends one renewal and reads its answer: the server
// answers a stream's renewals one at a time, in order.
func keepAliveExchange(ka etcdserverpb.Lease_LeaseKeepAliveClient, id kv.LeaseID) (*etcdserverpb.LeaseKeepAliveResponse, error) {
	if err := ka.Send(&etcdserverpb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
		if !errors.Is(err, io.EOF) {
			return nil, err
		}
		// The stream had ended: Recv says why.
	}
	resp, err := ka.Recv()
	if err != nil {
		return nil, err
	}
	if resp.ID != int64(id) {
		return nil, fmt.Errorf("lease keepalive stream answered for lease %x, not %x", resp.ID, int64(id))
	}
	return resp, nil
}

// retryRenewal reports whether a renewal that failed with err (conv: as
// clientv3 converts it) is tried again on a new stream: after the
// transport failures clientv3's KeepAliveOnce retries, and (once: auth
// says so) after an auth token error, which a new stream's authentication
// cures.
func retryRenewal(err, conv error) (retry, auth bool) {
	if errors.Is(conv, rpctypes.ErrInvalidAuthToken) || errors.Is(conv, rpctypes.ErrAuthOldRevision) || errors.Is(conv, rpctypes.ErrUserEmpty) {
		return true, true
	}
	var etcdErr rpctypes.EtcdError
	if errors.As(conv, &etcdErr) {
		return false, false
	}
	code := status.Code(err)
	return code == codes.Unavailable || code == codes.Internal, false
}

// Revoke ends the lease and deletes its keys.
func (s *Store) Revoke(ctx context.Context, id kv.LeaseID) error {
	if s.isClosed() {
		return kv.ErrClosed
	}
	if _, err := s.cli.Revoke(ctx, clientv3.LeaseID(id)); err != nil {
		return mapErr("revoke", err)
	}
	return nil
}

// mapErr maps etcd's errors to the seam's sentinels, keeping the original
// error in the chain too, and says what was being done.
func mapErr(what string, err error) error {
	var sentinel error
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		sentinel = kv.ErrCompacted
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		sentinel = kv.ErrLeaseNotFound
	case errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrRequestTooLarge), isMessageTooLarge(err):
		sentinel = kv.ErrTxnTooLarge
	case errors.Is(err, rpctypes.ErrNoSpace):
		sentinel = kv.ErrNoSpace
	}
	if sentinel != nil {
		return fmt.Errorf("etcdkv: %s: %w (%w)", what, sentinel, err)
	}
	return fmt.Errorf("etcdkv: %s: %w", what, err)
}

// isMessageTooLarge reports gRPC's own size limits: the client refusing to
// send more than MaxCallSendMsgSize, or the server refusing to receive more
// than its limit (MaxRequestBytes plus gRPC overhead). Both are
// ResourceExhausted, as is etcd's "database space exceeded", which is not a
// size error: tell them apart by message.
func isMessageTooLarge(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return false
	}
	return strings.Contains(st.Message(), "larger than max")
}

// fromTxnResponse converts the results of the branch that ran. Nested
// transactions share the enclosing one's revision.
func fromTxnResponse(rev int64, succeeded bool, resps []*etcdserverpb.ResponseOp) kv.TxnResult {
	res := kv.TxnResult{Succeeded: succeeded, Revision: rev, Results: make([]kv.OpResult, len(resps))}
	for i, r := range resps {
		switch {
		case r.GetResponseRange() != nil:
			if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
				v := fromKV(kvs[0])
				res.Results[i].KV = &v
			}
		case r.GetResponseTxn() != nil:
			t := r.GetResponseTxn()
			nested := fromTxnResponse(rev, t.Succeeded, t.Responses)
			res.Results[i].Txn = &nested
		}
	}
	return res
}

func fromKV(e *mvccpb.KeyValue) kv.KeyValue {
	return kv.KeyValue{
		Key:            string(e.Key),
		Value:          e.Value,
		CreateRevision: e.CreateRevision,
		ModRevision:    e.ModRevision,
		Version:        e.Version,
		Lease:          kv.LeaseID(e.Lease),
	}
}
