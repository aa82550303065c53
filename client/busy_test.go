package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/apicall"
)

// busyDaemon answers its first refuse requests as a daemon beyond its
// connection bound does (503, Retry-After, marked not processed; or
// unmarked if mark is false), the others with a job; it counts the
// requests it got.
type busyDaemon struct {
	mu       sync.Mutex
	refuse   int
	mark     bool
	retry    string // Retry-After
	requests int
}

func (d *busyDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	d.mu.Lock()
	d.requests++
	refused := d.requests <= d.refuse
	d.mu.Unlock()
	if refused {
		w.Header().Set("Retry-After", d.retry)
		if d.mark {
			w.Header().Set(apicall.NotProcessedHeader, "true")
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":"the daemon has as many HTTP connections open as it serves at once (--http-max-connections 1) and did not process this request, nothing was written: retry later, or raise the bound"}`+"\n")
		return
	}
	_, _ = io.WriteString(w, `{"job":{"id":"`+someID+`","kind":"echo","queue":"default","state":"available"},"existed":false}`+"\n")
}

func (d *busyDaemon) sent() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.requests
}

// recordPauses makes the client's pauses between retries return at once,
// recording what they asked.
func recordPauses(t *testing.T) *[]time.Duration {
	var mu sync.Mutex
	var pauses []time.Duration
	client.SetBusyPause(t, func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		defer mu.Unlock()
		pauses = append(pauses, d)
		return ctx.Err()
	})
	return &pauses
}

// A request the daemon did not process is sent again, after the pause its
// Retry-After asks, and succeeds once the daemon takes it.
func TestHTTPBusyIsRetried(t *testing.T) {
	pauses := recordPauses(t)
	d := &busyDaemon{refuse: 2, mark: true, retry: "1"}
	c := clientOn(t, d)
	res, err := c.Insert(context.Background(), client.RawArgs{KindName: "echo"}, nil)
	if err != nil {
		t.Fatalf("insert refused twice, then taken: %v", err)
	}
	if res.Job.ID != someID || d.sent() != 3 {
		t.Errorf("insert: job %s after %d requests; want %s after 3", res.Job.ID, d.sent(), someID)
	}
	if len(*pauses) != 2 {
		t.Fatalf("pauses %v, want 2", *pauses)
	}
	for _, p := range *pauses {
		if p < time.Second || p > 5*time.Second/4 {
			t.Errorf("pause %v after Retry-After: 1; want from 1s to 1.25s", p)
		}
	}
}

// A daemon that keeps refusing: the client gives up after its attempts
// with ErrBusy, which is not context.DeadlineExceeded (nothing was
// written, the outcome is known), and says what the daemon said.
func TestHTTPBusyGivesUpWithErrBusy(t *testing.T) {
	pauses := recordPauses(t)
	d := &busyDaemon{refuse: 1 << 30, mark: true, retry: "0"}
	c := clientOn(t, d)
	_, err := c.Insert(context.Background(), client.RawArgs{KindName: "echo"}, nil)
	if !errors.Is(err, client.ErrBusy) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("insert always refused: %v; want ErrBusy, not context.DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "--http-max-connections") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q: want one line with the daemon's message", err)
	}
	if d.sent() != client.BusyAttempts || len(*pauses) != client.BusyAttempts-1 {
		t.Errorf("%d requests, %d pauses; want %d and %d", d.sent(), len(*pauses), client.BusyAttempts, client.BusyAttempts-1)
	}
	for _, p := range *pauses {
		if p <= 0 {
			t.Errorf("pause %v after Retry-After: 0; want a short one", p)
		}
	}
}

