package apiserver

// The dashboard: server-rendered HTML pages with a little inline
// JavaScript, no asset from anywhere else.
//
//	GET /            overview: jobs by state, queues, live daemons with their
//	                 leases and running jobs, the latest jobs
//	GET /jobs        jobs with filters (?state=&kind=&queue=), paged (&after=)
//	GET /jobs/{id}   one job: fields, timeline, attempts and errors with
//	                 stacks, payload, checkpoint, result
//
// Actions (cancel) are buttons that ask for confirmation and then POST to
// the JSON API from the page's own origin, with the API token when the
// daemon requires one (the operator types it once per tab; it is kept in
// sessionStorage). The API's checks (auth.go) apply to them as to any
// client. Pages refresh every 5 s unless auto-refresh is unticked (or
// ?refresh=0).

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/oklog/ulid/v2"
)

// Sizes of the dashboard's lists.
const (
	dashboardJobs     = 50  // latest jobs on the overview
	dashboardPage     = 100 // jobs per page of /jobs
	dashboardErrorLen = 160 // characters of an error shown in a list

	// The overview refreshes every few seconds: its lists are bounded
	// whatever the numbers of daemons, queues and running jobs, and say
	// how many they leave out and where to see them.
	dashboardDaemons          = 100 // daemons listed
	dashboardQueues           = 100 // queues listed
	dashboardRunningPerDaemon = 10  // running jobs listed under a daemon
	dashboardRunning          = 100 // running jobs listed in all
)

var dashboardFuncs = template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		d := time.Since(t)
		if d < 0 {
			return "in " + RoundDuration(-d).String()
		}
		return RoundDuration(d).String() + " ago"
	},
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"tsp": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"pretty": prettyJSON,
	"lastError": func(j *coordinator.Job) string {
		if len(j.Errors) == 0 {
			return ""
		}
		return TruncateString(OneLine(j.Errors[len(j.Errors)-1].Error), dashboardErrorLen)
	},
	"final": func(s coordinator.State) bool { return s.Final() },
	"retryable": func(s coordinator.State) bool {
		return s == coordinator.StateDiscarded || s == coordinator.StateCancelled || s == coordinator.StateScheduled || s == coordinator.StateRetryable
	},
	"act": func(p *dashPage, j *coordinator.Job) jobActions { return jobActions{Job: j, CanRetry: p.CanRetry} },
	"confirmRetry": func(j *coordinator.Job) string {
		if j.State == coordinator.StateScheduled || j.State == coordinator.StateRetryable {
			return fmt.Sprintf("Run job %s (%s) now instead of at its due time?", j.ID, j.Kind)
		}
		return fmt.Sprintf("Retry %s job %s (%s) now? It becomes available and runs again.", j.State, j.ID, j.Kind)
	},
	"join":    func(s []string) string { return strings.Join(s, ", ") },
	"seconds": func(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() },
	"confirmCancel": func(j *coordinator.Job) string {
		if j.State == coordinator.StateRunning {
			return fmt.Sprintf("Cancel running job %s (%s, attempt %d)? Its handler is interrupted and the job ends cancelled.", j.ID, j.Kind, j.Attempt)
		}
		return fmt.Sprintf("Cancel job %s (%s, %s)? It will not run.", j.ID, j.Kind, j.State)
	},
}

// RoundDuration rounds d for display.
func RoundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// prettyJSON indents a JSON value for display; "" for none.
func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

