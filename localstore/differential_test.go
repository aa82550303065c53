package localstore_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/localstore"
)

// diffSeed (or $LEASEHOLD_DIFFERENTIAL_SEED) picks TestDifferential's sequence.
var diffSeed = flag.Uint64("diff.seed", 0, "seed of TestDifferential's requests (0: $"+diffSeedEnv+" or the default)")

const (
	diffSeedEnv     = "LEASEHOLD_DIFFERENTIAL_SEED"
	diffDefaultSeed = 1
	diffPrefix      = "difftest/"
	// diffBogusLease was granted by neither store.
	diffBogusLease kv.LeaseID = 0x7eadbeef12345
	// diffMaxLeases bounds the leases alive at once.
	diffMaxLeases = 6
	// diffHistory is how many steps a failure prints.
	diffHistory = 16
)

// diffKeys is the key space, small so that compares hit and miss, with keys
// that are prefixes of one another and bytes at both ends of the range.
var diffKeys = []string{"a", "a\x00", "a/b", "ab", "b", "ba", "c", "d", "e\xff", "f"}

// diffValues are the values written and compared ("" and a value that no
// put writes included).
var diffValues = []string{"", "x", "y", "xy", "x\x00"}

// TestDifferential sends one random sequence of requests to a localstore and
// to an embedded etcd member (through etcdkv) and compares their answers:
// etcd's are the specification. Revisions are compared relative to each
// store's revision at the start of the sequence, leases by the order they
// were granted in, errors by the kv sentinel they wrap (or none). A watch of
// each store from the start collects every event, compared at the end.
//
// The sequence depends only on the seed: by default a fixed one, so that the
// test is deterministic; -diff.seed=N (go test ./localstore -run Differential
// -diff.seed=N) or LEASEHOLD_DIFFERENTIAL_SEED=N runs another.
//
// Not compared, as the seam leaves them to each backend: lease ids (mapped
// by grant order), TTLs below etcd's minimum (none are granted), lease
// expiry (no lease lives long enough), Limits, and how a watch batches
// events into responses. The differences this test found are skipped where
// they show, each under a "divergence:" comment, and logged.
func TestDifferential(t *testing.T) {
	seed := diffSeedValue(t)
	steps := 600
	if testing.Short() {
		steps = 150
	}
	t.Logf("seed %d, %d steps (another: -diff.seed=N or %s=N)", seed, steps, diffSeedEnv)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed with seed %d: rerun with -diff.seed=%d", seed, seed)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a failure guard
	defer cancel()

	local, err := localstore.Open(t.TempDir(), localstore.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("localstore.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := local.Close(); err != nil {
			t.Errorf("localstore Close: %v", err)
		}
	})
	srv := etcdtest.Start(t, etcdtest.WithConfig(func(c *embed.Config) { c.UnsafeNoFsync = true }))
	etcd := etcdkv.New(srv.Client(t), etcdkv.Options{})
	t.Cleanup(func() { _ = etcd.Close() })

	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	d := &differ{t: t, ctx: ctx, sides: [2]*side{{name: "etcd", s: etcd}, {name: "localstore", s: local}}}
	// The stores start at different revisions, so that a revision compared
	// without its offset shows: keys outside the prefix, sorting before it.
	for _, sd := range d.sides {
		for i := range 1 + r.IntN(5) {
			if _, err := sd.s.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("0pad/"+strconv.Itoa(i), []byte("p"), 0)}}); err != nil {
				t.Fatalf("%s: padding: %v", sd.name, err)
			}
		}
		res, err := sd.s.Range(ctx, kv.RangeRequest{Start: diffPrefix})
		if err != nil {
			t.Fatalf("%s: Range: %v", sd.name, err)
		}
		sd.base = res.Revision
	}
	t.Logf("start revisions: etcd %d, localstore %d", d.sides[0].base, d.sides[1].base)

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	var watches [2]<-chan kv.WatchResponse
	for i, sd := range d.sides {
		watches[i] = sd.s.Watch(wctx, diffPrefix, sd.base+1)
	}

	g := &gen{r: r, revoked: map[int]bool{}}
	for i := range steps {
		d.step = i
		st := g.next()
		d.run(st)
		if i%10 == 9 {
			d.run(step{kind: stepRange, rng: kv.Prefix(diffPrefix, 0)})
		}
		g.cur = d.cur
	}
	// End every lease still alive, and write the marker that ends the
	// watch streams.
	for n := 1; n <= g.leases; n++ {
		if !g.revoked[n] {
			d.step++
			d.run(step{kind: stepRevoke, lease: n})
		}
	}
	d.step++
	d.run(step{kind: stepRange, rng: kv.Prefix(diffPrefix, 0)})
	marker := diffPrefix + "~end"
	d.step++
	d.run(step{kind: stepTxn, txn: kv.Txn{Then: []kv.Op{kv.Put(marker, []byte("end"), 0)}}})

	var events [2][]kv.Event
	for i, sd := range d.sides {
		events[i] = collectUntil(t, sd.name, watches[i], marker)
	}
	wcancel()
	d.compareEvents(events)
	for _, reason := range slices.Sorted(maps.Keys(d.skipped)) {
		t.Logf("skipped %d times: %s", d.skipped[reason], reason)
	}
	var tally []string
	for _, k := range slices.Sorted(maps.Keys(d.tally)) {
		tally = append(tally, fmt.Sprintf("%s %d", k, d.tally[k]))
	}
	t.Logf("answers compared: %s", strings.Join(tally, ", "))
}

