package main

// The dashboard in a real browser: headless Chromium (Debian's chromium,
// installed by scripts/install-chromium.sh when missing) driven over the
// DevTools protocol by chromedp. The test loads the dashboard of a daemon
// under load, checks its counts against the API, cancels a running job
// from the page (first without the API token, which is refused, then with
// it), and saves screenshots to $LEASEHOLD_ARTIFACTS (default: a
// leasehold-artifacts directory under the system's temporary directory),
// which `make test` sets to ./artifacts.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// chromium returns the path of a Chromium, installing Debian's package if
// there is none; it skips the test, saying why, if that fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "install-chromium.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Logf("chromium not found: running %s", script)
	out, err := exec.CommandContext(ctx, "sh", script).Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + apiserver.OneLine(string(ee.Stderr))
		}
		t.Skipf("skipping the browser test: headless Chromium is not installed and %s could not install it (%s); install Debian's chromium package to run it", script, apiserver.TruncateString(msg, 400))
	}
	p := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(p, '\n'); i >= 0 {
		p = p[i+1:]
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("skipping the browser test: %s did not report a chromium binary (%q)", script, p)
	}
	return p
}

// artifactsDir is where the test leaves screenshots for CI to keep.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("LEASEHOLD_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "leasehold-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser starts headless Chromium with a fresh profile and returns a tab.
func browser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx)
		cancel()
		acancel()
	})
	return ctx
}