const dashboardBase = `{{define "page"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><base href="{{.Base}}/">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} — leasehold {{.Namespace}}</title>
<style>
:root{--fg:#1d2330;--mute:#667085;--line:#e4e7ec;--bg:#f7f8fa;--accent:#0b5cad;--bad:#b42318;--good:#067647;--warn:#b54708}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:var(--fg);background:var(--bg)}
header{background:#101828;color:#fff;padding:.6em 1.5em;display:flex;gap:1.5em;align-items:center;flex-wrap:wrap}
header a{color:#fff;text-decoration:none;opacity:.85}header a:hover,header a.on{opacity:1;text-decoration:underline}
header .brand{font-weight:700;font-size:1.15em;opacity:1}
header .meta{margin-left:auto;font-size:.85em;opacity:.8;display:flex;gap:1em;align-items:center}
header input[type=password]{font:inherit;padding:.15em .4em;border-radius:4px;border:0;width:12em}
header button{font:inherit;padding:.15em .6em}
main{padding:1em 1.5em 3em;max-width:1400px}
h1{font-size:1.3em;margin:.4em 0}h2{font-size:1.05em;margin:1.6em 0 .5em}h3{font-size:.98em;margin:1.4em 0 .4em}
section{background:#fff;border:1px solid var(--line);border-radius:8px;padding:.2em 1em 1em;margin:1em 0}
table{border-collapse:collapse;width:100%}td,th{padding:.3em .7em;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{color:var(--mute);font-weight:600;font-size:.85em;text-transform:uppercase;letter-spacing:.02em}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
table.counts td{font-size:1.5em;font-weight:600}table.counts a{text-decoration:none;color:inherit}
table.kv th{width:12em;text-transform:none;font-size:.9em}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:var(--bg);border:1px solid var(--line);border-radius:6px;padding:.7em;overflow:auto;max-height:28em;margin:.3em 0}
a{color:var(--accent)}
.state{display:inline-block;padding:0 .5em;border-radius:999px;font-size:.85em;font-weight:600;background:#eef2f6}
.s-completed{color:var(--good);background:#ecfdf3}.s-discarded,.s-cancelled{color:var(--bad);background:#fef3f2}
.s-running{color:var(--accent);background:#eff8ff}.s-retryable{color:var(--warn);background:#fffaeb}
.mute,.note{color:var(--mute)}.note{font-size:.85em}
.err{color:var(--bad)}
.lines{white-space:pre-wrap;overflow-wrap:anywhere}
.flash{padding:.5em 1em;border-radius:6px;margin:.8em 0}.flash.ok{background:#ecfdf3;color:var(--good)}.flash.err{background:#fef3f2;color:var(--bad)}
button.danger{color:var(--bad);border:1px solid #fda29b;background:#fff;border-radius:4px;padding:.1em .6em;cursor:pointer;font:inherit;font-size:.85em}
button.danger:hover{background:#fef3f2}button:disabled{opacity:.5}
button[data-url]:not(.danger){color:var(--accent);border:1px solid #b2ddff;background:#fff;border-radius:4px;padding:.1em .6em;cursor:pointer;font:inherit;font-size:.85em}
form.filters{display:flex;gap:.8em;align-items:end;flex-wrap:wrap;margin:.6em 0}
form.filters label{display:flex;flex-direction:column;font-size:.8em;color:var(--mute)}
form.filters input,form.filters select{font:inherit;padding:.2em .4em}
ol.timeline{list-style:none;padding:0;margin:0}ol.timeline li{padding:.3em 0 .3em 1em;border-left:3px solid var(--line)}
ol.timeline li.bad{border-color:#fda29b}ol.timeline li.good{border-color:#75e0a7}
details summary{cursor:pointer;color:var(--mute)}
#errors th:first-child{width:6em}#errors th:nth-child(2){width:15em}
.self{font-size:.75em;background:#eff8ff;color:var(--accent);border-radius:4px;padding:0 .4em;margin-left:.4em}
</style></head><body>
<header><a class="brand" href="./">leasehold</a>
<a href="./"{{if eq .Nav "overview"}} class="on"{{end}}>Overview</a>
<a href="jobs"{{if eq .Nav "jobs"}} class="on"{{end}}>Jobs</a>
<a href="metrics">Metrics</a>
<span class="meta"><span>namespace <b>{{.Namespace}}</b>{{with .Self}} · served by <code>{{.}}</code>{{end}}</span>
{{if .AuthRequired}}<form id="token-form" autocomplete="off"><label>API token <input type="password" id="api-token" placeholder="needed for actions"></label> <button>Save</button> <span id="token-state"></span></form>{{end}}
<label><input type="checkbox" id="auto" checked> auto-refresh</label></span></header>
<main>
<div id="status" class="flash" hidden></div>
{{if .Err}}<p class="flash err" id="page-error">{{.Err}}</p>{{end}}
{{template "content" .}}
<p class="note">Generated {{ts .Now}}. JSON: <a href="v1/stats">/v1/stats</a> · <a href="v1/jobs">/v1/jobs</a> · <a href="v1/workers">/v1/workers</a> · <a href="readyz">/readyz</a></p>
</main>
<script nonce="{{.Nonce}}">
(function(){
  var key = "leasehold-api-token", busy = false;
  function token(){ try { return sessionStorage.getItem(key) || ""; } catch (e) { return ""; } }
  function status(msg, bad){
    // A refusal stays on the page: auto-refresh pauses, or the next
    // reload would take it away before it is read.
    var a = document.getElementById("auto");
    if (bad && a && a.checked) { a.checked = false; msg += " (auto-refresh paused)"; }
    var s = document.getElementById("status"); s.textContent = msg; s.className = "flash " + (bad ? "err" : "ok"); s.hidden = false;
  }
  var tf = document.getElementById("token-form");
  function tokenState(){ var s = document.getElementById("token-state"); if (s) s.textContent = token() ? "(set for this tab)" : ""; }
  if (tf) {
    tokenState();
    tf.addEventListener("submit", function(e){ e.preventDefault(); var f = document.getElementById("api-token"); sessionStorage.setItem(key, f.value.trim()); f.value = ""; tokenState(); status("API token saved for this tab."); });
  }
  document.addEventListener("click", function(e){
    var b = e.target.closest("button[data-url]");
    if (!b) return;
    e.preventDefault();
    if (!window.confirm(b.dataset.confirm)) return;
    busy = true; b.disabled = true;
    var h = {"Accept": "application/json"};
    if (token()) h["Authorization"] = "Bearer " + token();
    fetch(b.dataset.url, {method: "POST", headers: h, credentials: "same-origin"}).then(function(r){
      return r.json().catch(function(){ return {}; }).then(function(body){
        if (r.ok) { status(b.dataset.done || "Done."); setTimeout(function(){ location.reload(); }, 600); return; }
        if (r.status === 401) status((body.error || "API token required") + " (enter it at the top right).", true);
        else status(body.error || ("HTTP " + r.status), true);
        busy = false; b.disabled = false;
      });
    }).catch(function(err){ status("Request failed: " + err, true); busy = false; b.disabled = false; });
  });
  var auto = document.getElementById("auto");
  if (new URLSearchParams(location.search).get("refresh") === "0") auto.checked = false;
  setInterval(function(){
    var a = document.activeElement;
    if (auto.checked && !busy && !document.hidden && !(a && a.matches("input,select,textarea"))) location.reload();
  }, 5000);
})();
</script>
</body></html>{{end}}
{{define "actions"}}{{with .Job}}{{if not (final .State)}}<button class="danger" data-url="v1/jobs/{{.ID}}/cancel" data-confirm="{{confirmCancel .}}" data-done="Cancel of {{.ID}} sent." data-job="{{.ID}}">cancel</button>{{end}}{{end}}{{if and .CanRetry (retryable .Job.State)}} <button data-url="v1/jobs/{{.Job.ID}}/retry?state={{.Job.State}}" data-confirm="{{confirmRetry .Job}}" data-done="Job {{.Job.ID}} is available again." data-retry="{{.Job.ID}}">{{if or (eq .Job.State "scheduled") (eq .Job.State "retryable")}}run now{{else}}retry{{end}}</button>{{end}}{{end}}
{{define "state"}}<span class="state s-{{.State}}">{{.State}}</span>{{if .CancelRequested}} <span class="mute">cancel requested</span>{{end}}{{end}}
{{define "jobrows"}}<table class="jobs"><tr><th>id</th><th>kind</th><th>queue</th><th>state</th><th class="n">attempt</th><th>created</th><th>last error</th><th></th></tr>
{{range .Jobs}}<tr data-job="{{.ID}}"><td><a href="jobs/{{.ID}}"><code>{{.ID}}</code></a></td><td>{{.Kind}}</td><td>{{.Queue}}</td><td>{{template "state" .}}</td><td class="n">{{.Attempt}}/{{.MaxAttempts}}</td><td title="{{ts .CreatedAt}}">{{ago .CreatedAt}}</td><td class="err">{{lastError .}}</td><td>{{template "actions" (act $ .)}}</td></tr>
{{end}}</table>{{end}}
{{define "filters"}}<form class="filters" method="get" action="jobs">
<label>state<select name="state"><option value="">any</option>{{range .States}}<option{{if eq (print .) $.Filter.State}} selected{{end}}>{{.}}</option>{{end}}</select></label>
<label>kind<input name="kind" list="kinds" value="{{.Filter.Kind}}" size="14"></label>
<label>queue<input name="queue" list="queues" value="{{.Filter.Queue}}" size="14"></label>
<datalist id="kinds">{{range .KnownKinds}}<option value="{{.}}">{{end}}</datalist>
<datalist id="queues">{{range .KnownQueues}}<option value="{{.}}">{{end}}</datalist>
<button>Filter</button>{{if or .Filter.State .Filter.Kind .Filter.Queue}} <a href="jobs">clear</a>{{end}}</form>{{end}}
`