func diffSeedValue(t *testing.T) uint64 {
	if seed, ok := testutil.Seed(t, *diffSeed, diffSeedEnv); ok {
		return seed
	}
	return diffDefaultSeed
}

type stepKind int

const (
	stepTxn stepKind = iota + 1
	stepRange
	stepGrant
	stepKeepAlive
	stepRevoke
)

// step is one request, in terms both stores understand: in txn, the Int of
// a CreateRevision or ModRevision compare is relative to the store's start
// revision (0 stays 0, the revision of a missing key), and a Put's Lease is
// the number of the lease in grant order (1, 2, ...) or diffBogusLease.
type step struct {
	kind  stepKind
	txn   kv.Txn
	rng   kv.RangeRequest
	lease int // stepKeepAlive, stepRevoke: lease number; 0: diffBogusLease
	ttl   time.Duration
}

// side is one store under test.
type side struct {
	name   string
	s      kv.Store
	base   int64        // revision at the start of the sequence
	leases []kv.LeaseID // granted, in order: lease number n is leases[n-1]
}

// differ runs steps on both stores and compares their answers.
type differ struct {
	t       *testing.T
	ctx     context.Context
	sides   [2]*side // etcd first: the specification
	step    int
	cur     int64 // etcd's last revision seen, relative
	history []string
	skipped map[string]int
	tally   map[string]int // answers by kind, for the log
}

// count tallies etcd's answer to st.
func (d *differ) count(st step, ans string) {
	if d.tally == nil {
		d.tally = map[string]int{}
	}
	kind := strings.Fields(fmtStep(st))[0]
	switch {
	case strings.HasPrefix(ans, "error"):
		kind += " " + strings.TrimSuffix(strings.SplitN(ans, ", rev=", 2)[0], ",")
	case st.kind == stepTxn:
		kind += fmt.Sprintf(" ok=%v", strings.HasPrefix(ans, "{ok=true"))
		if n := strings.Count(ans, "{ok="); n > 1 {
			d.tally["nested txn results"] += n - 1
		}
	case st.kind == stepRange && strings.Contains(ans, "more=true"):
		kind += " more"
	case st.kind == stepRange && strings.HasSuffix(ans, "[]"):
		kind += " empty"
	}
	d.tally[kind]++
}

// answer is a store's answer: cmp is compared, detail (cmp with error
// texts) printed.
type answer struct{ cmp, detail string }

