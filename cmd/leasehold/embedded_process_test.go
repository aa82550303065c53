package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
)

// readHistories reads every daemon's history file in dir.
func readHistories(t *testing.T, dir string) []historyEvent {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var evs []historyEvent
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev historyEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				// A SIGKILL can cut the last line short; nothing after it
				// was acknowledged to anyone.
				continue
			}
			evs = append(evs, ev)
		}
	}
	return evs
}

// listAll reads every job from the daemon's API.
func listAll(t *testing.T, server string) map[string]*coordinator.Job {
	t.Helper()
	out := map[string]*coordinator.Job{}
	after := ""
	for {
		url := server + "/v1/jobs?limit=1000"
		if after != "" {
			url += "&after=" + after
		}
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		var page coordinator.ListPage
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			out[j.ID] = j
		}
		if page.Next == "" {
			return out
		}
		after = page.Next
	}
}

// TestEmbeddedKill9MidWorkload: the real daemon is SIGKILLed several times
// while jobs are being enqueued and run, and restarted on the same
// directory. Every acknowledged enqueue survives, every job completes, and
// no job has two accepted outcomes: a run cut by a kill is re-queued at
// restart and its token is never accepted again.
func TestEmbeddedKill9MidWorkload(t *testing.T) {
	dir, hist := t.TempDir(), t.TempDir()
	args := []string{"--history-dir", hist, "--concurrency", "16", "--shutdown-timeout", "100ms"}
	d := startDaemon(t, dir, args...)
	var server atomic.Pointer[string]
	server.Store(&d.server)

	var mu sync.Mutex
	acked := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the producer: batches of jobs, acknowledged or not
		defer wg.Done()
		hc := &http.Client{Timeout: 5 * time.Second}
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			n := len(acked)
			mu.Unlock()
			if n >= 600 { // enough work for every kill to land mid-run
				time.Sleep(10 * time.Millisecond)
				continue
			}
			var body bytes.Buffer
			body.WriteString(`{"jobs":[`)
			for i := range 20 {
				if i > 0 {
					body.WriteByte(',')
				}
				fmt.Fprintf(&body, `{"kind":"history","payload":{"ms":%d}}`, 20+rand.IntN(280))
			}
			body.WriteString(`]}`)
			resp, err := hc.Post(*server.Load()+"/v1/jobs/batch", "application/json", &body)
			if err != nil {
				time.Sleep(20 * time.Millisecond) // daemon down: try again
				continue
			}
			var res struct{ Jobs []coordinator.Job }
			err = json.NewDecoder(resp.Body).Decode(&res)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusCreated {
				continue
			}
			mu.Lock()
			for _, j := range res.Jobs {
				acked[j.ID] = true
			}
			mu.Unlock()
		}
	}()

	const kills = 4
	for k := range kills {
		// Let the workload get going: wait until jobs are running.
		deadline := time.Now().Add(20 * time.Second)
		for {
			evs := readHistories(t, hist)
			starts := 0
			for _, ev := range evs {
				if ev.Ev == "start" {
					starts++
				}
			}
			if starts > (k+1)*60 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("workload not running before kill %d", k+1)
			}
			time.Sleep(20 * time.Millisecond)
		}
		d.stop(t, syscall.SIGKILL)
		d = startDaemon(t, dir, args...)
		server.Store(&d.server)
	}
	close(stop)
	wg.Wait()
	okCLI(t, "jobs", "wait", "--all", "--timeout", "60s", "--server", d.server)

	jobs := listAll(t, d.server)
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 100 {
		t.Fatalf("only %d jobs acknowledged: the test tested little", len(acked))
	}
	for id := range acked {
		j, ok := jobs[id]
		if !ok {
			t.Errorf("acknowledged job %s lost after kill -9", id)
			continue
		}
		if j.State != coordinator.StateCompleted {
			t.Errorf("job %s ended %s", id, j.State)
		}
	}
	// The histories: one accepted final outcome per job, under the token
	// the record names; tokens of one job's runs strictly grow.
	evs := readHistories(t, hist)
	finals := map[string][]historyEvent{}
	starts := map[string][]historyEvent{}
	rescued := 0
	for _, ev := range evs {
		switch {
		case ev.Ev == "start":
			starts[ev.Job] = append(starts[ev.Job], ev)
		case ev.Ev == "outcome" && ev.Op == "complete" && ev.Accepted != nil && *ev.Accepted:
			finals[ev.Job] = append(finals[ev.Job], ev)
		}
	}
	for id, j := range jobs {
		if j.Rescues > 0 {
			rescued++
		}
		f := finals[id]
		// A kill can land after the outcome was written but before it was
		// logged: then the record has it and the history does not.
		if len(f) > 1 {
			t.Errorf("job %s has %d accepted completions: %+v", id, len(f), f)
		}
		if len(f) == 1 && f[0].Token != j.Token {
			t.Errorf("job %s: accepted completion under token %d, record says %d", id, f[0].Token, j.Token)
		}
		ss := starts[id]
		sort.Slice(ss, func(a, b int) bool { return ss[a].At.Before(ss[b].At) })
		for i := 1; i < len(ss); i++ {
			if ss[i].Token <= ss[i-1].Token {
				t.Errorf("job %s: run %d has token %d, not above %d", id, i+1, ss[i].Token, ss[i-1].Token)
			}
		}
	}
	if rescued == 0 {
		t.Errorf("no job was running at any of the %d kills: the test tested nothing", kills)
	}
	t.Logf("%d jobs acknowledged, %d rescued after kills, %d history events", len(acked), rescued, len(evs))
}