const dashboardOverview = `{{define "content"}}
<section><h2>Jobs by state</h2>
<table class="counts"><tr>{{range .States}}<th class="n">{{.}}</th>{{end}}<th class="n">total</th></tr>
<tr>{{range .States}}<td class="n"><a id="count-{{.}}" href="jobs?state={{.}}">{{index $.Counts .}}</a></td>{{end}}<td class="n" id="count-total">{{.Total}}</td></tr></table>
{{with .FinishedAge}}<p class="note" id="finished-age">Completed, discarded and cancelled jobs as counted {{.}} ago (that count is at most a minute old; the other states are read at each load).</p>{{end}}
</section>
<section><h2>Queues</h2>
{{if .Queues}}<table><tr><th>queue</th><th>state</th><th class="n">available</th><th class="n">running</th><th class="n">limit</th><th class="n">daemons serving it</th><th></th></tr>
{{range .Queues}}<tr id="queue-{{.Name}}"><td><a href="jobs?queue={{.Name}}">{{.Name}}</a></td><td>{{if .Paused}}<span class="state s-retryable">paused</span>{{with .PausedAt}} <span class="mute">{{ago .}}</span>{{end}}{{else}}<span class="mute">active</span>{{end}}</td><td class="n">{{.Available}}</td><td class="n">{{.Running}}</td><td class="n">{{with .Limit}}{{.}}{{else}}<span class="mute">none</span>{{end}}</td><td class="n">{{.Daemons}}</td>
<td>{{if $.CanPause}}{{if .Paused}}<button data-url="v1/queues/{{.Name}}/resume" data-confirm="Resume queue {{.Name}}? Its jobs will be claimed again." data-done="Queue {{.Name}} resumed." data-queue="{{.Name}}">resume</button>{{else}}{{/* force: the page read the name from the store, no typo; a queue with running jobs that nobody serves is refused without it */}}<button class="danger" data-url="v1/queues/{{.Name}}/pause?force=true" data-confirm="Pause queue {{.Name}}? No daemon will claim its jobs until it is resumed; running jobs go on." data-done="Queue {{.Name}} paused." data-queue="{{.Name}}">pause</button>{{end}}{{end}}</td></tr>
{{end}}</table>
{{with .QueuesCut}}<p class="note" id="queues-cut">{{.N}} more queues not listed, with {{.Available}} available and {{.Running}} running jobs (the page lists 100: paused ones first, then those with the most jobs): see <a href="v1/queues">/v1/queues</a> or <code>leasehold queues list</code>.</p>{{end}}
<p class="note">Per queue: available and running jobs (the other states are counted for the whole namespace above).</p>{{else}}<p class="mute">No queues.</p>{{end}}
</section>
<section><h2>Daemons</h2>
{{if .Daemons}}<table class="daemons"><tr><th>worker</th><th>host</th><th class="n">pid</th><th>lease</th><th class="n">running</th><th>queues</th><th>kinds</th><th>started</th></tr>
{{range $d := .Daemons}}<tr id="daemon-{{.ID}}"><td><code>{{.ID}}</code>{{if .Self}}<span class="self">this daemon</span>{{end}}</td><td>{{.Host}}</td><td class="n">{{.PID}}</td><td><code>{{printf "%x" .Lease}}</code> <span class="mute">ttl {{seconds .LeaseTTLMS}}</span></td><td class="n">{{.Running}}/{{.Concurrency}}</td><td>{{join .Queues}}</td><td>{{join .Kinds}}</td><td title="{{ts .StartedAt}}">{{ago .StartedAt}}</td></tr>
{{if or .Jobs .More}}<tr><td colspan="8">{{if .Jobs}}<table class="running"><tr><th>running job</th><th>kind</th><th>queue</th><th class="n">attempt</th><th class="n">token</th><th>started</th><th></th></tr>
{{range .Jobs}}<tr data-job="{{.ID}}"><td><a href="jobs/{{.ID}}"><code>{{.ID}}</code></a>{{if .CancelRequested}} <span class="mute">cancel requested</span>{{end}}</td><td>{{.Kind}}</td><td>{{.Queue}}</td><td class="n">{{.Attempt}}/{{.MaxAttempts}}</td><td class="n">{{.Token}}</td><td>{{with .AttemptedAt}}{{ago .}}{{end}}</td><td>{{template "actions" (act $ .)}}</td></tr>
{{end}}</table>{{end}}{{with .More}}<p class="note more-running">{{.}} {{if $d.Jobs}}more {{end}}running jobs of this daemon not listed (the page lists the first 10 of a daemon, of at most 10 daemons): see <a href="jobs?state=running">all running jobs</a> or <code>leasehold jobs list --state running</code>.</p>{{end}}</td></tr>{{end}}
{{end}}</table>{{else}}<p class="mute">No live daemons.</p>{{end}}
{{with .DaemonsCut}}<p class="note" id="daemons-cut">{{.}} more live daemons not listed (the page lists 100): see <a href="v1/workers">/v1/workers</a> or <code>leasehold workers list</code>.</p>{{end}}
{{if .Orphans}}<p class="note">{{.Orphans}} running jobs belong to no live daemon: they are re-queued once their owner's lease expires.</p>{{end}}
</section>
<section><h2>Latest jobs</h2>
{{template "filters" .}}
{{if .Jobs}}{{template "jobrows" .}}{{else}}<p class="mute">No jobs.</p>{{end}}
</section>
{{end}}`

