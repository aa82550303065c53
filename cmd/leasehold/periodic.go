package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/spf13/cobra"
)

// periodicFlagHelp documents --periodic.
const periodicFlagHelp = `enqueue a job on a cron schedule, as 'NAME|SPEC|KIND[|PAYLOAD_JSON]' (e.g. 'nightly|0 3 * * *|report|{"full":true}'; SPEC is 5 cron fields, 6 with seconds first, @hourly/@daily/..., '@every 10m' (whole seconds), optionally prefixed with CRON_TZ=Zone; UTC by default), or as a JSON object {"name","spec","kind","payload","queue","priority","max_attempts","timeout","catch_up"}; repeatable (LEASEHOLD_PERIODIC: one per line). Only the elected maintenance leader enqueues, each tick once; ticks missed while no daemon led are caught up within catch_up (default 1h)`

// periodicSpec is the JSON form of --periodic.
type periodicSpec struct {
	Name        string          `json:"name"`
	Spec        string          `json:"spec"`
	Kind        string          `json:"kind"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Queue       string          `json:"queue,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Timeout     string          `json:"timeout,omitempty"`
	CatchUp     string          `json:"catch_up,omitempty"`
}

// parsePeriodic parses one --periodic value. It writes nothing.
func parsePeriodic(s string) (coordinator.PeriodicJob, error) {
	var ps periodicSpec
	bad := func(format string, a ...any) error {
		return usagef("--periodic %q: %s", apiserver.TruncateString(s, 60), fmt.Sprintf(format, a...))
	}
	if t := strings.TrimSpace(s); strings.HasPrefix(t, "{") {
		dec := json.NewDecoder(strings.NewReader(t))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ps); err != nil {
			return coordinator.PeriodicJob{}, bad("not a valid JSON schedule (%s): the fields are name, spec, kind, payload, queue, priority, max_attempts, timeout, catch_up", strings.TrimPrefix(err.Error(), "json: "))
		}
	} else {
		parts := strings.SplitN(s, "|", 4)
		if len(parts) < 3 {
			return coordinator.PeriodicJob{}, bad(`want NAME|SPEC|KIND[|PAYLOAD_JSON], e.g. 'nightly|0 3 * * *|report|{"full":true}'`)
		}
		ps.Name, ps.Spec, ps.Kind = strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1]), strings.TrimSpace(parts[2])
		if len(parts) == 4 {
			ps.Payload = json.RawMessage(strings.TrimSpace(parts[3]))
		}
	}
	pj := coordinator.PeriodicJob{Name: ps.Name, Spec: ps.Spec, Job: coordinator.EnqueueParams{
		Kind: ps.Kind, Payload: ps.Payload, Queue: ps.Queue, Priority: ps.Priority, MaxAttempts: ps.MaxAttempts,
	}}
	if err := coordinator.ValidateKind(ps.Kind); err != nil {
		return pj, bad("%s", apiserver.CleanCoordError(err))
	}
	if len(ps.Payload) > 0 && !json.Valid(ps.Payload) {
		return pj, bad(`payload is not valid JSON: pass e.g. {"full":true}`)
	}
	if ps.Timeout != "" {
		d, err := time.ParseDuration(ps.Timeout)
		if err != nil || d < time.Millisecond {
			return pj, bad("timeout %q is not a duration of at least 1ms", ps.Timeout)
		}
		pj.Job.Timeout = d
	}
	if ps.CatchUp != "" {
		d, err := time.ParseDuration(ps.CatchUp)
		if err != nil || d <= 0 {
			return pj, bad("catch_up %q is not a positive duration such as 1h", ps.CatchUp)
		}
		pj.CatchUp = d
	}
	if _, err := coordinator.ParseSchedule(ps.Spec); err != nil {
		return pj, bad("%s", apiserver.CleanCoordError(err))
	}
	return pj, nil
}

// validateFeatures checks --periodic and --queue-concurrency; it keeps the
// parsed schedules in o.periodicJobs.
func (o *daemonOpts) validateFeatures() error {
	o.periodicJobs = nil
	names := map[string]bool{}
	for _, s := range o.periodic {
		pj, err := parsePeriodic(s)
		if err != nil {
			return err
		}
		if names[pj.Name] {
			return usagef("--periodic: two schedules are named %s: give each its own name", pj.Name)
		}
		names[pj.Name] = true
		if err := coordinator.ValidateQueue(pj.Name); err != nil {
			return usagef("--periodic %q: name: %s", apiserver.TruncateString(s, 60), strings.Replace(apiserver.CleanCoordError(err), "queue", "name", 1))
		}
		o.periodicJobs = append(o.periodicJobs, pj)
	}
	for q, n := range o.queueConcurrency {
		served := false
		for _, s := range o.queues {
			served = served || s == q
		}
		switch {
		case !served:
			return usagef("--queue-concurrency %s=%d: the daemon does not serve queue %s (--queues %s)", q, n, q, strings.Join(o.queues, ","))
		case n < 1 || n > o.concurrency:
			return usagef("--queue-concurrency %s=%d: want 1 to --concurrency (%d)", q, n, o.concurrency)
		}
	}
	return nil
}

