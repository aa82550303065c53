package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
)

// TestRequestsLeaveAHungMember: one of the client's endpoints hangs (its
// proxy drops every packet, as a SIGSTOPped member or a disk that does not
// return would leave it): gRPC's keepalive closes its connection only
// 15 s later, and until then the balancer sends it every other request.
// Reads (and transactions that write nothing) are sent again to the next
// endpoint after the hedge delay and answer; a write fails after the write timeout, saying that it had no
// answer, and the next one reaches the endpoint that answers. None waits
// for the keepalive.
func TestRequestsLeaveAHungMember(t *testing.T) {
	srv := etcdtest.Start(t)
	ps := []*etcdtest.Proxy{etcdtest.NewProxy(t, srv.Endpoint()), etcdtest.NewProxy(t, srv.Endpoint())}
	s := dialStoreWith(t, etcdkv.Options{ReadHedge: 100 * time.Millisecond, WriteTimeout: time.Second}, ps[0].URL(), ps[1].URL())
	put := func(ctx context.Context, v string) error {
		_, err := s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("k", []byte(v), 0)}})
		return err
	}
	if err := put(ctxT(t, 10*time.Second), "0"); err != nil {
		t.Fatal(err)
	}
	ps[0].Blackhole()

	// Each call gets ten times what it needs, and less than half the
	// keepalive's 15 s.
	const bound = 6 * time.Second
	for i := range 10 {
		for _, serializable := range []bool{false, true} {
			rr, err := s.Range(ctxT(t, bound), kv.RangeRequest{Start: "k", Serializable: serializable})
			if err != nil {
				t.Fatalf("read %d (serializable %v) with one endpoint hung: %v", i, serializable, err)
			}
			if len(rr.KVs) != 1 {
				t.Fatalf("read %d: %d keys", i, len(rr.KVs))
			}
		}
		// A transaction that writes nothing is a read.
		res, err := s.Txn(ctxT(t, bound), kv.Txn{If: []kv.Cmp{kv.Exists("k")}, Then: []kv.Op{kv.Get("k")}})
		if err != nil || !res.Succeeded || res.Results[0].KV == nil {
			t.Fatalf("read-only transaction %d with one endpoint hung: %+v, %v", i, res, err)
		}
	}
	answered, timedOut := 0, 0
	for i := range 10 {
		switch err := put(ctxT(t, bound), "v"); {
		case err == nil:
			answered++
		case errors.Is(err, etcdkv.ErrNoAnswer):
			timedOut++
			t.Logf("write %d: %v", i, err)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("write %d: %v does not wrap context.DeadlineExceeded (the client package says an unanswered write does)", i, err)
			}
		default:
			t.Fatalf("write %d with one endpoint hung: %v", i, err)
		}
	}
	if answered == 0 {
		t.Fatalf("no write of 10 answered with one endpoint of two hung")
	}
	t.Logf("%d writes answered, %d timed out", answered, timedOut)
	if _, err := s.Grant(ctxT(t, bound), 30*time.Second); err != nil && !errors.Is(err, etcdkv.ErrNoAnswer) {
		t.Fatalf("grant with one endpoint hung: %v", err)
	}
}

// TestScansLeaveAHungMember: a scan (a stream) whose first chunk does not
// come within 2 s is taken again from the next endpoint, not left waiting
// for the keepalive's 15 s.
func TestScansLeaveAHungMember(t *testing.T) {
	srv := etcdtest.Start(t)
	ps := []*etcdtest.Proxy{etcdtest.NewProxy(t, srv.Endpoint()), etcdtest.NewProxy(t, srv.Endpoint())}
	s := dialStore(t, ps[0].URL(), ps[1].URL())
	if _, err := s.Txn(ctxT(t, 10*time.Second), kv.Txn{Then: []kv.Op{kv.Put("k", []byte("v"), 0)}}); err != nil {
		t.Fatal(err)
	}
	ps[0].Blackhole()
	for i := range 4 {
		n := 0
		if _, err := s.Scan(ctxT(t, 6*time.Second), kv.RangeRequest{Start: "k", End: "l"}, func(kv.KeyValue) error { n++; return nil }); err != nil || n != 1 {
			t.Fatalf("scan %d with one endpoint hung: %d keys, %v", i, n, err)
		}
	}
}

