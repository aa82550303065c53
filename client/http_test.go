package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/coordinator"
)

// batchDaemon answers POST /v1/jobs/batch as the daemon does with its
// defaults: at most 32 MiB of body (413 over it) and 10,000 jobs, of the
// kind echo only. It counts the requests.
func batchDaemon(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/jobs/batch" {
			http.Error(w, `{"error":"unexpected request"}`, http.StatusTeapot)
			return
		}
		requests.Add(1)
		var req struct {
			Jobs []struct {
				Kind    string          `json:"kind"`
				Payload json.RawMessage `json:"payload"`
			} `json:"jobs"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 32<<20)).Decode(&req); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				fmt.Fprintf(w, `{"error":"request body is over the %d-byte limit: send a smaller payload or fewer jobs per batch"}`, 32<<20)
				return
			}
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":%q}`, err.Error())
			return
		}
		if len(req.Jobs) > 10000 {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"too many jobs in one batch"}`)
			return
		}
		for i, j := range req.Jobs {
			if j.Kind != "echo" {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintf(w, `{"error":"job %d: unknown kind %s: this daemon runs echo"}`, i, j.Kind)
				return
			}
		}
		res := struct {
			Jobs    []*coordinator.Job `json:"jobs"`
			Existed []bool             `json:"existed"`
		}{Existed: make([]bool, len(req.Jobs))}
		for range req.Jobs {
			res.Jobs = append(res.Jobs, &coordinator.Job{ID: fmt.Sprintf("J%d", requests.Load()), Kind: "echo", State: coordinator.StateAvailable})
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(res)
	}))
	t.Cleanup(srv.Close)
	return srv, &requests
}

// A batch of valid jobs is split into requests the daemon accepts, by size
// as well as by count: 1,000 jobs of 40 KB each are 40 MB, over the
// daemon's 32 MiB body limit for one batch, though every job is fine.
func TestHTTPInsertManySplitsBySize(t *testing.T) {
	srv, requests := batchDaemon(t)
	c, err := client.NewHTTP(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	payload := json.RawMessage(`{"msg":"` + strings.Repeat("x", 40<<10) + `"}`)
	ps := make([]client.InsertParams, 1000)
	for i := range ps {
		ps[i] = client.InsertParams{Args: client.RawArgs{KindName: "echo", Payload: payload}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs, err := c.InsertMany(ctx, ps)
	if err != nil {
		t.Fatalf("InsertMany of 1,000 valid 40 KB jobs: %v (after %d requests)", err, requests.Load())
	}
	if len(rs) != len(ps) {
		t.Fatalf("%d results for %d jobs", len(rs), len(ps))
	}
	if n := requests.Load(); n < 2 {
		t.Fatalf("%d requests, want the batch split", n)
	}
}

// fakeDaemon answers every request with status and body, as a daemon (or
// whatever else listens at the client's URL) might.
func fakeDaemon(t *testing.T, status int, body string) *client.Client {
	t.Helper()
	return clientOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
}

// clientOn returns a client of a test server that h serves; both end with
// the test.
func clientOn(t *testing.T, h http.Handler) *client.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := client.NewHTTP(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

const someID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"

// Only the API's own answers become the coordinator's sentinels: a caller
// that drops a job on ErrInvalid, or forgets one on ErrNotFound, must not
// do so because the URL points at the wrong thing.
func TestHTTPSentinelsOnlyForTheAPIsAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sentinels := []error{coordinator.ErrInvalid, coordinator.ErrNotFound, coordinator.ErrWrongState, coordinator.ErrConflict}
	isSentinel := func(err error) bool {
		for _, s := range sentinels {
			if errors.Is(err, s) {
				return true
			}
		}
		return false
	}

	// An http:// URL for a daemon that serves HTTPS: Go's server answers a
	// plain-text 400.
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	c, err := client.NewHTTP(strings.Replace(tlsSrv.URL, "https://", "http://", 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Insert(ctx, client.RawArgs{KindName: "echo"}, nil); err == nil || isSentinel(err) {
		t.Errorf("insert over http:// to an https:// daemon: %v, want an error that is no sentinel", err)
	}

	for name, tc := range map[string]struct {
		status int
		body   string
	}{
		"the daemon's own 404 for a URL with a path it does not serve": {http.StatusNotFound, `{"error":"no endpoint GET /leasehold/v1/jobs/` + someID + `: the API is under /v1/ (jobs, workers, stats, health, queues, periodic)"}` + "\n"},
		"a web server's 404 page":                                      {http.StatusNotFound, "<html><body>404 page not found</body></html>"},
		"a web server's 400 page":                                      {http.StatusBadRequest, "400 Bad Request"},
		"a web server's 409 page":                                      {http.StatusConflict, "409 Conflict"},
		"a web server's 413 page":                                      {http.StatusRequestEntityTooLarge, "<html>Request Entity Too Large</html>"},
		"a JSON 404 of some other API":                                 {http.StatusNotFound, `{"message":"not found"}`},
		"the daemon's 405 for a wrong method":                          {http.StatusMethodNotAllowed, `{"error":"method GET is not allowed on /v1/jobs/x: use POST"}`},
	} {
		c := fakeDaemon(t, tc.status, tc.body)
		if _, err := c.Get(ctx, someID); err == nil || isSentinel(err) {
			t.Errorf("%s: Get: %v, want an error that is no sentinel", name, err)
		}
	}

	// The API's own answers do map.
	for _, tc := range []struct {
		status int
		body   string
		want   error
	}{
		{http.StatusNotFound, `{"error":"job not found: ` + someID + `"}`, coordinator.ErrNotFound},
		{http.StatusBadRequest, `{"error":"unknown kind nope: this daemon runs echo"}`, coordinator.ErrInvalid},
		{http.StatusRequestEntityTooLarge, `{"error":"request body is over the 1114112-byte limit: send a smaller payload"}`, coordinator.ErrInvalid},
		{http.StatusConflict, `{"error":"job ` + someID + ` is already completed: only unfinished jobs can be cancelled"}`, coordinator.ErrWrongState},
	} {
		c := fakeDaemon(t, tc.status, tc.body)
		if _, err := c.Get(ctx, someID); !errors.Is(err, tc.want) {
			t.Errorf("%d %s: %v, want %v", tc.status, tc.body, err, tc.want)
		}
	}
}

// A 409 for an operation that kept losing races is ErrConflict (safe to
// retry), as the coordinator returns it, not ErrWrongState.
func TestHTTPConflictIsErrConflict(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := fakeDaemon(t, http.StatusConflict, `{"error":"cancel job `+someID+`: too many concurrent changes, try again"}`+"\n")
	_, err := c.Cancel(ctx, someID)
	if !errors.Is(err, coordinator.ErrConflict) || errors.Is(err, coordinator.ErrWrongState) {
		t.Fatalf("Cancel answered 409 for a conflict: %v, want ErrConflict (and not ErrWrongState)", err)
	}
}

// checkingDaemon answers POST /v1/jobs as the daemon does for the fields
// it checks itself: timeout (a duration of at least 1ms) and
// unique.by_period (a positive duration), 400 otherwise.
func checkingDaemon(t *testing.T) *client.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Kind    string `json:"kind"`
			Timeout string `json:"timeout"`
			Unique  *struct {
				ByPeriod string `json:"by_period"`
			} `json:"unique"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":%q}`, err.Error())
			return
		}
		if req.Timeout != "" {
			if d, err := time.ParseDuration(req.Timeout); err != nil || d < time.Millisecond {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintf(w, `{"error":"timeout %s is not a duration of at least 1ms"}`, req.Timeout)
				return
			}
		}
		if req.Unique != nil && req.Unique.ByPeriod != "" {
			if d, err := time.ParseDuration(req.Unique.ByPeriod); err != nil || d <= 0 {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintf(w, `{"error":"unique.by_period %s is not a positive duration"}`, req.Unique.ByPeriod)
				return
			}
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"job": coordinator.Job{ID: someID, Kind: req.Kind, State: coordinator.StateAvailable}})
	}))
	t.Cleanup(srv.Close)
	c, err := client.NewHTTP(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Options the coordinator refuses are refused over HTTP too, not dropped
// on the way: a negative timeout or unique period inserted a job without
// either.
func TestHTTPInsertSendsNegativeOptions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := checkingDaemon(t)
	if _, err := c.Insert(ctx, client.RawArgs{KindName: "echo"}, &client.InsertOpts{Timeout: -time.Second}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Errorf("negative timeout: %v, want ErrInvalid", err)
	}
	if _, err := c.Insert(ctx, client.RawArgs{KindName: "echo"}, &client.InsertOpts{Unique: &coordinator.UniqueOpts{ByPeriod: -time.Hour}}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Errorf("negative unique period: %v, want ErrInvalid", err)
	}
	if _, err := c.Insert(ctx, client.RawArgs{KindName: "echo"}, &client.InsertOpts{Timeout: time.Second, Unique: &coordinator.UniqueOpts{ByPeriod: time.Hour}}); err != nil {
		t.Errorf("positive timeout and period: %v", err)
	}
}

