package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/testutil"
)

// newSharedAPI serves the API as a shared-mode CLI command does (any kind
// of a live daemon, no kinds of its own) over a counting store.
func newSharedAPI(t *testing.T) (*testutil.RangeCountingStore, http.Handler) {
	t.Helper()
	log := testutil.QuietLogger(t)
	ls := testutil.TempLocal(t, log)
	store := &testutil.RangeCountingStore{Store: ls}
	coord, err := coordinator.New(store, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return store, New(Config{Coord: coord, Shared: true, Logger: log})
}

// newAPIOn serves the API with cfg over a coordinator on a temporary
// local store, wrapped by wrap if it is not nil.
func newAPIOn(t testing.TB, wrap func(kv.Store) kv.Store, cfg Config) (*coordinator.Coordinator, http.Handler) {
	t.Helper()
	log := testutil.QuietLogger(t)
	var store kv.Store = testutil.TempLocal(t, log)
	if wrap != nil {
		store = wrap(store)
	}
	coord, err := coordinator.New(store, coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Coord, cfg.Logger = coord, log
	return coord, New(cfg)
}

// A shared-mode batch reads the live daemons' kinds once, not once per
// job (each read scans every worker and ownership key).
func TestAPISharedBatchReadsLiveKindsOnce(t *testing.T) {
	store, h := newSharedAPI(t)
	const n = 50
	jobs := make([]string, n)
	for i := range jobs {
		jobs[i] = `{"kind":"resize","payload":{}}`
	}
	before := store.Ranges.Load()
	code, body := testutil.APICall(t, h, "POST", "/v1/jobs/batch", `{"jobs":[`+strings.Join(jobs, ",")+`]}`)
	if code != http.StatusCreated {
		t.Fatalf("batch: %d %s", code, body)
	}
	if reads := store.Ranges.Load() - before; reads >= n {
		t.Errorf("a batch of %d jobs made %d range reads: the live kinds are read per job", n, reads)
	}
}

// A store that cannot be read is not the client's fault: a batch answers
// 5xx, as a single create does, never 400 (which the CLI reports as bad
// input, exit 2).
func TestAPISharedBatchStoreErrorIsNotBadInput(t *testing.T) {
	store, h := newSharedAPI(t)
	store.FailRanges.Store(true)
	for _, c := range []struct{ path, body string }{
		{"/v1/jobs", `{"kind":"resize"}`},
		{"/v1/jobs/batch", `{"jobs":[{"kind":"resize"}]}`},
	} {
		code, body := testutil.APICall(t, h, "POST", c.path, c.body)
		if code < 500 {
			t.Errorf("POST %s with the store unreadable: %d %s, want 5xx", c.path, code, body)
		}
	}
}

// A CLI command on etcd whose request ran out of time: a read is simply
// retried, but a change may have been made, and an enqueue retried
// without a unique key could be enqueued twice: the answer says so.
func TestAPICLIDeadlineSaysWhetherAChangeMayHaveBeenMade(t *testing.T) {
	_, h := newAPIOn(t, nil, Config{Shared: true, CLI: true})
	for _, c := range []struct{ method, path, body, want string }{
		{"GET", "/v1/jobs", "", "then retry"},
		{"POST", "/v1/jobs", `{"kind":"resize"}`, "the job may or may not have been enqueued"},
		{"POST", "/v1/jobs/01JEXAMPXE0000000000000000/cancel", "", "the change may or may not have been made"},
	} {
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		req := httptest.NewRequestWithContext(ctx, c.method, c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		cancel()
		if body := rec.Body.String(); rec.Code != http.StatusServiceUnavailable || !strings.Contains(body, c.want) {
			t.Errorf("%s %s past its deadline: %d %s, want 503 saying %q", c.method, c.path, rec.Code, body, c.want)
		}
	}
}

// An endpoint that takes no body refuses one: whatever the caller asked
// for in it (a force flag, say) would otherwise be ignored while the change
// went ahead. Nothing is changed.
func TestAPIBodilessEndpointsRefuseABody(t *testing.T) {
	coord, h := newAPIOn(t, nil, Config{})
	r, err := coord.Enqueue(context.Background(), coordinator.EnqueueParams{Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	id := r.Job.ID
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/queues/default/pause?force=true"},
		{"POST", "/v1/queues/default/resume?force=true"},
		{"POST", "/v1/jobs/" + id + "/cancel"},
		{"POST", "/v1/jobs/" + id + "/retry"},
		{"DELETE", "/v1/jobs/" + id},
	} {
		for _, body := range []string{`{not json`, `{"force":true}`} {
			code, got := testutil.APICall(t, h, c.method, c.path, body)
			if code != http.StatusBadRequest || !strings.Contains(string(got), "takes no body") {
				t.Errorf("%s %s with body %s: %d %s, want 400 saying it takes no body", c.method, c.path, body, code, got)
			}
		}
	}
	if code, got := testutil.APICall(t, h, "GET", "/v1/jobs/"+id, ""); code != http.StatusOK || !strings.Contains(string(got), `"state":"available"`) {
		t.Errorf("the job after refused changes: %d %s, want it still available", code, got)
	}
	if q, err := coord.Queues(context.Background()); err != nil || len(q) != 1 || q[0].Paused {
		t.Errorf("queues after a refused pause: %+v, %v", q, err)
	}
}

// An unknown field in a nested object is named with that object's fields,
// not the top level's.
func TestAPIUnknownNestedFieldNamesItsObjectsFields(t *testing.T) {
	_, h := newAPIOn(t, nil, Config{})
	for _, c := range []struct{ path, body, want string }{
		{"/v1/jobs", `{"kind":"k","unique":{"by_args":true,"bogus":1}}`, `unknown field \"unique.bogus\": the fields of unique are by_args, by_period, by_queue, by_state`},
		{"/v1/jobs/batch", `{"jobs":[{"kind":"k","unique":{"bogus":1}}]}`, `unknown field \"jobs[0].unique.bogus\": the fields of jobs[0].unique are`},
		{"/v1/jobs", `{"kind":"k","bogus":1}`, `unknown field \"bogus\": the fields are kind, payload`},
	} {
		code, got := testutil.APICall(t, h, "POST", c.path, c.body)
		if code != http.StatusBadRequest || !strings.Contains(string(got), c.want) {
			t.Errorf("POST %s %s: %d %s, want 400 saying %s", c.path, c.body, code, got, c.want)
		}
	}
}

// tooLargeStore refuses every transaction as too large, as etcd servers
// with a lower --max-request-bytes than the daemon was told do.
type tooLargeStore struct{ kv.Store }

func (tooLargeStore) Txn(context.Context, kv.Txn) (kv.TxnResult, error) {
	return kv.TxnResult{}, fmt.Errorf("etcdkv: txn: %w (rpc error: request is too large)", kv.ErrTxnTooLarge)
}

// A write that the store refuses as too large, although it fit the limits
// the daemon was given, is 413 saying which limit to fix, not a 500 that
// says to retry (a retry cannot help).
func TestAPIStoreRefusingTooLargeSaysWhichLimit(t *testing.T) {
	_, h := newAPIOn(t, func(s kv.Store) kv.Store { return tooLargeStore{s} }, Config{Shared: true})
	code, got := testutil.APICall(t, h, "POST", "/v1/jobs", `{"kind":"resize"}`)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(got), "--max-request-bytes") {
		t.Errorf("enqueue refused by the store as too large: %d %s, want 413 naming --max-request-bytes", code, got)
	}
}

// noAnswerStore fails every write as one that an etcd member did not
// answer within the write timeout (it may hang): the write may have been
// applied.
type noAnswerStore struct{ kv.Store }

func (noAnswerStore) Txn(context.Context, kv.Txn) (kv.TxnResult, error) {
	return kv.TxnResult{}, fmt.Errorf("%w to a txn within 3s (a member may hang; the write may still be applied)", etcdkv.ErrNoAnswer)
}

// A write that a member did not answer is 503 saying the outcome is
// unknown and how to retry safely, in a daemon and in a CLI command, not
// a 500 that says to read the daemon's log.
func TestAPIWriteWithoutAnswerSaysTheOutcomeIsUnknown(t *testing.T) {
	for _, cli := range []bool{false, true} {
		_, h := newAPIOn(t, func(s kv.Store) kv.Store { return noAnswerStore{s} }, Config{Shared: true, CLI: cli})
		code, got := testutil.APICall(t, h, "POST", "/v1/jobs", `{"kind":"resize"}`)
		if code != http.StatusServiceUnavailable || !strings.Contains(string(got), "outcome is unknown") || !strings.Contains(string(got), "unique_key") {
			t.Errorf("CLI %v: enqueue without an answer: %d %s, want 503 saying the outcome is unknown", cli, code, got)
		}
	}
}