// TestWatchesLeaveAHungMember: the stream that carries a store's watches
// goes to a member that then hangs. The store asks the silent stream for
// progress, gets nothing, and ends the watch with ErrNoAnswer; the watch
// opened again goes to the next endpoint and sees the change made while
// the member hung, long before gRPC's keepalive (15 s) would have closed
// the connection. With the check turned off, the watch stays silent.
func TestWatchesLeaveAHungMember(t *testing.T) {
	for _, check := range []time.Duration{500 * time.Millisecond, -1} {
		t.Run(fmt.Sprintf("check=%v", check), func(t *testing.T) {
			srv := etcdtest.Start(t)
			ps := []*etcdtest.Proxy{etcdtest.NewProxy(t, srv.Endpoint()), etcdtest.NewProxy(t, srv.Endpoint())}
			// The watch's stream goes to the only endpoint, which then
			// hangs; the other is added before.
			cli, err := etcdkv.Dial(ctxT(t, 10*time.Second), etcdkv.Config{Endpoints: []string{ps[0].URL()}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cli.Close() })
			s := etcdkv.New(cli, etcdkv.Options{WatchCheck: check})
			t.Cleanup(func() { _ = s.Close() })
			writer := dialStore(t, srv.Endpoint())
			put := func(v string) int64 { return putK(t, writer, v) }
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			ch := s.Watch(ctx, "k", put("0"))
			if resp := <-ch; resp.Err != nil || len(resp.Events) != 1 {
				t.Fatalf("first event: %+v", resp)
			}
			cli.SetEndpoints(ps[0].URL(), ps[1].URL())
			ps[0].Blackhole()
			hung := time.Now()
			rev := put("1")

			// Less than half the keepalive's 15 s.
			deadline := time.After(7 * time.Second)
			for {
				select {
				case resp, ok := <-ch:
					if !ok {
						t.Fatalf("the watch ended without an error")
					}
					switch {
					case resp.Err != nil && check > 0 && errors.Is(resp.Err, etcdkv.ErrNoAnswer):
						t.Logf("watch given up after %v: %v", time.Since(hung).Round(time.Millisecond), resp.Err)
						ch = s.Watch(ctx, "k", rev)
					case resp.Err != nil:
						t.Fatalf("watch failed: %v", resp.Err)
					case len(resp.Events) == 1 && resp.Events[0].KV.ModRevision == rev && check > 0:
						t.Logf("change seen %v after the member hung", time.Since(hung).Round(time.Millisecond))
						// Once the watches end, no stream of the client is
						// left open, not even the one given up, whose
						// check still waits on the hung member.
						cancel()
						for n := watchStreams(); n > 0; n = watchStreams() {
							if time.Since(hung) > 15*time.Second {
								t.Fatalf("%d watch streams open after every watch ended", n)
							}
							time.Sleep(20 * time.Millisecond)
						}
						return
					default:
						t.Fatalf("unexpected watch response %+v", resp)
					}
				case <-deadline:
					if check > 0 {
						t.Fatalf("no change seen within 7 s of the member hanging")
					}
					return // silent, as a watch on a hung member is without the check
				}
			}
		})
	}
}