const dashboardJobList = `{{define "content"}}
<section><h2>Jobs{{with .Filter.State}} · {{.}}{{end}}{{with .Filter.Kind}} · kind {{.}}{{end}}{{with .Filter.Queue}} · queue {{.}}{{end}}</h2>
{{template "filters" .}}
{{if .Jobs}}{{template "jobrows" .}}{{else if .Next}}<p class="mute">None among the jobs this page looked through (a filtered page looks through a bounded number); more may match on the next page.</p>{{else}}<p class="mute">No jobs match.</p>{{end}}
<p class="note">{{.Order}}{{with .Next}} · <a id="next-page" href="{{.}}">next page →</a>{{end}}</p>
</section>
{{end}}`

const dashboardJobPage = `{{define "content"}}{{with .Job}}
<section><h1>Job <code>{{.ID}}</code> <span id="job-state" class="state s-{{.State}}">{{.State}}</span>{{if .CancelRequested}} <span class="mute" id="cancel-requested">cancel requested</span>{{end}}</h1>
<p>{{template "actions" (act $ .)}} <a href="v1/jobs/{{.ID}}">JSON</a></p>
<table class="kv">
<tr><th>kind</th><td>{{.Kind}}</td></tr>
<tr><th>queue</th><td><a href="jobs?queue={{.Queue}}">{{.Queue}}</a></td></tr>
<tr><th>priority</th><td>{{.Priority}}</td></tr>
<tr><th>attempt</th><td>{{.Attempt}} of {{.MaxAttempts}}{{if .Rescues}} · {{.Rescues}} runs lost with their daemon{{end}}</td></tr>
<tr><th>owner</th><td>{{if .Owner}}<code>{{.Owner}}</code>{{else}}<span class="mute">none</span>{{end}}</td></tr>
<tr><th>fencing token</th><td>{{if .Token}}<code>{{.Token}}</code>{{else}}<span class="mute">none</span>{{end}}</td></tr>
{{with .UniqueKey}}<tr><th>unique key</th><td><code>{{.}}</code></td></tr>{{end}}
{{with .TimeoutMS}}<tr><th>timeout</th><td>{{seconds .}}</td></tr>{{end}}
<tr><th>created</th><td>{{ts .CreatedAt}} <span class="mute">{{ago .CreatedAt}}</span></td></tr>
<tr><th>due</th><td>{{ts .ScheduledAt}} <span class="mute">{{ago .ScheduledAt}}</span></td></tr>
<tr><th>last attempt</th><td>{{tsp .AttemptedAt}}</td></tr>
<tr><th>finished</th><td>{{tsp .FinalizedAt}}</td></tr>
</table></section>{{end}}
<section><h2>Timeline</h2><ol class="timeline" id="timeline">
{{range .Timeline}}<li class="{{.Class}}"><span class="mute">{{ts .At}}</span> {{.What}}</li>
{{end}}</ol></section>
{{with .Job}}<section><h2>Attempts and errors</h2>
{{if .Errors}}<table id="errors"><tr><th class="n">attempt</th><th>at</th><th>error</th></tr>
{{range .Errors}}<tr><td class="n">{{.Attempt}}</td><td>{{ts .At}}</td><td><span class="err lines">{{.Error}}</span>{{with .Trace}}<details><summary>stack</summary><pre>{{.}}</pre></details>{{end}}</td></tr>
{{end}}</table>{{else}}<p class="mute">No errors.</p>{{end}}
</section>
<section><h2>Payload</h2>{{with pretty .Payload}}<pre id="payload">{{.}}</pre>{{else}}<p class="mute">Empty.</p>{{end}}
<h2>Checkpoint</h2>{{with pretty .Checkpoint}}<pre id="checkpoint">{{.}}</pre>{{else}}<p class="mute">None.</p>{{end}}
<h2>Result</h2>{{with pretty .Result}}<pre id="result">{{.}}</pre>{{else}}<p class="mute">None.</p>{{end}}
</section>{{end}}
{{end}}`

