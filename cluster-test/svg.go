package main

import (
	"fmt"
	"html"
	"io"
	"sort"
	"strings"
	"time"
)

var outcomeColors = []struct{ name, color string }{
	{"completed", "#2b8a3e"},
	{"failed, retried", "#f08c00"},
	{"failed, discarded", "#a61e4d"},
	{"cancelled", "#868e96"},
	{"released (graceful stop)", "#1c7ed6"},
	{"abandoned / refused (lease lost)", "#7048e8"},
	{"outcome unknown (write timed out)", "#15aabf"},
	{"no outcome (process died)", "#212529"},
}

var faultColors = map[string]string{
	fKillDaemon: "#ff8787", fKillEmbedded: "#ff8787", fRestartEmbedded: "#96f2d7",
	fPauseDaemon: "#74c0fc", fPartition: "#ffd43b", fPartitionReq: "#ffe066", fPartitionReply: "#ffec99",
	fLatency: "#d0bfff", fDropConns: "#e599f7", fRollingRestart: "#96f2d7",
	fKillLeader: "#ffa8a8", fKillFollower: "#ffc9c9", fPauseMember: "#ffd8a8", fQuorumLoss: "#fa5252",
}

func (c *checker) runColor(r *Run) string {
	o := r.Outcome
	switch {
	case o == nil:
		return outcomeColors[7].color
	case o.accepted():
		switch o.Op {
		case "complete":
			return outcomeColors[0].color
		case "fail":
			if _, final := c.terminal(o); final {
				return outcomeColors[2].color
			}
			return outcomeColors[1].color
		case "cancel":
			return outcomeColors[3].color
		default:
			return outcomeColors[4].color
		}
	case o.refused():
		return outcomeColors[5].color
	default:
		return outcomeColors[6].color
	}
}