func (d *differ) run(st step) {
	d.t.Helper()
	if st.kind == stepTxn && etcdAccepts(st.txn) && !seamAccepts(st.txn) {
		// divergence: a key put in one nested transaction and deleted in
		// a later sibling (Then: [Nested{Then: [Put k]}, Nested{Then:
		// [Delete k]}]) passes etcd's duplicate check, which tests the
		// puts of a nested transaction against the deletes before it
		// only: etcd applies both (events put k, delete k, at one
		// revision). localstore rejects it, as the seam's rule says (a
		// key written at most once per branch). The other order fails
		// in both. Sent to neither store, since their states would part.
		d.skipOnce(divergenceSiblingPutDelete, fmt.Sprintf("step %d: %s", d.step, fmtStep(st)))
		return
	}
	var a [2]answer
	for i, sd := range d.sides {
		a[i] = d.exec(sd, st)
	}
	d.count(st, a[0].cmp)
	entry := fmt.Sprintf("step %d: %s\n\t%-10s %s\n\t%-10s %s", d.step, fmtStep(st), d.sides[0].name+":", a[0].detail, d.sides[1].name+":", a[1].detail)
	d.history = append(d.history, entry)
	if len(d.history) > diffHistory {
		d.history = d.history[1:]
	}
	if a[0].cmp != a[1].cmp {
		d.t.Fatalf("the stores answered step %d differently (etcd's answer is the specification):\n%s\n\nthe last %d steps:\n%s",
			d.step, entry, len(d.history), strings.Join(d.history, "\n"))
	}
}

// Differences found and no longer compared (see differ.run).
const (
	divergenceSiblingPutDelete = "divergence: etcd accepts a put and a delete of one key in sibling nested transactions, put first; localstore rejects it"
)

// etcdAccepts reports whether etcd's check of overlapping writes accepts t:
// checkIntervals of etcd's v3rpc (server/etcdserver/api/v3rpc/key.go, v3.7)
// on each branch, for the seam's single-key ops.
func etcdAccepts(t kv.Txn) bool {
	_, _, ok := etcdWrites(t.Then)
	if ok {
		_, _, ok = etcdWrites(t.Else)
	}
	return ok
}

func etcdWrites(ops []kv.Op) (puts, dels map[string]bool, ok bool) {
	dels = map[string]bool{}
	for _, op := range ops {
		if op.Type == kv.OpDelete {
			dels[op.Key] = true
		}
	}
	puts = map[string]bool{}
	for _, op := range ops {
		if op.Type != kv.OpTxn {
			continue
		}
		putsThen, delsThen, ok := etcdWrites(op.Txn.Then)
		if !ok {
			return nil, nil, false
		}
		putsElse, delsElse, ok := etcdWrites(op.Txn.Else)
		if !ok {
			return nil, nil, false
		}
		for k := range putsThen {
			if puts[k] || dels[k] {
				return nil, nil, false
			}
			puts[k] = true
		}
		for k := range putsElse {
			if puts[k] && !putsThen[k] || dels[k] {
				return nil, nil, false
			}
			puts[k] = true
		}
		maps.Copy(dels, delsThen)
		maps.Copy(dels, delsElse)
	}
	for _, op := range ops {
		if op.Type != kv.OpPut {
			continue
		}
		if puts[op.Key] || dels[op.Key] {
			return nil, nil, false
		}
		puts[op.Key] = true
	}
	return puts, dels, true
}

// seamAccepts reports whether t keeps the seam's rule (kv.Txn): no key is
// written twice among the writes of one branch, nested transactions
// included, except that a key may be deleted twice and the Then and Else of
// one nested transaction exclude each other.
func seamAccepts(t kv.Txn) bool {
	_, ok := seamWrites(t)
	return ok
}

