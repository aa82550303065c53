package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// A daemon's goroutines and open descriptors do not grow with the work it
// has done: after five times the operations of a warm-up round (--exec
// jobs, long-polls that end with the job and long-polls that expire,
// dashboard pages and /metrics), go_goroutines and process_open_fds come
// back to within a few of what they were after the warm-up. A goroutine or
// descriptor kept per job, per command, per long-poll or per request
// (a watch left open, a pipe not closed) would add hundreds.
func TestDaemonGoroutinesAndFDsDoNotGrowWithWork(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "--exec", `sh=cat >/dev/null; echo '{"ok":true}'`)
	// No keep-alive: the client's idle connections would be the server's
	// goroutines and descriptors too.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	get := func(path string) (int, []byte, error) {
		resp, err := c.Get(d.server + path)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	enqueue := func(body string) (string, error) {
		resp, err := c.Post(d.server+"/v1/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var r struct {
			Job struct{ ID string } `json:"job"`
		}
		if resp.StatusCode != http.StatusCreated {
			b, _ := io.ReadAll(resp.Body)
			return "", fmt.Errorf("enqueue: %d %s", resp.StatusCode, b)
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return "", err
		}
		return r.Job.ID, nil
	}
	// one is one loop of the soak that found nothing growing: a job run by
	// its command and waited for, a wait on a job not yet due that
	// expires, and the dashboard's pages.
	one := func(i int) error {
		id, err := enqueue(fmt.Sprintf(`{"kind":"sh","payload":{"n":%d}}`, i))
		if err != nil {
			return err
		}
		code, b, err := get("/v1/jobs/" + id + "?wait=20s")
		if err != nil || code != http.StatusOK || !strings.Contains(string(b), `"state":"completed"`) {
			return fmt.Errorf("wait for %s: %d %s %v", id, code, b, err)
		}
		later, err := enqueue(`{"kind":"sh","delay":"1h"}`)
		if err != nil {
			return err
		}
		if code, b, err := get("/v1/jobs/" + later + "?wait=20ms"); err != nil || code != http.StatusOK {
			return fmt.Errorf("expiring wait for %s: %d %s %v", later, code, b, err)
		}
		for _, p := range []string{"/", "/jobs?state=completed", "/jobs/" + id, "/v1/stats", "/metrics"} {
			if code, b, err := get(p); err != nil || code != http.StatusOK {
				return fmt.Errorf("GET %s: %d %.200s %v", p, code, b, err)
			}
		}
		return nil
	}
	round := func(n int) {
		t.Helper()
		const clients = 4
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for k := range clients {
			wg.Go(func() {
				for i := k; i < n; i += clients {
					if err := one(i); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	counts := func() (goroutines, fds int) {
		t.Helper()
		code, b, err := get("/metrics")
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET /metrics: %d %v", code, err)
		}
		goroutines, fds = -1, -1
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			name, v, ok := strings.Cut(sc.Text(), " ")
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				continue
			}
			switch name {
			case "go_goroutines":
				goroutines = int(f)
			case "process_open_fds":
				fds = int(f)
			}
		}
		if goroutines < 0 || fds < 0 {
			t.Fatalf("/metrics has no go_goroutines or process_open_fds:\n%s", b)
		}
		return goroutines, fds
	}

	const warmUp = 10
	round(warmUp)
	time.Sleep(500 * time.Millisecond) // connections closed by the client end on the server
	g0, f0 := counts()
	round(5 * warmUp)
	// What ends with a request (its connection's goroutine and socket)
	// may end a moment after the client has its answer: look again for a
	// while before calling it growth.
	const slackG, slackF = 10, 4
	var g, f int
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, f = counts()
		if g <= g0+slackG && f <= f0+slackF {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d more loops of work: %d goroutines (%d after the warm-up), %d open fds (%d after the warm-up)", 5*warmUp, g, g0, f, f0)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("goroutines %d -> %d, open fds %d -> %d", g0, g, f0, f)
}
