package localstore_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/server/v3/embed"
	"golang.org/x/sync/errgroup"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/localstore"
)

// linSeed (or $LEASEHOLD_LINEARIZABILITY_SEED) runs TestLinearizable with one
// chosen seed instead of its default list.
var linSeed = flag.Uint64("lin.seed", 0, "run TestLinearizable with this seed only (0: $"+linSeedEnv+" or the default list)")

const (
	linSeedEnv = "LEASEHOLD_LINEARIZABILITY_SEED"
	// linOutEnv names where a failing round writes porcupine's
	// visualization: a directory that exists, or a file path.
	linOutEnv = "LEASEHOLD_LINEARIZABILITY_OUT"

	linClients = 8
	linOps     = 100 // per client and round
	linKeys    = 4   // the key space of a round
	// linCheckTimeout bounds porcupine's search; a history of this size is
	// decided in well under a second.
	linCheckTimeout = time.Minute
)

// linSeeds are the rounds run by default, each on fresh keys of one store.
var linSeeds = []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

// TestLinearizable runs concurrent clients against a store through kv.Store
// and checks with porcupine that their history is linearizable against a
// sequential model of the seam: one global revision, advanced by exactly one
// per transaction that writes; every key's value, ModRevision, Version and
// CreateRevision; reads (Range of one key or of every key, Txns of Gets)
// that report exactly the state at the revision they report; compare-and-set
// Txns whose Succeeded and Else reads agree with that state; Txns that
// write two keys at once and read a third.
//
// Each client's choice of operations and keys comes from its own seeded
// generator; the values it compares against are the ones it last saw, and
// the interleaving is the scheduler's. Serializable Ranges, which may be
// stale or show writes not yet durable, are left out of the check and held
// to a weaker one (checkSerializable).
//
// The etcd subtest runs the same rounds against an embedded etcd member,
// linearizable for these operations: it checks the model and the checker.
//
// On a failure the round's seed, porcupine's visualization (an HTML file:
// in the test's temporary directory, or at $LEASEHOLD_LINEARIZABILITY_OUT)
// and the history are printed. -lin.seed=N or LEASEHOLD_LINEARIZABILITY_SEED=N
// runs round N alone.
func TestLinearizable(t *testing.T) {
	seeds := linSeedList(t)
	// More Ps than cores: the clients' threads are then preempted by the
	// operating system at any instruction, not only where Go yields, which
	// makes the interleavings that matter far more frequent on a small
	// machine.
	if n := runtime.GOMAXPROCS(0); n < linClients {
		runtime.GOMAXPROCS(linClients)
		t.Cleanup(func() { runtime.GOMAXPROCS(n) })
	}
	for _, c := range []struct {
		name   string
		opts   localstore.Options
		rounds int
	}{
		{"localstore", localstore.Options{}, len(seeds)},
		// A history of a few events: transactions often find that it no
		// longer reaches back to the revision of their reads ahead of the
		// mutex, and read again under it.
		{"localstore-short-history", localstore.Options{WatchHistory: 4}, (len(seeds) + 1) / 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Logger = slog.New(slog.DiscardHandler)
			s, err := localstore.Open(t.TempDir(), c.opts)
			if err != nil {
				t.Fatalf("localstore.Open: %v", err)
			}
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			linRounds(t, c.name, s, seeds[:c.rounds])
		})
	}
	t.Run("etcd", func(t *testing.T) {
		srv := etcdtest.Start(t, etcdtest.WithConfig(func(c *embed.Config) { c.UnsafeNoFsync = true }))
		s := etcdkv.New(srv.Client(t), etcdkv.Options{})
		t.Cleanup(func() { _ = s.Close() })
		// etcd checks the checker: fewer rounds suffice.
		linRounds(t, "etcd", s, seeds[:min(len(seeds), 2)])
	})
}

func linSeedList(t *testing.T) []uint64 {
	if seed, ok := testutil.Seed(t, *linSeed, linSeedEnv); ok {
		return []uint64{seed}
	}
	if testing.Short() {
		return linSeeds[:2]
	}
	return linSeeds
}