// seamWrites returns the keys either branch of t writes: true if put.
func seamWrites(t kv.Txn) (map[string]bool, bool) {
	out := map[string]bool{}
	for _, ops := range [][]kv.Op{t.Then, t.Else} {
		branch := map[string]bool{}
		add := func(k string, put bool) bool {
			if prev, ok := branch[k]; ok && (prev || put) {
				return false
			}
			branch[k] = put
			return true
		}
		for _, op := range ops {
			switch op.Type {
			case kv.OpPut, kv.OpDelete:
				if !add(op.Key, op.Type == kv.OpPut) {
					return nil, false
				}
			case kv.OpTxn:
				ws, ok := seamWrites(*op.Txn)
				if !ok {
					return nil, false
				}
				for k, put := range ws {
					if !add(k, put) {
						return nil, false
					}
				}
			}
		}
		for k, put := range branch {
			out[k] = out[k] || put
		}
	}
	return out, true
}

// skipOnce counts a comparison skipped for reason, and logs the first.
func (d *differ) skipOnce(reason, detail string) {
	if d.skipped == nil {
		d.skipped = map[string]int{}
	}
	if d.skipped[reason] == 0 {
		d.t.Logf("%s; first seen:\n%s", reason, detail)
	}
	d.skipped[reason]++
}

// exec runs st on sd and formats its answer in store-independent terms.
func (d *differ) exec(sd *side, st step) answer {
	d.t.Helper()
	ctx := d.ctx
	var ans answer
	var err error
	switch st.kind {
	case stepTxn:
		var res kv.TxnResult
		res, err = sd.s.Txn(ctx, sd.concrete(st.txn))
		if err == nil {
			ans.cmp = sd.fmtTxnResult(st.txn, res)
			d.seen(sd, res.Revision)
		}
	case stepRange:
		var res kv.RangeResult
		res, err = sd.s.Range(ctx, st.rng)
		if err == nil {
			ans.cmp = sd.fmtRange(res)
			d.seen(sd, res.Revision)
		}
	case stepGrant:
		var id kv.LeaseID
		id, err = sd.s.Grant(ctx, st.ttl)
		if err == nil {
			if id == 0 || slices.Contains(sd.leases, id) || id == diffBogusLease {
				d.t.Fatalf("step %d: %s granted lease %#x, zero or not new", d.step, sd.name, id)
			}
			sd.leases = append(sd.leases, id)
			ans.cmp = fmt.Sprintf("granted L%d, %s", len(sd.leases), d.probe(sd))
		}
	case stepKeepAlive:
		var ttl time.Duration
		ttl, err = sd.s.KeepAliveOnce(ctx, sd.lease(st.lease))
		if err == nil {
			ans.cmp = fmt.Sprintf("ttl=%v", ttl)
		}
	case stepRevoke:
		err = sd.s.Revoke(ctx, sd.lease(st.lease))
		if err == nil {
			ans.cmp = "revoked, " + d.probe(sd)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			d.t.Fatalf("step %d: %s: %v", d.step, sd.name, err)
		}
		// Errors are compared by class: the seam's sentinels, or any
		// other error. After one, the revision must not have moved.
		ans.cmp = "error " + errClass(err) + ", " + d.probe(sd)
		ans.detail = ans.cmp + " (" + err.Error() + ")"
	} else {
		ans.detail = ans.cmp
	}
	return ans
}

// probe reads the store's revision, relative.
func (d *differ) probe(sd *side) string {
	d.t.Helper()
	res, err := sd.s.Range(d.ctx, kv.RangeRequest{Start: diffPrefix + "~probe"})
	if err != nil {
		d.t.Fatalf("step %d: %s: probe: %v", d.step, sd.name, err)
	}
	d.seen(sd, res.Revision)
	return "rev=" + sd.rel(res.Revision)
}

func (d *differ) seen(sd *side, rev int64) {
	if sd == d.sides[0] {
		d.cur = max(d.cur, rev-sd.base)
	}
}

func errClass(err error) string {
	for _, s := range []error{kv.ErrLeaseNotFound, kv.ErrTxnTooLarge, kv.ErrCompacted, kv.ErrClosed} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return "(no kv sentinel)"
}