// An error in a later request of a split batch names the job by its index
// in the caller's slice, not in that request.
func TestHTTPInsertManyNamesTheJobOfALaterBatch(t *testing.T) {
	srv, requests := batchDaemon(t)
	c, err := client.NewHTTP(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ps := make([]client.InsertParams, 1500)
	for i := range ps {
		ps[i] = client.InsertParams{Args: client.RawArgs{KindName: "echo"}}
	}
	ps[1203].Args = client.RawArgs{KindName: "nope"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs, err := c.InsertMany(ctx, ps)
	if !errors.Is(err, coordinator.ErrInvalid) || len(rs) != 1000 || requests.Load() != 2 {
		t.Fatalf("InsertMany = %d results, %v after %d requests; want 1000 and ErrInvalid after 2", len(rs), err, requests.Load())
	}
	if !strings.Contains(err.Error(), "job 1203:") || strings.Contains(err.Error(), "job 203:") {
		t.Fatalf("error %q does not name job 1203", err)
	}
}

// A token read from a file ends with a line break, which the daemon and
// the CLI trim; the client did not, and every request failed to be sent.
func TestHTTPTokenFromAFile(t *testing.T) {
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		_ = json.NewEncoder(w).Encode(map[string]any{"job": coordinator.Job{ID: someID, State: coordinator.StateCompleted}})
	}))
	t.Cleanup(srv.Close)
	c, err := client.NewHTTP(srv.URL, &client.Options{Token: "s3cret\n"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Cancel(ctx, someID); err != nil {
		t.Fatalf("Cancel with a token that ends in a line break: %v", err)
	}
	if got := auth.Load(); got != "Bearer s3cret" {
		t.Fatalf("Authorization %q, want %q", got, "Bearer s3cret")
	}
	if _, err := client.NewHTTP(srv.URL, &client.Options{Token: "two\nlines"}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Fatalf("NewHTTP with a token of two lines: %v, want ErrInvalid", err)
	}
}
