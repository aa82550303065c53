package main

import (
	"bytes"
	"context"
	"html/template"
	"log/slog"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/oklog/ulid/v2"
)

// dashboardJobs is how many of the latest jobs the dashboard shows.
const dashboardJobs = 50

var dashboardTmpl = template.Must(template.New("dashboard").Funcs(template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return time.Since(t).Round(time.Second).String() + " ago"
	},
	"ts":  func(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05") },
	"dec": func(n int) int { return n - 1 },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="5">
<title>leasehold — {{.Namespace}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em}
table{border-collapse:collapse}td,th{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:left}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:12px}.s-completed{color:#176f2c}.s-discarded,.s-cancelled{color:#a11}.s-running{color:#0b5cad}
.err{color:#a11}
</style></head><body>
<h1>leasehold <small>namespace {{.Namespace}}{{with .Self}}, served by worker <code>{{.}}</code>{{end}}</small></h1>
{{if .Err}}<p class="err">{{.Err}}</p>{{end}}
<h2>Jobs by state</h2>
<table><tr>{{range .States}}<th>{{.}}</th>{{end}}<th>total</th></tr>
<tr>{{range .States}}<td class="n">{{index $.Counts .}}</td>{{end}}<td class="n">{{.Total}}</td></tr></table>
<h2>Workers</h2>
{{if .Workers}}<table><tr><th>id</th><th>host</th><th>pid</th><th>running</th><th>concurrency</th><th>queues</th><th>kinds</th><th>started</th></tr>
{{range .Workers}}<tr><td><code>{{.ID}}</code></td><td>{{.Host}}</td><td class="n">{{.PID}}</td><td class="n">{{.Running}}</td><td class="n">{{.Concurrency}}</td><td>{{range $i, $q := .Queues}}{{if $i}}, {{end}}{{$q}}{{end}}</td><td>{{range $i, $k := .Kinds}}{{if $i}}, {{end}}{{$k}}{{end}}</td><td>{{ago .StartedAt}}</td></tr>
{{end}}</table>{{else}}<p>No live workers.</p>{{end}}
<h2>Latest jobs</h2>
{{if .Jobs}}<table><tr><th>id</th><th>kind</th><th>queue</th><th>state</th><th>attempt</th><th>created</th><th>last error</th></tr>
{{range .Jobs}}<tr><td><a href="/v1/jobs/{{.ID}}"><code>{{.ID}}</code></a></td><td>{{.Kind}}</td><td>{{.Queue}}</td><td class="s-{{.State}}">{{.State}}</td><td class="n">{{.Attempt}}/{{.MaxAttempts}}</td><td>{{ts .CreatedAt}}</td><td>{{with .Errors}}{{(index . (len . | dec)).Error}}{{end}}</td></tr>
{{end}}</table>{{else}}<p>No jobs.</p>{{end}}
<p><small>Refreshes every 5 s. JSON: <a href="/v1/stats">/v1/stats</a>, <a href="/v1/jobs">/v1/jobs</a>, <a href="/v1/workers">/v1/workers</a>; <a href="/metrics">/metrics</a>.</small></p>
</body></html>
`))

type dashboardData struct {
	Namespace string
	Self      string
	Err       string
	States    []coordinator.State
	Counts    map[coordinator.State]int
	Total     int
	Workers   []coordinator.WorkerInfo
	Jobs      []*coordinator.Job
}

func (a *api) dashboard(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d := dashboardData{Namespace: a.cfg.Coord.Namespace(), Self: a.cfg.WorkerID, States: coordinator.States}
	var err error
	if d.Counts, err = a.cfg.Coord.Counts(ctx); err == nil {
		for _, n := range d.Counts {
			d.Total += n
		}
		if d.Workers, err = a.cfg.Coord.Workers(ctx); err == nil {
			d.Jobs, err = latestJobs(ctx, a.cfg.Coord, dashboardJobs, time.Now())
		}
	}
	if err != nil {
		a.log.Warn("dashboard: reading the store failed", slog.Any("err", err))
		d.Err = "Reading the store failed: " + cleanCoordError(err)
	}
	var buf bytes.Buffer
	if err := dashboardTmpl.Execute(&buf, d); err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
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
