package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/leasehold/leasehold/coordinator/kv"
)

// txnRequest builds etcd's request for t directly: the client library's
// Op and Cmp values clone every compare (twice per nested transaction,
// through protobuf reflection) and copy every value on their way to it.
func txnRequest(t *kv.Txn) (*etcdserverpb.TxnRequest, error) {
	req := &etcdserverpb.TxnRequest{Compare: make([]*etcdserverpb.Compare, len(t.If))}
	for i, c := range t.If {
		pc, err := compare(c)
		if err != nil {
			return nil, err
		}
		req.Compare[i] = pc
	}
	var err error
	if req.Success, err = requestOps(t.Then); err != nil {
		return nil, err
	}
	if req.Failure, err = requestOps(t.Else); err != nil {
		return nil, err
	}
	return req, nil
}

func compare(c kv.Cmp) (*etcdserverpb.Compare, error) {
	pc := &etcdserverpb.Compare{Key: []byte(c.Key)}
	switch c.Op {
	case kv.Equal:
		pc.Result = etcdserverpb.Compare_EQUAL
	case kv.NotEqual:
		pc.Result = etcdserverpb.Compare_NOT_EQUAL
	case kv.Less:
		pc.Result = etcdserverpb.Compare_LESS
	case kv.Greater:
		pc.Result = etcdserverpb.Compare_GREATER
	default:
		return nil, fmt.Errorf("compare on %q: unknown operator %d", c.Key, c.Op)
	}
	switch c.Target {
	case kv.Version:
		pc.Target, pc.TargetUnion = etcdserverpb.Compare_VERSION, &etcdserverpb.Compare_Version{Version: c.Int}
	case kv.CreateRevision:
		pc.Target, pc.TargetUnion = etcdserverpb.Compare_CREATE, &etcdserverpb.Compare_CreateRevision{CreateRevision: c.Int}
	case kv.ModRevision:
		pc.Target, pc.TargetUnion = etcdserverpb.Compare_MOD, &etcdserverpb.Compare_ModRevision{ModRevision: c.Int}
	case kv.Value:
		pc.Target, pc.TargetUnion = etcdserverpb.Compare_VALUE, &etcdserverpb.Compare_Value{Value: c.Bytes}
	default:
		return nil, fmt.Errorf("compare on %q: unknown target %d", c.Key, c.Target)
	}
	return pc, nil
}

func requestOps(ops []kv.Op) ([]*etcdserverpb.RequestOp, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	out := make([]*etcdserverpb.RequestOp, len(ops))
	for i, o := range ops {
		switch o.Type {
		case kv.OpGet:
			out[i] = &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestRange{RequestRange: &etcdserverpb.RangeRequest{Key: []byte(o.Key)}}}
		case kv.OpPut:
			out[i] = &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestPut{RequestPut: &etcdserverpb.PutRequest{Key: []byte(o.Key), Value: o.Value, Lease: int64(o.Lease)}}}
		case kv.OpDelete:
			out[i] = &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &etcdserverpb.DeleteRangeRequest{Key: []byte(o.Key)}}}
		case kv.OpTxn:
			if o.Txn == nil {
				return nil, fmt.Errorf("op %d: nested transaction is nil", i)
			}
			nested, err := txnRequest(o.Txn)
			if err != nil {
				return nil, fmt.Errorf("op %d: %w", i, err)
			}
			out[i] = &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestTxn{RequestTxn: nested}}
		default:
			return nil, fmt.Errorf("op %d on %q: unknown type %d", i, o.Key, o.Type)
		}
	}
	return out, nil
}

// ownKV reports whether cli's KV is the one clientv3 made for it, which
// sends requests unchanged: only then may transactions bypass it. A
// wrapper, such as package namespace's, may rewrite keys that ranges and
// watches (through its Watcher) see rewritten too.
func ownKV(cli *clientv3.Client) bool {
	return reflect.TypeOf(cli.KV) == reflect.TypeOf(clientv3.NewKV(cli))
}

// ownWatcher reports whether cli's Watcher is the one clientv3 made for
// it: only then may the store make watchers of its own for its streams.
func ownWatcher(cli *clientv3.Client) bool {
	return fmt.Sprintf("%T", cli.Watcher) == "*clientv3.watcher"
}

// ownLease reports whether cli's Lease is the one clientv3 made for it:
// only then may renewals bypass it (see Store.KeepAliveOnce).
func ownLease(cli *clientv3.Client) bool {
	return fmt.Sprintf("%T", cli.Lease) == "*clientv3.lessor"
}

// clientTxn turns a request built by txnRequest into the client library's
// form, for a client whose KV is wrapped.
func clientTxn(req *etcdserverpb.TxnRequest) clientv3.Op {
	cmps := make([]clientv3.Cmp, len(req.Compare))
	for i, c := range req.Compare {
		cmps[i] = clientv3.FromCompare(c)
	}
	return clientv3.OpTxn(cmps, clientOps(req.Success), clientOps(req.Failure))
}

func clientOps(ops []*etcdserverpb.RequestOp) []clientv3.Op {
	out := make([]clientv3.Op, len(ops))
	for i, o := range ops {
		switch {
		case o.GetRequestRange() != nil:
			out[i] = clientv3.OpGet(string(o.GetRequestRange().Key))
		case o.GetRequestPut() != nil:
			p := o.GetRequestPut()
			out[i] = clientv3.OpPut(string(p.Key), string(p.Value), clientv3.WithLease(clientv3.LeaseID(p.Lease)))
		case o.GetRequestDeleteRange() != nil:
			out[i] = clientv3.OpDelete(string(o.GetRequestDeleteRange().Key))
		case o.GetRequestTxn() != nil:
			out[i] = clientTxn(o.GetRequestTxn())
		}
	}
	return out
}

// callOptions returns the gRPC call options that cli gives its own KV
// calls (wait for a ready connection, its message size limits), which it
// does not export: a KV built on cli over a stub that records them makes
// one call. Should a client version make none, they are the client's
// defaults.
func callOptions(cli *clientv3.Client) []grpc.CallOption {
	rec := &recordingKV{}
	_, _ = clientv3.NewKVFromKVClient(rec, cli).Txn(context.Background()).Commit()
	if rec.opts == nil {
		return []grpc.CallOption{grpc.WaitForReady(true), grpc.MaxCallSendMsgSize(2 << 20), grpc.MaxCallRecvMsgSize(math.MaxInt32)}
	}
	return rec.opts
}

// recordingKV records the call options of a Txn call and sends nothing;
// a call of any other method panics (the embedded interface is nil).
type recordingKV struct {
	etcdserverpb.KVClient
	opts []grpc.CallOption
}

var errRecorded = errors.New("etcdkv: call options recorded; nothing sent")

func (r *recordingKV) Txn(_ context.Context, _ *etcdserverpb.TxnRequest, opts ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	r.opts = slices.Clone(opts)
	return nil, errRecorded
}