const dashboardMissing = `{{define "content"}}<section><h2>Not found</h2><p>{{.Missing}}</p><p><a href="jobs">All jobs</a></p></section>{{end}}`

var (
	dashboardBaseTmpl = template.Must(template.New("base").Funcs(dashboardFuncs).Parse(dashboardBase))
	overviewTmpl      = pageTemplate(dashboardOverview)
	jobListTmpl       = pageTemplate(dashboardJobList)
	jobPageTmpl       = pageTemplate(dashboardJobPage)
	missingTmpl       = pageTemplate(dashboardMissing)
)

func pageTemplate(content string) *template.Template {
	return template.Must(template.Must(dashboardBaseTmpl.Clone()).Parse(content))
}

// dashPage is what every dashboard page shows.
type dashPage struct {
	// Base is the path the API is served under ("" at the root): the
	// page's links are relative to it (<base>).
	Base         string
	Title        string
	Nav          string
	Namespace    string
	Self         string
	AuthRequired bool
	// CanRetry and CanPause: the API has the routes of these actions.
	CanRetry bool
	CanPause bool
	Nonce    string
	Err      string
	Now      time.Time

	States      []coordinator.State
	Filter      jobFilter
	KnownKinds  []string
	KnownQueues []string

	// Overview.
	Counts map[coordinator.State]int
	Total  int
	// FinishedAge: how old the finished states' counts are, if 1 s or
	// more (coordinator.Coordinator.RecentCounts).
	FinishedAge time.Duration
	Queues      []queueRow
	Daemons     []daemonRow
	// DaemonsCut: live daemons not listed; QueuesCut: queues not listed.
	DaemonsCut int
	QueuesCut  *queuesCut
	// Orphans: running jobs whose owner is no live daemon.
	Orphans int
	Jobs    []*coordinator.Job

	// Job list.
	Next  string
	Order string

	// Job page.
	Job      *coordinator.Job
	Timeline []timelineEvent
	Missing  string
}

// jobActions is what the actions of one job need.
type jobActions struct {
	Job      *coordinator.Job
	CanRetry bool
}

type jobFilter struct {
	State, Kind, Queue string
}

type queueRow struct {
	Name                        string
	Available, Running, Daemons int
	Paused                      bool
	PausedAt                    *time.Time
	Limit                       int
}

type daemonRow struct {
	coordinator.WorkerInfo
	Self bool
	Jobs []*coordinator.Job
	// More: its running jobs not listed.
	More int
}

// queuesCut is what the overview says of the queues it does not list.
type queuesCut struct {
	N, Available, Running int
}

type timelineEvent struct {
	At    time.Time
	What  string
	Class string
}

func (a *Handler) routeDashboard() {
	a.mux.HandleFunc("GET /{$}", a.dashboard)
	a.mux.HandleFunc("GET /jobs", a.dashboardJobs)
	a.mux.HandleFunc("GET /jobs/{id}", a.dashboardJob)
	a.mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
}

func (a *Handler) newPage(title, nav string) *dashPage {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	return &dashPage{
		Base: a.cfg.Prefix, Title: title, Nav: nav, Namespace: a.cfg.Coord.Namespace(), Self: a.cfg.WorkerID,
		AuthRequired: a.cfg.Auth.Token != "", Nonce: base64.RawStdEncoding.EncodeToString(nonce[:]),
		CanRetry: a.hasRoute(http.MethodPost, "/v1/jobs/"+ulid.Make().String()+"/retry"),
		CanPause: a.hasRoute(http.MethodPost, "/v1/queues/default/pause") && a.hasRoute(http.MethodPost, "/v1/queues/default/resume"),
		Now:      time.Now(), States: coordinator.States,
	}
}