// TestHungMemberIsLeftOut: with LeaveOutFor, the first read that a hung
// endpoint does not answer, and the next one answers at once, takes the
// hung endpoint out of the client's endpoints: every write after it
// answers (without it, every other one waits out the write timeout, see
// TestRequestsLeaveAHungMember). The endpoint comes back after
// LeaveOutFor (a new connection to a member that still hangs is never
// ready, and gets no request); Close gives back one still left out.
func TestHungMemberIsLeftOut(t *testing.T) {
	for _, closeEarly := range []bool{false, true} {
		t.Run(fmt.Sprintf("close=%v", closeEarly), func(t *testing.T) {
			srv := etcdtest.Start(t)
			ps := []*etcdtest.Proxy{etcdtest.NewProxy(t, srv.Endpoint()), etcdtest.NewProxy(t, srv.Endpoint())}
			all := []string{ps[0].URL(), ps[1].URL()}
			cli := dialClient(t, all...)
			const leaveOut = 3 * time.Second
			s := etcdkv.New(cli, etcdkv.Options{ReadHedge: 300 * time.Millisecond, WriteTimeout: time.Second, LeaveOutFor: leaveOut})
			t.Cleanup(func() { _ = s.Close() })
			write := func(i int) {
				t.Helper()
				if _, err := s.Txn(ctxT(t, 6*time.Second), kv.Txn{Then: []kv.Op{kv.Put("k", []byte("v"), 0)}}); err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
			}
			write(0)
			ps[0].Blackhole()
			for i := 0; len(cli.Endpoints()) == 2; i++ {
				if i == 10 {
					t.Fatalf("ten reads with one endpoint hung; it is still in the client's endpoints %v", cli.Endpoints())
				}
				if _, err := s.Range(ctxT(t, 6*time.Second), kv.RangeRequest{Start: "k"}); err != nil {
					t.Fatal(err)
				}
			}
			left := time.Now()
			if got := cli.Endpoints(); !slices.Equal(got, all[1:]) {
				t.Fatalf("endpoints %v after the hung one was left out, want %v", got, all[1:])
			}
			for i := range 10 {
				write(i)
			}
			if closeEarly {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if got := cli.Endpoints(); !slices.Equal(got, all) {
					t.Fatalf("endpoints %v after Close, want %v", got, all)
				}
				return
			}
			for !slices.Equal(cli.Endpoints(), all) {
				if time.Since(left) > leaveOut+5*time.Second {
					t.Fatalf("endpoints %v %v after the hung one was left out for %v", cli.Endpoints(), time.Since(left), leaveOut)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if time.Since(left) < leaveOut-time.Second {
				t.Fatalf("the endpoint came back after %v, before %v", time.Since(left), leaveOut)
			}
			for i := range 5 {
				write(i)
			}
		})
	}
}

// TestHealthyWatchesAreNotGivenUp: the check of a silent watch stream must
// not take a healthy member for a hung one: not a watch of a quiet
// cluster waiting for a future revision (etcd answers no progress request
// then), nor one whose consumer does not read for a while.
func TestHealthyWatchesAreNotGivenUp(t *testing.T) {
	srv := etcdtest.Start(t)
	s := dialStoreWith(t, etcdkv.Options{WatchCheck: 200 * time.Millisecond}, srv.Endpoint())
	put := func(v string) int64 { return putK(t, s, v) }
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch := s.Watch(ctx, "k", put("0")+1)
	select {
	case resp := <-ch:
		t.Fatalf("a watch of a quiet cluster answered %+v", resp)
	case <-time.After(10 * 200 * time.Millisecond):
	}
	rev := put("1")
	put("2")
	put("3")
	// Not read for ten checks.
	time.Sleep(10 * 200 * time.Millisecond)
	var got []int64
	for len(got) < 3 {
		select {
		case resp := <-ch:
			if resp.Err != nil {
				t.Fatalf("after %d events: %v", len(got), resp.Err)
			}
			for _, ev := range resp.Events {
				got = append(got, ev.KV.ModRevision)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("events %v, want 3", got)
		}
	}
	if want := []int64{rev, rev + 1, rev + 2}; !slices.Equal(got, want) {
		t.Fatalf("events at revisions %v, want %v", got, want)
	}
}

// putK puts v at key "k" through s and returns the revision.
func putK(t *testing.T, s kv.Store, v string) int64 {
	t.Helper()
	res, err := s.Txn(ctxT(t, 10*time.Second), kv.Txn{Then: []kv.Op{kv.Put("k", []byte(v), 0)}})
	if err != nil {
		t.Fatal(err)
	}
	return res.Revision
}

// watchStreams counts clientv3's watch streams running in this process.
func watchStreams() int {
	buf := make([]byte, 1<<22)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "watchGRPCStream).run(")
}