// writeSVG draws the run: one lane per daemon slot (runs as bars, packed
// into rows), faults as bands (daemon faults on their lane, etcd faults
// across all lanes), process restarts as thin lines.
func writeSVG(w io.Writer, in *CheckInput, res *Result, lanes int, title string) {
	c := &checker{in: in}
	var t0, t1 time.Time
	span := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if t0.IsZero() || t.Before(t0) {
			t0 = t
		}
		if t.After(t1) {
			t1 = t
		}
	}
	for _, f := range in.Faults {
		span(f.Start)
		span(f.End)
	}
	for _, rs := range res.RunsByJob {
		for _, r := range rs {
			span(r.Start)
			span(r.End)
		}
	}
	if t0.IsZero() || !t1.After(t0) {
		t1 = t0.Add(time.Second)
	}
	const left, right, top, rowH = 70, 20, 50, 3
	width := 1800
	plot := float64(width - left - right)
	x := func(t time.Time) float64 { return left + plot*t.Sub(t0).Seconds()/t1.Sub(t0).Seconds() }

	bad := map[string]bool{}
	for _, id := range res.ViolatingJobs() {
		bad[id] = true
	}
	// Pack each lane's runs into rows.
	type bar struct {
		r   *Run
		row int
	}
	laneBars := make([][]bar, lanes)
	laneRows := make([]int, lanes)
	var byLane = make([][]*Run, lanes)
	for _, rs := range res.RunsByJob {
		for _, r := range rs {
			if r.Slot >= 0 && r.Slot < lanes {
				byLane[r.Slot] = append(byLane[r.Slot], r)
			}
		}
	}
	for l, rs := range byLane {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start.Before(rs[j].Start) })
		var rowEnd []time.Time
		for _, r := range rs {
			row := -1
			for i, e := range rowEnd {
				if !e.After(r.Start) {
					row = i
					break
				}
			}
			if row < 0 {
				row = len(rowEnd)
				rowEnd = append(rowEnd, time.Time{})
			}
			rowEnd[row] = r.End.Add(20 * time.Millisecond)
			laneBars[l] = append(laneBars[l], bar{r, row})
		}
		laneRows[l] = max(len(rowEnd), 4)
	}
	laneY := make([]int, lanes+1)
	y := top
	for l := range lanes {
		laneY[l] = y
		y += laneRows[l]*rowH + 14
	}
	laneY[lanes] = y
	legendY := y + 20
	height := legendY + 40 + 16*((len(outcomeColors)+3)/4)

	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	// Time axis.
	total := t1.Sub(t0).Seconds()
	step := 10.0
	for total/step > 20 {
		step *= 2
	}
	for s := 0.0; s <= total; s += step {
		xx := x(t0.Add(time.Duration(s * float64(time.Second))))
		fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#dee2e6"/>`+"\n", xx, top-8, xx, laneY[lanes])
		fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle" fill="#495057">%ds</text>`+"\n", xx, top-12, int(s))
	}
	// Etcd faults: bands across every lane, labelled on top.
	for _, f := range in.Faults {
		if f.Slot >= 0 {
			continue
		}
		x1, x2 := x(f.Start), x(f.End)
		fmt.Fprintf(w, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" opacity="0.35"><title>%s %s %s</title></rect>`+"\n",
			x1, top-6, max(x2-x1, 1), laneY[lanes]-top+6, faultColors[f.Kind], f.Kind, strings.Join(f.Members, ","), html.EscapeString(f.Note))
		fmt.Fprintf(w, `<text x="%.1f" y="%d" font-size="9" fill="#c92a2a">%s</text>`+"\n", x1+1, top-1, shortKind(f.Kind))
	}
	for l := range lanes {
		ly, lh := laneY[l], laneRows[l]*rowH+8
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%.0f" height="%d" fill="none" stroke="#ced4da"/>`+"\n", left, ly, plot, lh)
		fmt.Fprintf(w, `<text x="8" y="%d" font-weight="bold">%s</text>`+"\n", ly+lh/2+4, laneName(l))
		for _, f := range in.Faults {
			if f.Slot != l {
				continue
			}
			x1, x2 := x(f.Start), x(f.End)
			fmt.Fprintf(w, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" opacity="0.45"><title>%s %s</title></rect>`+"\n",
				x1, ly, max(x2-x1, 1), lh, faultColors[f.Kind], f.Kind, html.EscapeString(f.Note))
			fmt.Fprintf(w, `<text x="%.1f" y="%d" font-size="9" fill="#862e9c">%s</text>`+"\n", x1+1, ly+lh-2, shortKind(f.Kind))
		}
		for _, inst := range in.Instances {
			if inst.Slot != l {
				continue
			}
			fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#2f9e44" stroke-width="1"><title>%s started (pid %d)</title></line>`+"\n",
				x(inst.Started), ly, x(inst.Started), ly+lh, inst.Worker, inst.PID)
			if !inst.Ended.IsZero() {
				fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e03131" stroke-width="1"><title>%s %s</title></line>`+"\n",
					x(inst.Ended), ly, x(inst.Ended), ly+lh, inst.Worker, inst.How)
			}
		}
		for _, b := range laneBars[l] {
			r := b.r
			x1, x2 := x(r.Start), x(r.End)
			stroke := ""
			if bad[r.Job] {
				stroke = ` stroke="#e03131" stroke-width="1.2"`
			}
			op := "none"
			if r.Outcome != nil {
				op = r.Outcome.Op
				if !r.Outcome.accepted() {
					op += " (not accepted)"
				}
			}
			fmt.Fprintf(w, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"%s><title>%s token %d attempt %d: %s</title></rect>`+"\n",
				x1, ly+4+b.row*rowH, max(x2-x1, 0.8), rowH-1, c.runColor(r), stroke, r.Job, r.Token, r.Attempt, op)
		}
	}
	// Legend.
	for i, oc := range outcomeColors {
		lx, ly := left+(i%4)*330, legendY+(i/4)*16
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="14" height="9" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", lx, ly, oc.color, lx+18, ly+9, oc.name)
	}
	fmt.Fprintf(w, `<text x="%d" y="%d" fill="#495057">bands: faults (etcd faults span all lanes); green/red lines: daemon process start/end; red outline: job with a violation</text>`+"\n",
		left, legendY+16*((len(outcomeColors)+3)/4)+12)
	fmt.Fprintln(w, "</svg>")
}

func shortKind(k string) string {
	switch k {
	case fKillLeader:
		return "kill leader"
	case fKillFollower:
		return "kill follower"
	case fPauseMember:
		return "pause member"
	case fQuorumLoss:
		return "quorum loss"
	}
	return k
}