// linRounds runs one round per seed, each on its own keys, and stops at the
// first that fails.
func linRounds(t *testing.T, backend string, s kv.Store, seeds []uint64) {
	for _, seed := range seeds {
		t0 := time.Now()
		start, ops, serial, err := linRun(t.Context(), s, seed)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		ran := time.Since(t0)
		t0 = time.Now()
		model := linModel(start)
		res, info := porcupine.CheckOperationsVerbose(model, ops, linCheckTimeout)
		checked := time.Since(t0)
		t.Logf("seed %d: %d operations in %v, checked in %v: %s", seed, len(ops)+len(serial), ran.Round(time.Millisecond), checked.Round(time.Millisecond), res)
		if res != porcupine.Ok {
			linReport(t, backend, seed, model, res, ops, info)
			return
		}
		if msgs := checkSerializable(start, ops, serial); len(msgs) > 0 {
			t.Errorf("seed %d: serializable reads (rerun: go test ./localstore -run 'TestLinearizable/^%s$' -lin.seed=%d):\n%s",
				seed, backend, seed, strings.Join(msgs, "\n"))
			return
		}
	}
}

// linReport writes the visualization of a failed check and prints the
// history.
func linReport(t *testing.T, backend string, seed uint64, model porcupine.Model, res porcupine.CheckResult, ops []porcupine.Operation, info porcupine.LinearizationInfo) {
	t.Helper()
	name := fmt.Sprintf("linearizability-%s-seed%d.html", backend, seed)
	path := filepath.Join(t.TempDir(), name)
	if p := os.Getenv(linOutEnv); p != "" {
		path = p
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			path = filepath.Join(p, name)
		}
	}
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		t.Logf("visualization: %v", err)
	} else {
		t.Logf("visualization: %s", path)
	}
	t.Errorf("seed %d: history %s (rerun: go test ./localstore -run 'TestLinearizable/^%s$' -lin.seed=%d)\n%s",
		seed, linVerdict(res), backend, seed, linExplain(model, ops, info))
}

func linVerdict(res porcupine.CheckResult) string {
	if res == porcupine.Unknown {
		return fmt.Sprintf("undecided within %v", linCheckTimeout)
	}
	return "not linearizable"
}

// linExplain describes a history that failed the check: the longest
// linearization porcupine found of a prefix of it, the state that ends in,
// the operations that could come next and fit none, and the operations
// around those (every one is in the visualization).
func linExplain(model porcupine.Model, ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var b strings.Builder
	desc := func(op porcupine.Operation) string {
		return fmt.Sprintf("c%d [%9.3fms %9.3fms] %s", op.ClientId, float64(op.Call)/1e6, float64(op.Return)/1e6, linDescribe(op.Input, op.Output))
	}
	// One partition: operation ids are indexes into ops.
	var longest []int
	if parts := info.PartialLinearizations(); len(parts) == 1 {
		for _, seq := range parts[0] {
			if len(seq) > len(longest) {
				longest = seq
			}
		}
	}
	done := make([]bool, len(ops))
	state := model.Init()
	for _, id := range longest {
		done[id] = true
		_, state = model.Step(state, ops[id].Input, ops[id].Output)
	}
	next := int64(math.MaxInt64) // the first return of an operation not linearized
	for i, op := range ops {
		if !done[i] {
			next = min(next, op.Return)
		}
	}
	// The operations that could come next, and the time they span.
	stuck := make([]bool, len(ops))
	lo, hi := int64(math.MaxInt64), int64(0)
	fmt.Fprintf(&b, "longest linearization found: %d of %d operations, ending in state %s; none of these fits next:\n",
		len(longest), len(ops), linDescribeState(state))
	for i, op := range ops {
		if !done[i] && op.Call <= next {
			stuck[i] = true
			lo, hi = min(lo, op.Call), max(hi, op.Return)
			fmt.Fprintf(&b, "  %s\n", desc(op))
		}
	}
	var window []int
	for i, op := range ops {
		if op.Return >= lo && op.Call <= hi {
			window = append(window, i)
		}
	}
	slices.SortStableFunc(window, func(i, j int) int { return cmp.Compare(ops[i].Call, ops[j].Call) })
	fmt.Fprintf(&b, "operations overlapping those, by call (* could come next, + in the linearization; client, call, return, op -> @revision result):\n")
	for _, i := range window {
		mark := " "
		switch {
		case stuck[i]:
			mark = "*"
		case done[i]:
			mark = "+"
		}
		fmt.Fprintf(&b, "%s %s\n", mark, desc(ops[i]))
	}
	return b.String()
}