// The caller's context bounds the retries: a pause it would outlast is
// not taken, and one it cuts ends them; the error is ErrBusy either way.
func TestHTTPBusyRetriesWithinTheContext(t *testing.T) {
	d := &busyDaemon{refuse: 1 << 30, mark: true, retry: "1"}
	c := clientOn(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	pauses := recordPauses(t)
	if _, err := c.Get(ctx, someID); !errors.Is(err, client.ErrBusy) {
		t.Fatalf("get refused, with less time left than Retry-After: %v; want ErrBusy", err)
	}
	if d.sent() != 1 || len(*pauses) != 0 {
		t.Errorf("%d requests, pauses %v; want 1 and none (the pause would outlast the context)", d.sent(), *pauses)
	}

	d2 := &busyDaemon{refuse: 1 << 30, mark: true, retry: "1"}
	c2 := clientOn(t, d2)
	ctx2, cancel2 := context.WithCancel(context.Background())
	client.SetBusyPause(t, func(context.Context, time.Duration) error {
		cancel2() // the caller gives up during the first pause
		return context.Canceled
	})
	if _, err := c2.Get(ctx2, someID); !errors.Is(err, client.ErrBusy) || d2.sent() != 1 {
		t.Errorf("get whose context ends in the pause: %v after %d requests; want ErrBusy after 1", err, d2.sent())
	}
}

// An unmarked 503 with Retry-After is the store's deadline: not retried
// (a write may have been made), context.DeadlineExceeded, not ErrBusy.
func TestHTTPUnmarked503IsNotBusy(t *testing.T) {
	pauses := recordPauses(t)
	d := &busyDaemon{refuse: 1 << 30, retry: "5"}
	c := clientOn(t, d)
	_, err := c.Insert(context.Background(), client.RawArgs{KindName: "echo"}, nil)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrBusy) {
		t.Errorf("unmarked 503: %v; want context.DeadlineExceeded, not ErrBusy", err)
	}
	if d.sent() != 1 || len(*pauses) != 0 {
		t.Errorf("unmarked 503: %d requests, %d pauses; want 1, none", d.sent(), len(*pauses))
	}
}

// A daemon that drains answers each long-poll at once with the job as it
// is (StopWaits), for as long as its drain lasts: Wait pauses between such
// early answers rather than send request after request.
func TestHTTPWaitPausesAfterAnEarlyAnswer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const requests = 5
	d := &busyDaemon{} // every request answered at once: available
	c := clientOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.ServeHTTP(w, r)
		if d.sent() >= 10*requests {
			cancel() // the wait never pauses (the defect): end it
		}
	}))
	var pauses int
	client.SetBusyPause(t, func(ctx context.Context, _ time.Duration) error {
		pauses++
		if d.sent() >= requests {
			cancel()
		}
		return ctx.Err()
	})
	if _, err := c.Wait(ctx, someID); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait on a daemon that never answers final: %v; want context.Canceled", err)
	}
	if n := d.sent(); n > requests || pauses < n-1 {
		t.Errorf("%d requests, %d pauses; want at most %d requests, a pause between each two", n, pauses, requests)
	}
}

// A daemon that asks for long pauses: each is cut to 5 s (and up to a
// quarter more), and the pauses of one request stay within 10 s, as the
// README promises; then the error is ErrBusy.
func TestHTTPBusyPausesStayWithinTheirBounds(t *testing.T) {
	for _, retry := range []string{"5", "3600"} {
		pauses := recordPauses(t)
		d := &busyDaemon{refuse: 1 << 30, mark: true, retry: retry}
		c := clientOn(t, d)
		if _, err := c.Insert(context.Background(), client.RawArgs{KindName: "echo"}, nil); !errors.Is(err, client.ErrBusy) {
			t.Fatalf("Retry-After %s, always refused: %v; want ErrBusy", retry, err)
		}
		var total time.Duration
		for _, p := range *pauses {
			if p < 5*time.Second || p > 5*time.Second*5/4 {
				t.Errorf("Retry-After %s: pause %v; want from 5s to 6.25s", retry, p)
			}
			total += p
		}
		if total > 10*time.Second || len(*pauses) != 1 || d.sent() != 2 {
			t.Errorf("Retry-After %s: %d requests, pauses %v (%v in all); want 2 requests, one pause, at most 10s in all", retry, d.sent(), *pauses, total)
		}
	}
}