// hasRoute reports whether the API serves method path (the actions of
// the dashboard appear only when the API has them).
func (a *Handler) hasRoute(method, path string) bool {
	r, err := http.NewRequest(method, path, nil)
	if err != nil {
		return false
	}
	_, pattern := a.mux.Handler(r)
	return pattern != ""
}

// render writes p with t, with headers that keep the page from being
// framed or running scripts other than its own.
func (a *Handler) render(w http.ResponseWriter, r *http.Request, status int, t *template.Template, p *dashPage) {
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "page", p); err != nil {
		a.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+p.Nonce+"'; style-src 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'self'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// storeErr records a failed read of r on p.
func (a *Handler) storeErr(r *http.Request, p *dashPage, what string, err error) {
	if err == nil || p.Err != "" {
		return
	}
	a.log.Warn("dashboard: reading the store failed", slog.String("what", what), slog.Any("err", err))
	if storeTimedOut(r) {
		p.Err = fmt.Sprintf("Reading %s failed: %s", what, a.timeoutMessage(r))
		return
	}
	p.Err = fmt.Sprintf("Reading %s failed: %s", what, CleanCoordError(err))
}

// pageStatus returns status, or 503 with a Retry-After if a read of p
// failed at the store deadline of r: the page is then incomplete, and says
// why.
func pageStatus(w http.ResponseWriter, r *http.Request, p *dashPage, status int) int {
	if p.Err == "" || !storeTimedOut(r) {
		return status
	}
	w.Header().Set("Retry-After", retryAfter)
	return http.StatusServiceUnavailable
}

// cutQueues returns at most n of qs in name order: if there are more, the
// paused ones first, then those with the most available and running jobs;
// and what the others hold (nil if none is left out).
func cutQueues(qs []queueRow, n int) ([]queueRow, *queuesCut) {
	var cut *queuesCut
	if len(qs) > n {
		slices.SortFunc(qs, func(x, y queueRow) int {
			if x.Paused != y.Paused {
				if x.Paused {
					return -1
				}
				return 1
			}
			return cmp.Or(cmp.Compare(y.Available+y.Running, x.Available+x.Running), cmp.Compare(x.Name, y.Name))
		})
		cut = &queuesCut{N: len(qs) - n}
		for _, q := range qs[n:] {
			cut.Available += q.Available
			cut.Running += q.Running
		}
		qs = qs[:n]
	}
	slices.SortFunc(qs, func(x, y queueRow) int { return cmp.Compare(x.Name, y.Name) })
	return qs, cut
}

// known fills the kinds and queues offered by the filters, from the live
// daemons and the queues seen.
func (p *dashPage) known(ws []coordinator.WorkerInfo, queues []queueRow) {
	kinds, qs := map[string]bool{}, map[string]bool{}
	for _, w := range ws {
		for _, k := range w.Kinds {
			kinds[k] = true
		}
		for _, q := range w.Queues {
			qs[q] = true
		}
	}
	for _, q := range queues {
		qs[q.Name] = true
	}
	p.KnownKinds, p.KnownQueues = SortedKeys(kinds), SortedKeys(qs)
}

func (a *Handler) dashboard(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p := a.newPage("Overview", "overview")
	// Each index once: the live daemons, then the counts by state, queue
	// and owner from one read of the available and running indexes (with
	// the first running jobs of the first daemons), and the queues'
	// configurations.
	//
	// Workers also reads the ownership keys, one per running job, for
	// each daemon's running count, which the tally's running index also
	// counts by owner. They agree for a daemon's current session, but not
	// after it fenced itself and started a new one under the same id: its
	// old session's runs stay in the running index, under that id, until
	// reaped, and would show as its jobs (over its concurrency). The read
	// costs 1-2 % of a render's allocations (docs/performance.md, 42).
	ws, err := a.cfg.Coord.Workers(ctx)
	a.storeErr(r, p, "live daemons", err)
	// The first dashboardDaemons daemons (ws is in id order), with the
	// first running jobs of the first of them: the running index's small
	// values are read whole, and only the records listed.
	shown := ws[:min(len(ws), dashboardDaemons)]
	p.DaemonsCut = len(ws) - len(shown)
	var withJobs []string
	for _, wi := range shown[:min(len(shown), dashboardRunning/dashboardRunningPerDaemon)] {
		withJobs = append(withJobs, wi.ID)
	}
	tally, err := a.cfg.Coord.RecentTally(ctx, coordinator.TallyParams{Owners: withJobs, JobsPerOwner: dashboardRunningPerDaemon})
	a.storeErr(r, p, "job counts", err)
	p.Counts = tally.Counts
	if age := RoundDuration(a.cfg.Coord.Clock().Now().Sub(tally.CountedAt)); err == nil && age >= time.Second {
		p.FinishedAge = age
	}
	for _, n := range p.Counts {
		p.Total += n
	}
	runs, runningByQueue := tally.Running, tally.RunningByQueue
	confs, err := a.cfg.Coord.QueueConfigs(ctx)
	a.storeErr(r, p, "queues", err)

	// Queues: those configured, served, or with available or running jobs.
	rows := map[string]*queueRow{}
	row := func(q string) *queueRow {
		if rows[q] == nil {
			rows[q] = &queueRow{Name: q}
		}
		return rows[q]
	}
	for _, conf := range confs {
		r := row(conf.Name)
		r.Paused, r.PausedAt, r.Limit = conf.Paused, conf.PausedAt, conf.Limit
	}
	for _, wi := range ws {
		for _, q := range wi.Queues {
			row(q).Daemons++
		}
	}
	for q, n := range tally.AvailableByQueue {
		row(q).Available = n
	}
	for q, n := range runningByQueue {
		row(q).Running = n
	}
	for _, q := range rows {
		p.Queues = append(p.Queues, *q)
	}
	p.Queues, p.QueuesCut = cutQueues(p.Queues, dashboardQueues)

	// Daemons with their first running jobs.
	live := map[string]bool{}
	for _, wi := range ws {
		live[wi.ID] = true
	}
	for _, wi := range shown {
		jobs := runs.Jobs[wi.ID]
		p.Daemons = append(p.Daemons, daemonRow{WorkerInfo: wi, Self: wi.ID == a.cfg.WorkerID, Jobs: jobs, More: max(0, runs.Count[wi.ID]-len(jobs))})
	}
	for owner, n := range runs.Count {
		if !live[owner] {
			p.Orphans += n
		}
	}
	p.known(ws, p.Queues)

	p.Jobs, err = latestJobs(ctx, a.cfg.Coord, dashboardJobs, time.Now())
	a.storeErr(r, p, "the latest jobs", err)
	a.render(w, r, pageStatus(w, r, p, http.StatusOK), overviewTmpl, p)
}

func (a *Handler) dashboardJobs(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p := a.newPage("Jobs", "jobs")
	q := r.URL.Query()
	p.Filter = jobFilter{State: strings.TrimSpace(q.Get("state")), Kind: strings.TrimSpace(q.Get("kind")), Queue: strings.TrimSpace(q.Get("queue"))}
	lp := coordinator.ListParams{Kind: p.Filter.Kind, Queue: p.Filter.Queue, After: q.Get("after"), Limit: dashboardPage}
	var bad error
	if p.Filter.State != "" {
		st, err := coordinator.ParseState(p.Filter.State)
		bad = cmp.Or(bad, err)
		lp.State = st
	}
	if p.Filter.Kind != "" {
		bad = cmp.Or(bad, coordinator.ValidateKind(p.Filter.Kind))
	}
	if p.Filter.Queue != "" {
		bad = cmp.Or(bad, coordinator.ValidateQueue(p.Filter.Queue))
	}
	if ws, err := a.cfg.Coord.Workers(ctx); err == nil {
		p.known(ws, nil)
	}
	status := http.StatusOK
	switch {
	case bad != nil:
		status, p.Err = http.StatusBadRequest, "Bad filter: "+CleanCoordError(bad)
	case lp.State == "" && lp.Kind == "" && lp.Queue == "" && lp.After == "":
		var err error
		p.Jobs, err = latestJobs(ctx, a.cfg.Coord, dashboardPage, time.Now())
		a.storeErr(r, p, "the latest jobs", err)
		p.Order = fmt.Sprintf("The %d newest jobs, newest first. Filter to see others.", dashboardPage)
	default:
		pg, err := a.cfg.Coord.List(ctx, lp)
		if errors.Is(err, coordinator.ErrInvalid) {
			status, p.Err = http.StatusBadRequest, "Bad filter: "+CleanCoordError(err)
			break
		}
		a.storeErr(r, p, "jobs", err)
		p.Jobs = pg.Jobs
		if pg.Next != "" {
			nq := url.Values{}
			for k, v := range map[string]string{"state": p.Filter.State, "kind": p.Filter.Kind, "queue": p.Filter.Queue, "after": pg.Next, "refresh": q.Get("refresh")} {
				if v != "" {
					nq.Set(k, v)
				}
			}
			p.Next = "jobs?" + nq.Encode()
		}
		p.Order = "In the order of the state's index (available: priority and due time; scheduled and retryable: due time; finished: finishing time), or creation order without a state, " + strconv.Itoa(dashboardPage) + " per page."
	}
	if status == http.StatusOK { // a bad filter's 400 stands
		status = pageStatus(w, r, p, status)
	}
	a.render(w, r, status, jobListTmpl, p)
}

func (a *Handler) dashboardJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p := a.newPage("Job "+id, "jobs")
	if err := coordinator.ValidateID(id); err != nil {
		p.Title, p.Missing = "Bad job id", CleanCoordError(err)
		a.render(w, r, http.StatusBadRequest, missingTmpl, p)
		return
	}
	j, err := a.cfg.Coord.Get(r.Context(), id)
	switch {
	case errors.Is(err, coordinator.ErrNotFound):
		p.Title, p.Missing = "Job not found", fmt.Sprintf("No job %s: it never existed, or it finished longer ago than the retention period and was deleted.", id)
		a.render(w, r, http.StatusNotFound, missingTmpl, p)
		return
	case err != nil:
		a.storeErr(r, p, "the job", err)
		a.render(w, r, pageStatus(w, r, p, http.StatusServiceUnavailable), missingTmpl, p)
		return
	}
	p.Job, p.Timeline = j, timeline(j)
	a.render(w, r, http.StatusOK, jobPageTmpl, p)
}