// linKind is an operation of a client.
type linKind uint8

const (
	linRange        linKind = iota + 1 // linearizable Range of one key
	linRangeAll                        // linearizable Range of every key
	linGet                             // Txn of Gets of one to three keys
	linPut                             // Txn putting one key
	linCAS                             // If cmp Then Put Else Get
	linDelete                          // Txn deleting one key
	linPair                            // Txn putting two keys and getting a third
	linSerializable                    // serializable Range of one key, checked apart
)

// linCmpKind is the compare of a linCAS.
type linCmpKind uint8

const (
	cmpValue   linCmpKind = iota + 1 // Value(k) == value
	cmpModRev                        // ModRevision(k) == rev
	cmpMissing                       // Version(k) == 0
)

// linInput is an operation as the model sees it. Keys are indexes into the
// round's key space.
type linInput struct {
	kind  linKind
	keys  []int  // keys read or written, in the order of the op's results
	value string // the value put (linPut, linCAS, linPair)
	cmp   linCmpKind
	cmpV  string
	cmpR  int64
}

// linRec is one key of the model: Version 0 when missing (and everything
// else zero).
type linRec struct {
	value            string
	create, mod, ver int64
}

// linOutput is what an operation returned.
type linOutput struct {
	rev       int64
	succeeded bool     // linCAS
	reads     []linRec // linRange, linGet: per key; linRangeAll: every key; linCAS (Else), linPair: one
}

// linState is the model's state: comparable, so that Equal is ==.
type linState struct {
	rev  int64
	keys [linKeys]linRec
}

// put writes key k at revision s.rev, which the caller has advanced.
func (s *linState) put(k int, value string) {
	r := s.keys[k]
	if r.ver == 0 {
		r.create = s.rev
	}
	r.value, r.mod = value, s.rev
	r.ver++
	s.keys[k] = r
}

func (s linState) holds(in linInput) bool {
	r := s.keys[in.keys[0]]
	switch in.cmp {
	case cmpValue:
		return r.ver > 0 && r.value == in.cmpV // a Value compare on a missing key fails
	case cmpModRev:
		return r.mod == in.cmpR
	case cmpMissing:
		return r.ver == 0
	}
	return false
}

// linModel is the sequential specification of a round that starts at
// revision start with none of its keys.
func linModel(start int64) porcupine.Model {
	return porcupine.Model{
		Init:              func() any { return linState{rev: start} },
		Step:              linStep,
		Hash:              linHash,
		DescribeOperation: linDescribe,
		DescribeState:     linDescribeState,
	}
}

func linStep(state, input, output any) (bool, any) {
	s, in, out := state.(linState), input.(linInput), output.(linOutput)
	reads := func(keys []int) bool {
		if len(out.reads) != len(keys) {
			return false
		}
		for i, k := range keys {
			if out.reads[i] != s.keys[k] {
				return false
			}
		}
		return true
	}
	switch in.kind {
	case linRange, linGet:
		return out.rev == s.rev && reads(in.keys), s
	case linRangeAll:
		return out.rev == s.rev && reads(linAllKeys), s
	case linPut:
		ok := out.rev == s.rev+1
		s.rev++
		s.put(in.keys[0], in.value)
		return ok, s
	case linCAS:
		if out.succeeded != s.holds(in) {
			return false, s
		}
		if !out.succeeded {
			return out.rev == s.rev && reads(in.keys), s
		}
		ok := out.rev == s.rev+1
		s.rev++
		s.put(in.keys[0], in.value)
		return ok, s
	case linDelete:
		k := in.keys[0]
		if s.keys[k].ver == 0 {
			return out.rev == s.rev, s // nothing written: no new revision
		}
		ok := out.rev == s.rev+1
		s.rev++
		s.keys[k] = linRec{}
		return ok, s
	case linPair:
		// Reads before the writes: the key read is not written.
		ok := out.rev == s.rev+1 && reads(in.keys[2:])
		s.rev++
		s.put(in.keys[0], in.value)
		s.put(in.keys[1], in.value)
		return ok, s
	}
	return false, s
}

