package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/internal/testutil"
)

// waitSignalStore says on seen when a watch of job id's record starts
// ("watch") and when a transaction reads it ("read").
type waitSignalStore struct {
	kv.Store
	id   string
	seen chan string
}

func (s *waitSignalStore) isJob(key string) bool {
	return s.id != "" && strings.HasSuffix(key, "j/"+s.id)
}

func (s *waitSignalStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.WatchResponse {
	if s.isJob(prefix) {
		s.seen <- "watch"
	}
	return s.Store.Watch(ctx, prefix, fromRev)
}

func (s *waitSignalStore) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	for _, op := range t.Then {
		if op.Type == kv.OpGet && s.isJob(op.Key) {
			s.seen <- "read"
			break
		}
	}
	return s.Store.Txn(ctx, t)
}

// Long-polls beyond Config.WaitWatches do not watch the store (each watch
// wakes at every write, and anyone who may read can open thousands): they
// read their job every waitPoll instead, and answer once it is final as
// the others do.
func TestAPILongPollsBeyondTheWatchLimitPoll(t *testing.T) {
	defer func(d time.Duration) { waitPoll = d }(waitPoll)
	waitPoll = 10 * time.Millisecond
	store := &waitSignalStore{seen: make(chan string, 1024)}
	coord, h := newAPIOn(t, func(s kv.Store) kv.Store { store.Store = s; return store },
		Config{Kinds: map[string]PayloadCheck{"echo": nil}, WaitWatches: 1})
	ctx := context.Background()
	res, err := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "echo", ScheduledAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Job.ID
	store.id = id

	// Ended when the test ends, failed or not: none outlives it.
	reqCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	answers := make(chan *httptest.ResponseRecorder, 2)
	poll := func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(reqCtx, "GET", "/v1/jobs/"+id+"?wait=1m", nil))
		answers <- rec
	}
	next := func() string {
		select {
		case e := <-store.seen:
			return e
		case rec := <-answers:
			t.Fatalf("a long-poll answered before its job was final: %d %s", rec.Code, rec.Body)
		}
		return ""
	}
	go poll()
	for next() != "watch" {
	}
	// The limit is reached: the second reads, then reads again.
	go poll()
	for i := range 2 {
		if e := next(); e != "read" {
			t.Fatalf("a long-poll beyond the limit of 1 watch: %s at its step %d, want two reads (and no watch)", e, i+1)
		}
	}
	if _, err := coord.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		rec := <-answers
		var got JobResponse
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil || got.Job.State != coordinator.StateCancelled {
			t.Errorf("long-poll: %d %s, want 200 with the job cancelled", rec.Code, rec.Body)
		}
	}
}

// A job's JSON holds whatever its enqueuer sent: it goes out with nosniff,
// and with HTML's characters escaped, so that no browser renders it as a
// page.
func TestAPIJobJSONIsNotAPage(t *testing.T) {
	_, h := newAPIOn(t, nil, Config{Kinds: map[string]PayloadCheck{"resize": nil}})
	code, body := testutil.APICall(t, h, "POST", "/v1/jobs", `{"kind":"resize","payload":{"x":"<script>alert(1)</script>"}}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	var created JobResponse
	if err := json.Unmarshal([]byte(body), &created); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/jobs/"+created.Job.ID, nil))
	if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options %q, want nosniff", got)
	}
	if strings.Contains(rec.Body.String(), "<script>") {
		t.Errorf("the job's JSON holds the payload's HTML as is: %s", rec.Body.String())
	}
}