// timeline lists what is known to have happened to j, oldest first.
func timeline(j *coordinator.Job) []timelineEvent {
	ev := []timelineEvent{{At: j.CreatedAt, What: fmt.Sprintf("enqueued on queue %s, priority %d", j.Queue, j.Priority)}}
	if j.ScheduledAt.Sub(j.CreatedAt) > time.Millisecond {
		what := "due"
		if j.State == coordinator.StateScheduled || j.State == coordinator.StateRetryable {
			what = "due to run (" + string(j.State) + ")"
		}
		ev = append(ev, timelineEvent{At: j.ScheduledAt, What: what})
	}
	for _, e := range j.Errors {
		ev = append(ev, timelineEvent{At: e.At, What: fmt.Sprintf("attempt %d: %s", e.Attempt, TruncateString(OneLine(e.Error), 300)), Class: "bad"})
	}
	if j.AttemptedAt != nil {
		what := fmt.Sprintf("attempt %d started", j.Attempt)
		if j.Owner != "" {
			what += fmt.Sprintf(" on %s with token %d", j.Owner, j.Token)
		}
		ev = append(ev, timelineEvent{At: *j.AttemptedAt, What: what})
	}
	if j.FinalizedAt != nil {
		c := "bad"
		if j.State == coordinator.StateCompleted {
			c = "good"
		}
		ev = append(ev, timelineEvent{At: *j.FinalizedAt, What: string(j.State), Class: c})
	}
	slices.SortStableFunc(ev, func(x, y timelineEvent) int { return x.At.Compare(y.At) })
	return ev
}