func linHash(state any) uint64 {
	s := state.(linState)
	h := uint64(s.rev)
	for _, r := range s.keys {
		h = h*0x100000001b3 ^ uint64(r.mod)<<8 ^ uint64(r.ver)
	}
	return h
}

func linDescribe(input, output any) string {
	in, out := input.(linInput), output.(linOutput)
	var b strings.Builder
	switch in.kind {
	case linRange:
		fmt.Fprintf(&b, "range k%d", in.keys[0])
	case linRangeAll:
		b.WriteString("range *")
	case linGet:
		b.WriteString("get")
		for _, k := range in.keys {
			fmt.Fprintf(&b, " k%d", k)
		}
	case linPut:
		fmt.Fprintf(&b, "put k%d=%s", in.keys[0], in.value)
	case linCAS:
		switch in.cmp {
		case cmpValue:
			fmt.Fprintf(&b, "if k%d==%q", in.keys[0], in.cmpV)
		case cmpModRev:
			fmt.Fprintf(&b, "if mod(k%d)==%d", in.keys[0], in.cmpR)
		case cmpMissing:
			fmt.Fprintf(&b, "if !k%d", in.keys[0])
		}
		fmt.Fprintf(&b, " put k%d=%s else get", in.keys[0], in.value)
	case linDelete:
		fmt.Fprintf(&b, "delete k%d", in.keys[0])
	case linPair:
		fmt.Fprintf(&b, "put k%d,k%d=%s get k%d", in.keys[0], in.keys[1], in.value, in.keys[2])
	case linSerializable:
		fmt.Fprintf(&b, "serializable range k%d", in.keys[0])
	}
	fmt.Fprintf(&b, " -> @%d", out.rev)
	if in.kind == linCAS {
		fmt.Fprintf(&b, " %v", out.succeeded)
	}
	keys := in.keys
	switch in.kind {
	case linRangeAll:
		keys = linAllKeys
	case linPair:
		keys = in.keys[2:]
	}
	for i, r := range out.reads {
		if i < len(keys) {
			fmt.Fprintf(&b, " k%d=%s", keys[i], r)
		}
	}
	return b.String()
}

func linDescribeState(state any) string {
	s := state.(linState)
	var b strings.Builder
	fmt.Fprintf(&b, "@%d", s.rev)
	for k, r := range s.keys {
		fmt.Fprintf(&b, " k%d=%s", k, r)
	}
	return b.String()
}

func (r linRec) String() string {
	if r.ver == 0 {
		return "-"
	}
	return fmt.Sprintf("%s(c%d,m%d,v%d)", r.value, r.create, r.mod, r.ver)
}

var linAllKeys = func() []int {
	ks := make([]int, linKeys)
	for i := range ks {
		ks[i] = i
	}
	return ks
}()