// concrete maps a step's transaction to this store's revisions and leases.
func (sd *side) concrete(t kv.Txn) kv.Txn {
	out := kv.Txn{If: slices.Clone(t.If), Then: sd.concreteOps(t.Then), Else: sd.concreteOps(t.Else)}
	for i, c := range out.If {
		if (c.Target == kv.CreateRevision || c.Target == kv.ModRevision) && c.Int != 0 {
			out.If[i].Int = sd.base + c.Int
		}
	}
	return out
}

func (sd *side) concreteOps(ops []kv.Op) []kv.Op {
	if ops == nil {
		return nil
	}
	out := make([]kv.Op, len(ops))
	for i, op := range ops {
		out[i] = op
		switch op.Type {
		case kv.OpPut:
			switch op.Lease {
			case 0, diffBogusLease:
			default:
				out[i].Lease = sd.lease(int(op.Lease))
			}
		case kv.OpTxn:
			out[i] = kv.Nested(sd.concrete(*op.Txn))
		}
	}
	return out
}

// lease returns this store's lease number n (0: the bogus lease).
func (sd *side) lease(n int) kv.LeaseID {
	if n <= 0 || n > len(sd.leases) {
		return diffBogusLease
	}
	return sd.leases[n-1]
}

func (sd *side) leaseName(id kv.LeaseID) string {
	switch i := slices.Index(sd.leases, id); {
	case id == 0:
		return "-"
	case id == diffBogusLease:
		return "Lbogus"
	case i >= 0:
		return "L" + strconv.Itoa(i+1)
	default:
		return fmt.Sprintf("L?%#x", int64(id))
	}
}

// rel formats rev relative to the start revision; 0 (none) as 0.
func (sd *side) rel(rev int64) string {
	if rev == 0 {
		return "0"
	}
	return fmt.Sprintf("%+d", rev-sd.base)
}

func (sd *side) fmtKV(e kv.KeyValue) string {
	return fmt.Sprintf("%s=%s(c%s m%s v%d %s)", fmtKey(e.Key), fmtValue(e.Value), sd.rel(e.CreateRevision), sd.rel(e.ModRevision), e.Version, sd.leaseName(e.Lease))
}