// latestJobs returns the n most recently created jobs, newest first.
//
// The coordinator lists jobs in id order, oldest first, and job ids are
// ULIDs, so the cursor of an unfiltered listing is a job id and the jobs
// created after time t are those after the ULID of t with zero entropy. To
// avoid reading every job, this searches for a start time whose tail holds
// at least n and at most one page of jobs: it widens the window from one
// second back until it holds n jobs, then bisects between the last window
// that held too few and the first that held too many.
func latestJobs(ctx context.Context, c *coordinator.Coordinator, n int, now time.Time) ([]*coordinator.Job, error) {
	page := 4 * n
	// tail lists the jobs created at or after from (all, if from is zero),
	// at most one page; more reports whether there were more.
	tail := func(from time.Time) ([]*coordinator.Job, bool, error) {
		after := ""
		if !from.IsZero() {
			var u ulid.ULID
			if err := u.SetTime(ulid.Timestamp(from)); err != nil {
				return nil, false, err
			}
			after = u.String()
		}
		p, err := c.List(ctx, coordinator.ListParams{Limit: page, After: after})
		if err != nil {
			return nil, false, err
		}
		return p.Jobs, p.Next != "", nil
	}
	newest := func(jobs []*coordinator.Job) []*coordinator.Job {
		jobs = jobs[max(0, len(jobs)-n):]
		out := make([]*coordinator.Job, len(jobs))
		for i, j := range jobs {
			out[len(jobs)-1-i] = j
		}
		return out
	}

	var few time.Duration // a window known to hold fewer than n jobs
	window := time.Second
	for {
		from := now.Add(-window)
		if window > 100*365*24*time.Hour {
			from = time.Time{}
		}
		jobs, more, err := tail(from)
		if err != nil {
			return nil, err
		}
		switch {
		case !more && (len(jobs) >= n || from.IsZero()):
			return newest(jobs), nil
		case !more:
			few, window = window, window*8
			continue
		}
		// Too many: bisect between few (too few) and window (too many).
		many := window
		for many-few > time.Millisecond {
			mid := few + (many-few)/2
			jobs, more, err := tail(now.Add(-mid))
			if err != nil {
				return nil, err
			}
			switch {
			case more:
				many = mid
			case len(jobs) < n:
				few = mid
			default:
				return newest(jobs), nil
			}
		}
		// More than a page in one millisecond: read that millisecond's
		// tail page by page, keeping the newest.
		return newestFrom(ctx, c, n, now.Add(-many))
	}
}

// newestFrom reads every job created at or after from and returns the n
// newest, newest first.
func newestFrom(ctx context.Context, c *coordinator.Coordinator, n int, from time.Time) ([]*coordinator.Job, error) {
	var u ulid.ULID
	if err := u.SetTime(ulid.Timestamp(from)); err != nil {
		return nil, err
	}
	after := u.String()
	var keep []*coordinator.Job
	for {
		p, err := c.List(ctx, coordinator.ListParams{Limit: 1000, After: after})
		if err != nil {
			return nil, err
		}
		keep = append(keep, p.Jobs...)
		if len(keep) > n {
			keep = keep[len(keep)-n:]
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	out := make([]*coordinator.Job, len(keep))
	for i, j := range keep {
		out[len(keep)-1-i] = j
	}
	return out, nil
}