func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: not in -short mode")
	}
	exe := chromium(t)
	const token = "browser-test-token-0123456789"
	e := newOpsEnv(t, opsOpts{token: token, concurrency: 8})

	// A workload that settles: echo jobs complete, fail jobs are
	// discarded or complete after one retry, some jobs are cancelled or
	// scheduled for later, and 6 long sleeps hold slots (the other two run
	// the load below).
	post := func(body string) []*coordinator.Job {
		t.Helper()
		code, b := e.req(t, "POST", "/v1/jobs/batch", body, e.auth()...)
		if code != http.StatusCreated {
			t.Fatalf("batch: %d %s", code, b)
		}
		var res apiserver.BatchResponse
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		return res.Jobs
	}
	batch := func(n int, job string) string {
		return `{"jobs":[` + strings.TrimSuffix(strings.Repeat(job+",", n), ",") + `]}`
	}
	post(batch(150, `{"kind":"echo","payload":{"hello":"world"}}`))
	post(batch(12, `{"kind":"fail","payload":{"times":9},"max_attempts":1}`))
	post(batch(6, `{"kind":"fail","payload":{"times":1},"max_attempts":3,"queue":"default"}`))
	later := post(batch(8, `{"kind":"sleep","payload":{"ms":10},"delay":"1h","queue":"reports"}`))
	for _, j := range later[:3] {
		if code, b := e.req(t, "POST", "/v1/jobs/"+j.ID+"/cancel", "", e.auth()...); code != 200 {
			t.Fatalf("cancel: %d %s", code, b)
		}
	}
	waitFor(t, 15*time.Second, "the workload to settle", func() bool {
		c, err := e.coord.Counts(context.Background())
		return err == nil && c[coordinator.StateCompleted] == 156 && c[coordinator.StateDiscarded] == 12
	})
	sleepers := post(batch(6, `{"kind":"sleep","payload":{"ms":120000}}`))
	waitFor(t, 10*time.Second, "6 sleeps running", func() bool {
		c, err := e.coord.Counts(context.Background())
		return err == nil && c[coordinator.StateRunning] == 6
	})

	ctx := browser(t, exe)
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()
	var dialogsMu sync.Mutex
	var dialogs []string
	// Accept every confirm dialog, as an operator who means it would.
	events := chromedp.Events(tctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range events {
			if err != nil {
				return
			}
			dialogsMu.Lock()
			dialogs = append(dialogs, ev.Message)
			dialogsMu.Unlock()
			_, _ = chromedp.Call(tctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(tctx, steps...); err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
	}
	eval := func(what, js string, out any) {
		t.Helper()
		v, err := chromedp.Run(tctx, chromedp.Evaluate[json.RawMessage](js))
		if err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
		if err := json.Unmarshal(v, out); err != nil {
			t.Fatalf("browser: %s: %s: %v", what, v, err)
		}
	}

	// The counts on the page are the API's.
	run("load the overview", chromedp.Navigate(e.srv.URL+"/?refresh=0"), chromedp.WaitVisible(chromedp.CSS("#count-total")))
	var shown map[string]int
	eval("read the counts", `Object.fromEntries([...document.querySelectorAll('[id^="count-"]')].map(e => [e.id.slice(6), parseInt(e.textContent, 10)]))`, &shown)
	var st apiserver.StatsResponse
	code, b := e.req(t, "GET", "/v1/stats", "")
	if code != 200 || json.Unmarshal(b, &st) != nil {
		t.Fatalf("/v1/stats: %d %s", code, b)
	}
	for _, s := range coordinator.States {
		if shown[string(s)] != st.Counts[s] {
			t.Errorf("dashboard shows %d %s jobs, the API %d", shown[string(s)], s, st.Counts[s])
		}
	}
	if shown["total"] != st.Total || st.Total != 150+12+6+8+6 {
		t.Errorf("total: dashboard %d, API %d, want %d", shown["total"], st.Total, 150+12+6+8+6)
	}
	var daemon struct {
		Rows    int    `json:"rows"`
		Running int    `json:"running"`
		Buttons int    `json:"buttons"`
		Self    string `json:"self"`
	}
	eval("read the daemons table", `({rows: document.querySelectorAll('table.daemons > tbody > tr[id^="daemon-"]').length,
		running: document.querySelectorAll('table.running tr[data-job]').length,
		buttons: document.querySelectorAll('table.running button[data-url]').length,
		self: (document.querySelector('table.daemons .self') || {}).textContent || ""})`, &daemon)
	if daemon.Rows != 1 || daemon.Running != 6 || daemon.Buttons != 6 || daemon.Self != "this daemon" {
		t.Errorf("daemons table: %+v, want 1 daemon (this one) with 6 running jobs and their cancel buttons", daemon)
	}

	// Cancel a running job from the page, auto-refresh on: without the
	// token the API refuses it, the page says why, and auto-refresh
	// pauses so that the reason stays (a reload took it away at once).
	// Ticked and clicked in one script, so no reload comes between.
	victim := sleepers[0].ID
	button := chromedp.CSS(`table.running button[data-job="` + victim + `"]`)
	var clicked bool
	eval("tick auto-refresh and click cancel without a token", `(() => { document.getElementById("auto").checked = true;
		document.querySelector('table.running button[data-job="`+victim+`"]').click(); return true; })()`, &clicked)
	var status string
	var err error
	if status, err = chromedp.Run(tctx, chromedp.Poll[string](`(s => !s.hidden && s.textContent)(document.getElementById("status"))`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("no status after a refused cancel: %v", err)
	}
	if !strings.Contains(status, "API token") || !strings.Contains(status, "auto-refresh paused") {
		t.Errorf("status after a cancel without the token: %q, want the reason and that auto-refresh paused", status)
	}
	var autoOn bool
	if eval("read auto-refresh", `document.getElementById("auto").checked`, &autoOn); autoOn {
		t.Errorf("auto-refresh still on after a refused action: the next reload takes its reason away")
	}
	if j := e.get(t, victim); j.CancelRequested || j.State != coordinator.StateRunning {
		t.Fatalf("a cancel without the token reached the job: %+v", j)
	}
	// With the token typed in, the same click cancels it.
	run("enter the token",
		chromedp.SendKeys(chromedp.CSS(`#api-token`), token),
		chromedp.Click(chromedp.CSS(`#token-form button`)),
		chromedp.Poll[chromedp.Void](`document.getElementById("token-state").textContent.includes("set")`, chromedp.WithPollingTimeout(5*time.Second)),
		chromedp.Click(button))
	e.waitState(t, victim, coordinator.StateCancelled, 10*time.Second)
	dialogsMu.Lock()
	if len(dialogs) != 2 || !strings.Contains(dialogs[1], "Cancel running job "+victim) {
		t.Errorf("confirm dialogs: %q", dialogs)
	}
	dialogsMu.Unlock()

	// The job page shows it cancelled, with its timeline.
	run("open the job page", chromedp.Navigate(e.srv.URL+"/jobs/"+victim+"?refresh=0"), chromedp.WaitVisible(chromedp.CSS("#job-state")))
	var jobPage struct {
		State    string `json:"state"`
		Timeline int    `json:"timeline"`
		Payload  string `json:"payload"`
		Buttons  int    `json:"buttons"`
		Retry    int    `json:"retry"`
	}
	eval("read the job page", `({state: document.getElementById("job-state").textContent, timeline: document.querySelectorAll("#timeline li").length,
		payload: document.getElementById("payload").textContent, buttons: document.querySelectorAll("button[data-job]").length,
		retry: document.querySelectorAll("button[data-retry]").length})`, &jobPage)
	if jobPage.State != "cancelled" || jobPage.Timeline < 3 || !strings.Contains(jobPage.Payload, `"ms": 120000`) || jobPage.Buttons != 0 {
		t.Errorf("job page of the cancelled job: %+v", jobPage)
	}
	// Where the API can retry jobs, the page offers it for the cancelled
	// job, and it works.
	if jobPage.Retry == 1 {
		run("click retry", chromedp.Click(chromedp.CSS(`button[data-retry="`+victim+`"]`)))
		waitFor(t, 10*time.Second, "the retried job to leave cancelled", func() bool {
			return e.get(t, victim).State != coordinator.StateCancelled
		})
		if code, b := e.req(t, "POST", "/v1/jobs/"+victim+"/cancel", "", e.auth()...); code != 200 {
			t.Fatalf("cancel the retried job: %d %s", code, b)
		}
	}

	// Pause and resume the queue from the overview.
	run("load the overview", chromedp.Navigate(e.srv.URL+"/?refresh=0"), chromedp.WaitVisible(chromedp.CSS("#count-total")))
	for _, action := range []string{"pause", "resume"} {
		run(action+" the queue", chromedp.Click(chromedp.CSS(`#queue-default button[data-queue="default"]`)))
		want := action == "pause"
		waitFor(t, 10*time.Second, "queue default "+action+"d", func() bool {
			qc, err := e.coord.QueueConfig(context.Background(), "default")
			return err == nil && qc.Paused == want
		})
		next := map[bool]string{true: "resume", false: "pause?force=true"}[want]
		// The page reloads itself 600 ms after an action, which aborts a
		// navigation begun while that reload is under way (on a loaded
		// machine, a sleep does not keep them apart): navigate again then.
		// Once a navigation commits, the old page's timer is gone.
		reload := func() error {
			return chromedp.Do(tctx, chromedp.Navigate(e.srv.URL+"/?refresh=0"),
				chromedp.WaitVisible(chromedp.CSS(`#queue-default button[data-url="v1/queues/default/`+next+`"]`)))
		}
		err := reload()
		for i := 0; i < 3 && err != nil && strings.Contains(err.Error(), "ERR_ABORTED"); i++ {
			err = reload()
		}
		if err != nil {
			t.Fatalf("browser: reload: %v", err)
		}
	}

	// Screenshots, under load: two slots keep running short jobs that
	// arrive steadily while the page is rendered.
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var loadWG sync.WaitGroup
	loadWG.Go(func() {
		for i := 0; i < 40 && loadCtx.Err() == nil; i++ {
			_, _ = e.coord.EnqueueBatch(loadCtx, []coordinator.EnqueueParams{
				{Kind: "sleep", Payload: json.RawMessage(`{"ms":40}`)}, {Kind: "sleep", Payload: json.RawMessage(`{"ms":40}`)},
				{Kind: "echo"}, {Kind: "fail", Payload: json.RawMessage(`{"times":1}`), MaxAttempts: 1},
			})
			select {
			case <-loadCtx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	defer func() {
		stopLoad()
		loadWG.Wait()
	}()
	time.Sleep(700 * time.Millisecond)
	dir := artifactsDir(t)
	shoot := func(name, url string) {
		t.Helper()
		run("load "+url, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("main")))
		png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot of %s: %v", url, err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot of %s: %s (%d KiB)", url, p, len(png)>>10)
	}
	shoot("dashboard.png", e.srv.URL+"/?refresh=0")
	failed := post(batch(1, `{"kind":"fail","payload":{"times":9},"max_attempts":2}`))[0]
	e.waitState(t, failed.ID, coordinator.StateRetryable, 10*time.Second)
	shoot("dashboard-job.png", e.srv.URL+"/jobs/"+failed.ID+"?refresh=0")
	shoot("dashboard-jobs.png", fmt.Sprintf("%s/jobs?state=running&refresh=0", e.srv.URL))
}