// fmtRange formats a Range result.
func (sd *side) fmtRange(res kv.RangeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rev=%s more=%v [", sd.rel(res.Revision), res.More)
	for i, e := range res.KVs {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(sd.fmtKV(e))
	}
	b.WriteString("]")
	return b.String()
}

// fmtTxnResult formats res, the result of t, op by op of the branch that ran.
func (sd *side) fmtTxnResult(t kv.Txn, res kv.TxnResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{ok=%v rev=%s", res.Succeeded, sd.rel(res.Revision))
	ops := t.Then
	if !res.Succeeded {
		ops = t.Else
	}
	if len(res.Results) != len(ops) {
		fmt.Fprintf(&b, " %d results for %d ops}", len(res.Results), len(ops))
		return b.String()
	}
	for i, op := range ops {
		r := res.Results[i]
		switch {
		case op.Type == kv.OpGet && r.KV == nil && r.Txn == nil:
			b.WriteString(" get:missing")
		case op.Type == kv.OpGet && r.KV != nil && r.Txn == nil:
			b.WriteString(" get:" + sd.fmtKV(*r.KV))
		case op.Type == kv.OpTxn && r.Txn != nil && r.KV == nil:
			b.WriteString(" " + sd.fmtTxnResult(*op.Txn, *r.Txn))
		case (op.Type == kv.OpPut || op.Type == kv.OpDelete) && r.KV == nil && r.Txn == nil:
			b.WriteString(" -")
		default:
			fmt.Fprintf(&b, " unexpected result %+v for op type %d", r, op.Type)
		}
	}
	b.WriteString("}")
	return b.String()
}

func fmtKey(k string) string {
	if rest, ok := strings.CutPrefix(k, diffPrefix); ok {
		return strconv.Quote(rest)
	}
	return "outside:" + strconv.Quote(k)
}

func fmtValue(v []byte) string {
	if v == nil {
		return "nil"
	}
	return strconv.Quote(string(v))
}

func fmtStep(st step) string {
	switch st.kind {
	case stepTxn:
		return "Txn " + fmtTxn(st.txn)
	case stepRange:
		r := st.rng
		end := fmtKey(r.End)
		switch r.End {
		case "":
			end = "(Start alone)"
		case "\x00":
			end = `"\x00" (to the end)`
		case kv.PrefixEnd(diffPrefix):
			end = "(prefix end)"
		}
		return fmt.Sprintf("Range [%s, %s) limit=%d keysOnly=%v serializable=%v", fmtKey(r.Start), end, r.Limit, r.KeysOnly, r.Serializable)
	case stepGrant:
		return fmt.Sprintf("Grant ttl=%v", st.ttl)
	case stepKeepAlive:
		return "KeepAliveOnce " + fmtLeaseNum(st.lease)
	case stepRevoke:
		return "Revoke " + fmtLeaseNum(st.lease)
	}
	return "?"
}

func fmtLeaseNum(n int) string {
	if n == 0 {
		return "Lbogus"
	}
	return "L" + strconv.Itoa(n)
}

var (
	targetNames = map[kv.Target]string{kv.Version: "ver", kv.CreateRevision: "create", kv.ModRevision: "mod", kv.Value: "value"}
	opNames     = map[kv.CmpOp]string{kv.Equal: "=", kv.NotEqual: "!=", kv.Less: "<", kv.Greater: ">"}
)

func fmtTxn(t kv.Txn) string {
	var b strings.Builder
	b.WriteString("{if[")
	for i, c := range t.If {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s(%s)%s", targetNames[c.Target], fmtKey(c.Key), opNames[c.Op])
		switch {
		case c.Target == kv.Value:
			b.WriteString(fmtValue(c.Bytes))
		case c.Target == kv.Version || c.Int == 0:
			fmt.Fprintf(&b, "%d", c.Int)
		default:
			fmt.Fprintf(&b, "start%+d", c.Int)
		}
	}
	b.WriteString("] then[" + fmtOps(t.Then) + "] else[" + fmtOps(t.Else) + "]}")
	return b.String()
}

func fmtOps(ops []kv.Op) string {
	s := make([]string, len(ops))
	for i, op := range ops {
		switch op.Type {
		case kv.OpGet:
			s[i] = "get " + fmtKey(op.Key)
		case kv.OpPut:
			s[i] = "put " + fmtKey(op.Key) + "=" + fmtValue(op.Value)
			switch op.Lease {
			case 0:
			case diffBogusLease:
				s[i] += " Lbogus"
			default:
				s[i] += " L" + strconv.Itoa(int(op.Lease))
			}
		case kv.OpDelete:
			s[i] = "del " + fmtKey(op.Key)
		case kv.OpTxn:
			s[i] = "txn" + fmtTxn(*op.Txn)
		}
	}
	return strings.Join(s, ", ")
}

// gen generates the steps.
type gen struct {
	r       *rand.Rand
	cur     int64 // the store's revision, relative: compares aim around it
	leases  int   // leases granted: numbers 1..leases
	revoked map[int]bool
}

func (g *gen) next() step {
	live := g.live()
	switch x := g.r.IntN(100); {
	case x < 55:
		return step{kind: stepTxn, txn: g.txn(0, map[string]bool{}, g.r.IntN(10) == 0)}
	case x < 75:
		return step{kind: stepRange, rng: g.rangeRequest()}
	case x < 81 && len(live) < diffMaxLeases:
		g.leases++
		ttls := []time.Duration{time.Minute, 90*time.Second + 500*time.Millisecond, 2 * time.Minute, 5 * time.Minute}
		return step{kind: stepGrant, ttl: ttls[g.r.IntN(len(ttls))]}
	case x < 88:
		return step{kind: stepKeepAlive, lease: g.someLease(live)}
	case x < 95:
		n := g.someLease(live)
		if n != 0 {
			g.revoked[n] = true
		}
		return step{kind: stepRevoke, lease: n}
	default:
		// A transaction without compares: it writes more often.
		return step{kind: stepTxn, txn: kv.Txn{Then: g.ops(1, map[string]bool{}, false, 1+g.r.IntN(3))}}
	}
}

func (g *gen) live() []int {
	var live []int
	for n := 1; n <= g.leases; n++ {
		if !g.revoked[n] {
			live = append(live, n)
		}
	}
	return live
}

// someLease picks a live lease mostly, else a revoked one or the bogus one
// (0).
func (g *gen) someLease(live []int) int {
	switch x := g.r.IntN(100); {
	case x < 75 && len(live) > 0:
		return live[g.r.IntN(len(live))]
	case x < 92 && g.leases > 0:
		return 1 + g.r.IntN(g.leases)
	default:
		return 0
	}
}

func (g *gen) key() string { return diffPrefix + diffKeys[g.r.IntN(len(diffKeys))] }

func (g *gen) value() []byte { return []byte(diffValues[g.r.IntN(len(diffValues))]) }

func (g *gen) rangeRequest() kv.RangeRequest {
	r := kv.RangeRequest{Start: g.key()}
	if g.r.IntN(8) == 0 {
		r.Start = diffPrefix
	}
	switch x := g.r.IntN(100); {
	case x < 30: // Start alone
	case x < 60:
		r.End = kv.PrefixEnd(diffPrefix)
	case x < 85:
		r.End = g.key() // may be at or before Start: nothing
	default:
		r.End = "\x00" // to the end of the key space
	}
	if g.r.IntN(2) == 0 {
		r.Limit = 1 + g.r.IntN(4)
	}
	r.KeysOnly = g.r.IntN(4) == 0
	r.Serializable = g.r.IntN(3) == 0
	return r
}

func (g *gen) cmp() kv.Cmp {
	c := kv.Cmp{Key: g.key(), Op: kv.CmpOp(1 + g.r.IntN(4))}
	switch g.r.IntN(5) {
	case 0:
		c.Target, c.Int = kv.Version, int64(g.r.IntN(5))
	case 1:
		c.Target, c.Int = kv.CreateRevision, g.rev()
	case 2:
		c.Target, c.Int = kv.ModRevision, g.rev()
	case 3:
		c.Target = kv.Value
		c.Bytes = g.value()
		if g.r.IntN(8) == 0 {
			c.Bytes = nil
		}
	default:
		// Missing and Exists, as the coordinator writes them.
		if g.r.IntN(2) == 0 {
			return kv.Missing(c.Key)
		}
		return kv.Exists(c.Key)
	}
	return c
}

// rev returns a relative revision around the current one, or 0.
func (g *gen) rev() int64 {
	if g.r.IntN(6) == 0 {
		return 0
	}
	return 1 + g.r.Int64N(g.cur+2)
}

// txn generates a transaction nested depth levels deep. used holds the keys
// written by the enclosing branches so far; unless chaos, no key is written
// twice in one branch (the seam forbids it), and the keys this
// transaction's branches write are added to used.
func (g *gen) txn(depth int, used map[string]bool, chaos bool) kv.Txn {
	var t kv.Txn
	for range g.r.IntN(4) {
		t.If = append(t.If, g.cmp())
	}
	thenUsed, elseUsed := maps.Clone(used), maps.Clone(used)
	t.Then = g.ops(depth, thenUsed, chaos, g.r.IntN(5))
	t.Else = g.ops(depth, elseUsed, chaos, g.r.IntN(4))
	maps.Copy(used, thenUsed)
	maps.Copy(used, elseUsed)
	return t
}

func (g *gen) ops(depth int, used map[string]bool, chaos bool, n int) []kv.Op {
	var ops []kv.Op
	for range n {
		x := g.r.IntN(100)
		if x >= 85 && depth < 3 {
			ops = append(ops, kv.Nested(g.txn(depth+1, used, chaos)))
			continue
		}
		if x < 25 || x >= 85 {
			ops = append(ops, kv.Get(g.key()))
			continue
		}
		key := g.writeKey(used, chaos)
		switch {
		case key == "":
			ops = append(ops, kv.Get(g.key()))
		case x < 65:
			ops = append(ops, kv.Put(key, g.value(), g.putLease()))
		default:
			ops = append(ops, kv.Delete(key))
		}
	}
	return ops
}

// writeKey picks a key to write that used does not hold, unless chaos, and
// adds it; "" if there is none.
func (g *gen) writeKey(used map[string]bool, chaos bool) string {
	k := g.key()
	if chaos && g.r.IntN(20) == 0 {
		k = "" // rejected by both
	}
	if !chaos {
		var free []string
		for _, name := range diffKeys {
			if !used[diffPrefix+name] {
				free = append(free, diffPrefix+name)
			}
		}
		if len(free) == 0 {
			return ""
		}
		k = free[g.r.IntN(len(free))]
	}
	used[k] = true
	return k
}

// putLease returns the lease of a put: mostly none, else a live lease,
// sometimes a revoked or the bogus one.
func (g *gen) putLease() kv.LeaseID {
	if g.r.IntN(4) != 0 {
		return 0
	}
	n := g.someLease(g.live())
	if n == 0 {
		if g.r.IntN(3) != 0 {
			return 0
		}
		return diffBogusLease
	}
	return kv.LeaseID(n)
}

// collectUntil reads events from ch until one for key arrives, failing on
// an error, a closed channel or the failure guard's time-out.
func collectUntil(t *testing.T, name string, ch <-chan kv.WatchResponse, key string) []kv.Event {
	t.Helper()
	var evs []kv.Event
	timeout := time.After(20 * time.Second)
	for {
		select {
		case resp, ok := <-ch:
			if !ok {
				t.Fatalf("%s: watch closed after %d events", name, len(evs))
			}
			if resp.Err != nil {
				t.Fatalf("%s: watch ended after %d events: %v", name, len(evs), resp.Err)
			}
			for i := 1; i < len(resp.Events); i++ {
				if resp.Events[i].KV.ModRevision < resp.Events[i-1].KV.ModRevision {
					t.Fatalf("%s: watch response out of revision order at event %d", name, len(evs)+i)
				}
			}
			evs = append(evs, resp.Events...)
			if len(resp.Events) > 0 && resp.Events[len(resp.Events)-1].KV.Key == key {
				return evs
			}
		case <-timeout:
			t.Fatalf("%s: no watch event for %q after %d events", name, key, len(evs))
		}
	}
}

// compareEvents compares the two watch streams event by event.
func (d *differ) compareEvents(events [2][]kv.Event) {
	d.t.Helper()
	var f [2][]string
	for i, sd := range d.sides {
		for _, e := range events[i] {
			typ := "put"
			if e.Type == kv.EventDelete {
				typ = "del"
			}
			f[i] = append(f[i], typ+" "+sd.fmtKV(e.KV))
		}
	}
	for i := range max(len(f[0]), len(f[1])) {
		a, b := "(none)", "(none)"
		if i < len(f[0]) {
			a = f[0][i]
		}
		if i < len(f[1]) {
			b = f[1][i]
		}
		if a != b {
			from := max(0, i-8)
			d.t.Fatalf("watch event %d differs (of %d etcd, %d localstore events):\n\t%-10s %s\n\t%-10s %s\nthe events before it:\n\t%s",
				i, len(f[0]), len(f[1]), "etcd:", a, "localstore:", b, strings.Join(f[0][from:i], "\n\t"))
		}
	}
	d.t.Logf("%d watch events alike", len(f[0]))
}