// checkPeriodicKinds refuses a schedule of a kind no daemon could run
// (embedded mode: this daemon's kinds), or whose payload that kind would
// refuse.
func (o *daemonOpts) checkPeriodicKinds(kinds map[string]kindSpec) error {
	for _, pj := range o.periodicJobs {
		spec, ok := kinds[pj.Job.Kind]
		if !ok && !o.etcd.shared() && pj.Job.Kind != "history" {
			return usagef("--periodic %s: unknown kind %s: this daemon runs %s: add it with --exec %s=COMMAND or check its spelling", pj.Name, pj.Job.Kind, strings.Join(apiserver.SortedKeys(kinds), ", "), pj.Job.Kind)
		}
		if ok && spec.validate != nil {
			if err := spec.validate(pj.Job.Payload); err != nil {
				return usagef("--periodic %s: %s payload: %v", pj.Name, pj.Job.Kind, err)
			}
		}
	}
	return nil
}

// --- periodic list ---

func newPeriodicCmd() *cobra.Command {
	cmd := groupCmd("periodic", "Show the periodic (cron) jobs", "list")
	var tgt target
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the schedules with their last and next run",
		Long: `List the periodic jobs that a maintenance leader has run (declared with
'leasehold daemon --periodic' or worker.Config.Periodic): name, schedule,
kind, queue, last tick enqueued, the next tick, and how many ticks were
enqueued and skipped (older than the catch-up window, or their unique key
already held by a job). A next run in the past means no leader is running the
schedule now.`,
		Args: argsBetween(0, 0, "[--json]"),
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			var res apiserver.PeriodicResponse
			if err := tgt.getOnce(cmd.Context(), "/v1/periodic", &res); err != nil {
				return err
			}
			if res.Periodic == nil {
				res.Periodic = []coordinator.PeriodicState{}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, res.Periodic)
			}
			notes := periodicNotes(res, time.Now())
			if len(res.Periodic) == 0 && len(notes) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "leasehold: periodic list: no periodic jobs yet: declare them with 'leasehold daemon --periodic NAME|SPEC|KIND'")
				return nil
			}
			if len(res.Periodic) > 0 {
				if err := printPeriodic(out, res.Periodic, time.Now()); err != nil {
					return err
				}
			}
			for _, n := range notes {
				fmt.Fprintln(cmd.ErrOrStderr(), "leasehold: periodic list: "+n)
			}
			return nil
		}),
	}
	addTargetFlags(list, &tgt)
	list.Flags().BoolVar(&asJSON, "json", false, "print the schedules as a JSON array")
	cmd.AddCommand(list)
	return cmd
}

// periodicNotes says which schedules that live daemons declare will not
// run while the present maintenance leader leads: only the leader
// enqueues, its own schedules (a daemon added with a new schedule waits
// for the leader to be one that declares it, and said nothing).
//
// A leader that lists no schedule at all may be a build from before
// 2026-12-05 09:23, whose registration does not list them: during a rolling
// upgrade it leads and runs its schedules. For a schedule that such a
// leader may be running (its next tick is not overdue, as printPeriodic
// counts it), the note says both cases; for one that no leader runs now
// (overdue, or never run), it says what it always did.
func periodicNotes(res apiserver.PeriodicResponse, now time.Time) []string {
	if len(res.Declared) == 0 {
		return nil
	}
	if res.Leader == "" {
		return []string{"no daemon leads maintenance now: no schedule runs until one does"}
	}
	leaderLists := false
	for _, by := range res.Declared {
		leaderLists = leaderLists || slices.Contains(by, res.Leader)
	}
	onTime := map[string]bool{}
	for _, p := range res.Periodic {
		onTime[p.Name] = !p.NextAt.IsZero() && !p.NextAt.Before(now.Add(-time.Minute))
	}
	var notes []string
	for _, name := range apiserver.SortedKeys(res.Declared) {
		by := strings.Join(res.Declared[name], ", ")
		switch {
		case slices.Contains(res.Declared[name], res.Leader):
		case !leaderLists && onTime[name]:
			notes = append(notes, fmt.Sprintf("schedule %s is declared by %s; the maintenance leader %s lists no schedules: either it declares none, and %s runs only while a daemon that declares it leads (declare the same schedules on every daemon), or its build is from before 2026-12-05 09:23, which does not list the schedules it runs", name, by, res.Leader, name))
		default:
			notes = append(notes, fmt.Sprintf("schedule %s is declared by %s but not by the maintenance leader %s: it runs only while a daemon that declares it leads; declare the same schedules on every daemon", name, by, res.Leader))
		}
	}
	return notes
}

func printPeriodic(w io.Writer, ps []coordinator.PeriodicState, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSPEC\tKIND\tQUEUE\tLAST RUN\tNEXT RUN\tENQUEUED\tSKIPPED")
	for _, p := range ps {
		last := "-"
		if p.LastTick != nil {
			last = fmtTime(*p.LastTick)
		}
		next := fmtTime(p.NextAt)
		if !p.NextAt.IsZero() && p.NextAt.Before(now.Add(-time.Minute)) {
			next += " (overdue: no leader runs it)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", p.Name, p.Spec, p.Kind, p.Queue, last, next, p.Enqueued, p.Skipped)
	}
	if err := tw.Flush(); err != nil {
		return failf("write output: %v", err)
	}
	return nil
}