// linRun runs one round: linClients clients of linOps operations each on
// the keys of the round. It returns the history of the operations checked
// for linearizability and, apart, the serializable reads.
func linRun(ctx context.Context, s kv.Store, seed uint64) (start int64, ops, serial []porcupine.Operation, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // a failure guard
	defer cancel()
	prefix := fmt.Sprintf("lin/%d/", seed)
	key := func(k int) string { return prefix + "k" + strconv.Itoa(k) }
	// The keys of the round are new: the model starts with none of them,
	// at the store's revision now.
	rr, err := s.Range(ctx, kv.Prefix(prefix, 0))
	if err != nil {
		return 0, nil, nil, err
	}
	if len(rr.KVs) > 0 {
		return 0, nil, nil, fmt.Errorf("keys of %s exist already", prefix)
	}
	start = rr.Revision

	rec := func(kvp *kv.KeyValue) linRec {
		if kvp == nil {
			return linRec{}
		}
		return linRec{value: string(kvp.Value), create: kvp.CreateRevision, mod: kvp.ModRevision, ver: kvp.Version}
	}
	begin := time.Now()
	now := func() int64 { return int64(time.Since(begin)) }

	hists := make([][]porcupine.Operation, linClients)
	serials := make([][]porcupine.Operation, linClients)
	g, ctx := errgroup.WithContext(ctx)
	for c := range linClients {
		g.Go(func() error {
			r := rand.New(rand.NewPCG(seed, uint64(c)))
			// What this client last saw of each key: the value and
			// ModRevision its CASes compare with (ver only tells present).
			var seen [linKeys]linRec
			for i := range linOps {
				in := linInput{value: fmt.Sprintf("c%d.%d", c, i)}
				var (
					out       linOutput
					call, ret int64
					err       error
				)
				// A single-key Range reads one key into out.
				rangeKey := func(k int, serializable bool) {
					var rr kv.RangeResult
					call = now()
					rr, err = s.Range(ctx, kv.RangeRequest{Start: key(k), Serializable: serializable})
					ret = now()
					if err == nil && len(rr.KVs) > 1 {
						err = fmt.Errorf("Range of %s read %d keys", key(k), len(rr.KVs))
					}
					var kvp *kv.KeyValue
					if len(rr.KVs) == 1 {
						kvp = &rr.KVs[0]
					}
					out = linOutput{rev: rr.Revision, reads: []linRec{rec(kvp)}}
				}
				txn := func(t kv.Txn) kv.TxnResult {
					call = now()
					res, terr := s.Txn(ctx, t)
					ret = now()
					err = terr
					out.rev, out.succeeded = res.Revision, res.Succeeded
					return res
				}
				switch n := r.IntN(100); {
				case n < 14:
					in.kind, in.keys = linRange, []int{r.IntN(linKeys)}
					rangeKey(in.keys[0], false)
				case n < 22:
					in.kind = linRangeAll
					var rr kv.RangeResult
					call = now()
					rr, err = s.Range(ctx, kv.Prefix(prefix, 0))
					ret = now()
					out = linOutput{rev: rr.Revision, reads: make([]linRec, linKeys)}
					for _, x := range rr.KVs {
						k, kerr := strconv.Atoi(strings.TrimPrefix(x.Key, prefix+"k"))
						if kerr != nil || k < 0 || k >= linKeys {
							err = fmt.Errorf("Range of %s read key %q", prefix, x.Key)
							break
						}
						out.reads[k] = rec(&x)
					}
				case n < 36:
					in.kind, in.keys = linGet, r.Perm(linKeys)[:1+r.IntN(3)]
					t := kv.Txn{}
					for _, k := range in.keys {
						t.Then = append(t.Then, kv.Get(key(k)))
					}
					res := txn(t)
					if err == nil && len(res.Results) != len(in.keys) {
						err = fmt.Errorf("Txn of %d gets: %d results", len(in.keys), len(res.Results))
					}
					if err == nil {
						for _, x := range res.Results {
							out.reads = append(out.reads, rec(x.KV))
						}
					}
				case n < 50:
					in.kind, in.keys = linPut, []int{r.IntN(linKeys)}
					txn(kv.Txn{Then: []kv.Op{kv.Put(key(in.keys[0]), []byte(in.value), 0)}})
				case n < 72:
					k := r.IntN(linKeys)
					in.kind, in.keys = linCAS, []int{k}
					var c kv.Cmp
					switch r.IntN(3) {
					case 0:
						in.cmp, in.cmpV = cmpValue, seen[k].value
						if seen[k].ver == 0 {
							in.cmpV = "none" // a value never written
						}
						c = kv.Cmp{Key: key(k), Target: kv.Value, Op: kv.Equal, Bytes: []byte(in.cmpV)}
					case 1:
						in.cmp, in.cmpR = cmpModRev, seen[k].mod
						c = kv.ModRevisionIs(key(k), kv.Equal, in.cmpR)
					default:
						in.cmp = cmpMissing
						c = kv.Missing(key(k))
					}
					res := txn(kv.Txn{If: []kv.Cmp{c}, Then: []kv.Op{kv.Put(key(k), []byte(in.value), 0)}, Else: []kv.Op{kv.Get(key(k))}})
					if err == nil && !res.Succeeded {
						if len(res.Results) != 1 {
							err = fmt.Errorf("Txn: %d results of one get", len(res.Results))
						} else {
							out.reads = []linRec{rec(res.Results[0].KV)}
						}
					}
				case n < 80:
					in.kind, in.keys = linDelete, []int{r.IntN(linKeys)}
					txn(kv.Txn{Then: []kv.Op{kv.Delete(key(in.keys[0]))}})
				case n < 94:
					in.kind, in.keys = linPair, r.Perm(linKeys)[:3]
					res := txn(kv.Txn{Then: []kv.Op{
						kv.Put(key(in.keys[0]), []byte(in.value), 0),
						kv.Put(key(in.keys[1]), []byte(in.value), 0),
						kv.Get(key(in.keys[2])),
					}})
					if err == nil && len(res.Results) != 3 {
						err = fmt.Errorf("Txn of 2 puts and a get: %d results", len(res.Results))
					}
					if err == nil {
						out.reads = []linRec{rec(res.Results[2].KV)}
					}
				default:
					in.kind, in.keys = linSerializable, []int{r.IntN(linKeys)}
					rangeKey(in.keys[0], true)
				}
				if err != nil {
					return fmt.Errorf("client %d, op %d (%s): %w", c, i, linDescribe(in, out), err)
				}
				op := porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret}
				if in.kind == linSerializable {
					serials[c] = append(serials[c], op)
					continue
				}
				hists[c] = append(hists[c], op)
				// Remember what was seen, for the compares of later CASes.
				switch in.kind {
				case linRange, linGet:
					for j, k := range in.keys {
						seen[k] = out.reads[j]
					}
				case linRangeAll:
					copy(seen[:], out.reads)
				case linPut:
					seen[in.keys[0]] = linRec{value: in.value, mod: out.rev, ver: 1}
				case linCAS:
					if out.succeeded {
						seen[in.keys[0]] = linRec{value: in.value, mod: out.rev, ver: 1}
					} else {
						seen[in.keys[0]] = out.reads[0]
					}
				case linPair:
					seen[in.keys[0]] = linRec{value: in.value, mod: out.rev, ver: 1}
					seen[in.keys[1]] = linRec{value: in.value, mod: out.rev, ver: 1}
					seen[in.keys[2]] = out.reads[0]
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, nil, nil, err
	}
	return start, slices.Concat(hists...), slices.Concat(serials...), nil
}

// checkSerializable holds serializable reads, which may be stale or show a
// write not yet durable, to this: the revision read is at least the round's
// start and at most the newest revision written by a write called before
// the read returned; a key read holds a value that a write called before
// the read returned wrote, at the ModRevision read, no later than the
// revision read.
func checkSerializable(start int64, ops, serial []porcupine.Operation) []string {
	type written struct {
		rev  int64
		call int64
	}
	writes := map[string]written{} // "k<i>=value" -> its write
	var revs []written             // every write's revision and call
	for _, op := range ops {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		var keys []int
		switch {
		case in.kind == linPut, in.kind == linCAS && out.succeeded:
			keys = in.keys[:1]
		case in.kind == linPair:
			keys = in.keys[:2]
		case in.kind == linDelete:
		default:
			continue
		}
		w := written{rev: out.rev, call: op.Call}
		revs = append(revs, w)
		for _, k := range keys {
			writes[fmt.Sprintf("k%d=%s", k, in.value)] = w
		}
	}
	var msgs []string
	for _, op := range serial {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		newest := start
		for _, w := range revs {
			if w.call <= op.Return {
				newest = max(newest, w.rev)
			}
		}
		desc := fmt.Sprintf("c%d [%.3fms %.3fms] %s", op.ClientId, float64(op.Call)/1e6, float64(op.Return)/1e6, linDescribe(in, out))
		if out.rev < start || out.rev > newest {
			msgs = append(msgs, fmt.Sprintf("%s: revision outside [%d, %d]", desc, start, newest))
		}
		r := out.reads[0]
		if r.ver == 0 {
			continue
		}
		w, ok := writes[fmt.Sprintf("k%d=%s", in.keys[0], r.value)]
		switch {
		case !ok || w.call > op.Return:
			msgs = append(msgs, desc+": a value not written before the read returned")
		case w.rev != r.mod || r.mod > out.rev:
			msgs = append(msgs, fmt.Sprintf("%s: written at revision %d", desc, w.rev))
		}
	}
	return msgs
}
