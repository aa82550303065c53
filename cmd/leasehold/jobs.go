package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/spf13/cobra"
)

func newJobsCmd() *cobra.Command {
	cmd := groupCmd("jobs", "List, show, cancel and wait for jobs", "list, get, cancel, retry, delete or wait")
	cmd.AddCommand(newJobsListCmd(), newJobsGetCmd(), newJobsCancelCmd(), newJobsWaitCmd(), newJobsRetryCmd(), newJobsDeleteCmd())
	return cmd
}

// --- jobs list ---

type listOpts struct {
	target target
	state  string
	kind   string
	queue  string
	limit  int
	after  string
	json   bool
}

func newJobsListCmd() *cobra.Command {
	o := &listOpts{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, oldest first (with --state, in that state's order)",
		Args:  argsBetween(0, 0, "[--state S] [--kind K] [--queue Q] [--limit N] [--json]"),
		RunE:  action(func(cmd *cobra.Command, _ []string) error { return runJobsList(cmd, o) }),
	}
	f := cmd.Flags()
	addTargetFlags(cmd, &o.target)
	f.StringVar(&o.state, "state", "", "only jobs in this state: scheduled, available, running, retryable, completed, discarded or cancelled")
	f.StringVar(&o.kind, "kind", "", "only jobs of this kind")
	f.StringVar(&o.queue, "queue", "", "only jobs in this queue")
	f.IntVar(&o.limit, "limit", defaultListLimit, fmt.Sprintf("at most this many jobs (1 to %d)", coordinator.MaxListLimit))
	f.StringVar(&o.after, "after", "", "start after this cursor (printed on stderr when there are more jobs)")
	f.BoolVar(&o.json, "json", false, "print the jobs as a JSON array")
	nonEmpty(cmd, "state", "leave it out for jobs in every state, or name one")
	nonEmpty(cmd, "kind", "leave it out for jobs of every kind, or name one")
	nonEmpty(cmd, "queue", "leave it out for jobs in every queue, or name one")
	nonEmpty(cmd, "after", "leave it out to start at the oldest job, or give the cursor that a page printed")
	return cmd
}

// maxListPages bounds the pages one jobs list reads: a filter that matches
// few of many jobs looks through at most maxListPages*ListScanMax of them
// before it prints what it found and the cursor to go on from.
const maxListPages = 100

// defaultListLimit is --limit's default.
const defaultListLimit = 100

// maxListBytes bounds the jobs one jobs list holds (their JSON) when
// large jobs fill pages before the limit.
const maxListBytes = 64 << 20

func runJobsList(cmd *cobra.Command, o *listOpts) error {
	q := url.Values{}
	if o.state != "" {
		if _, err := coordinator.ParseState(o.state); err != nil {
			return usagef("--state: %s", apiserver.CleanCoordError(err))
		}
		q.Set("state", o.state)
	}
	if o.kind != "" {
		if err := coordinator.ValidateKind(o.kind); err != nil {
			return usagef("--kind: %s", apiserver.CleanCoordError(err))
		}
		q.Set("kind", o.kind)
	}
	if o.queue != "" {
		if err := coordinator.ValidateQueue(o.queue); err != nil {
			return usagef("--queue: %s", apiserver.CleanCoordError(err))
		}
		q.Set("queue", o.queue)
	}
	if o.limit < 1 || o.limit > coordinator.MaxListLimit {
		return usagef("--limit %d: want 1 to %d", o.limit, coordinator.MaxListLimit)
	}
	c, err := o.target.client(cmd.Context())
	if err != nil {
		return err
	}
	defer c.close()
	// A page ends short of the limit with a cursor when it looked through
	// ListScanMax jobs without finding enough that match, or at the
	// response size cap: page on, up to maxListPages pages and about
	// maxListBytes of jobs.
	var page coordinator.ListPage
	var jobs []*coordinator.Job
	after, size, pages := o.after, 0, 0
	for ; pages == 0 || (page.Next != "" && len(jobs) < o.limit && pages < maxListPages && size < maxListBytes); pages++ {
		q.Set("limit", strconv.Itoa(o.limit-len(jobs)))
		if after != "" {
			q.Set("after", after)
		}
		page = coordinator.ListPage{}
		if err := c.call(cmd.Context(), http.MethodGet, "/v1/jobs", q, nil, &page); err != nil {
			return err
		}
		for _, j := range page.Jobs {
			b, _ := json.Marshal(j)
			size += len(b)
		}
		jobs = append(jobs, page.Jobs...)
		after = page.Next
	}
	page.Jobs = jobs
	if page.Jobs == nil {
		page.Jobs = []*coordinator.Job{}
	}
	out := cmd.OutOrStdout()
	if o.json {
		if err := printJSON(out, page.Jobs); err != nil {
			return err
		}
	} else {
		// Running jobs are listed with the daemon that runs them and when
		// their run started, in place of when they were created.
		running := o.state == string(coordinator.StateRunning)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		if running {
			fmt.Fprintln(tw, "ID\tKIND\tQUEUE\tSTATE\tATTEMPT\tOWNER\tSTARTED")
		} else {
			fmt.Fprintln(tw, "ID\tKIND\tQUEUE\tSTATE\tATTEMPT\tCREATED")
		}
		for _, j := range page.Jobs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t", j.ID, j.Kind, j.Queue, stateLabel(j), j.Attempt, j.MaxAttempts)
			if running {
				started := "-"
				if j.AttemptedAt != nil {
					started = fmtTime(*j.AttemptedAt)
				}
				fmt.Fprintf(tw, "%s\t%s\n", cmp.Or(j.Owner, "-"), started)
			} else {
				fmt.Fprintf(tw, "%s\n", fmtTime(j.CreatedAt))
			}
		}
		if err := tw.Flush(); err != nil {
			return failf("write output: %v", err)
		}
	}
	switch {
	case page.Next != "" && len(page.Jobs) < o.limit && size < maxListBytes:
		fmt.Fprintf(cmd.ErrOrStderr(), "leasehold: jobs list: stopped after %d pages (a filtered page looks through at most %d jobs); more may match: run again with %s\n", pages, coordinator.ListScanMax, o.nextPage(page.Next))
	case page.Next != "":
		fmt.Fprintf(cmd.ErrOrStderr(), "leasehold: jobs list: more jobs: run again with %s\n", o.nextPage(page.Next))
	}
	return nil
}

// nextPage is the flags that list the page after cursor next: the cursor
// is only good with the filters it was made under.
func (o *listOpts) nextPage(next string) string {
	var b strings.Builder
	for _, f := range []struct{ flag, v string }{{"--state", o.state}, {"--kind", o.kind}, {"--queue", o.queue}} {
		if f.v != "" {
			fmt.Fprintf(&b, "%s %s ", f.flag, f.v)
		}
	}
	if o.limit != defaultListLimit {
		fmt.Fprintf(&b, "--limit %d ", o.limit)
	}
	fmt.Fprintf(&b, "--after %s", next)
	return b.String()
}

func stateLabel(j *coordinator.Job) string {
	if j.CancelRequested {
		return string(j.State) + " (cancel requested)"
	}
	return string(j.State)
}

// fmtTime shows t in the local time zone, named: a schedule's next run
// in another zone (CRON_TZ) reads right.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05 MST")
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.RFC3339Nano)
}

// jobIDArg validates a job id argument before any request is made.
func jobIDArg(id string) error {
	if err := coordinator.ValidateID(id); err != nil {
		return usagef("%s: job ids are printed by 'leasehold enqueue' and 'leasehold jobs list'", apiserver.CleanCoordError(err))
	}
	return nil
}

// --- jobs get ---

func newJobsGetCmd() *cobra.Command {
	var tgt target
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show one job",
		Args:  argsBetween(1, 1, "ID [--json]"),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			if err := jobIDArg(args[0]); err != nil {
				return err
			}
			c, err := tgt.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.close()
			res, err := c.getJob(cmd.Context(), args[0], 0)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), res.Job)
			}
			return printJob(cmd.OutOrStdout(), res.Job)
		}),
	}
	addTargetFlags(cmd, &tgt)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job as JSON")
	return cmd
}

func printJob(w io.Writer, j *coordinator.Job) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("id", j.ID)
	row("kind", j.Kind)
	row("queue", j.Queue)
	row("state", stateLabel(j))
	row("priority", strconv.Itoa(j.Priority))
	row("attempt", fmt.Sprintf("%d of %d", j.Attempt, j.MaxAttempts))
	row("created_at", fmtTimePtr(&j.CreatedAt))
	row("scheduled_at", fmtTimePtr(&j.ScheduledAt))
	row("attempted_at", fmtTimePtr(j.AttemptedAt))
	row("finalized_at", fmtTimePtr(j.FinalizedAt))
	if j.Timeout() > 0 {
		row("timeout", j.Timeout().String())
	}
	if j.UniqueKey != "" {
		row("unique_key", j.UniqueKey)
	}
	if isSet(j.Metadata) {
		row("metadata", compact(j.Metadata))
	}
	if j.Owner != "" {
		row("owner", j.Owner)
		row("token", j.Token.String())
	}
	row("payload", compact(j.Payload))
	if isSet(j.Checkpoint) {
		row("checkpoint", compact(j.Checkpoint))
	}
	if isSet(j.Result) {
		row("result", compact(j.Result))
	}
	for _, e := range j.Errors {
		row("error", fmt.Sprintf("attempt %d at %s: %s", e.Attempt, fmtTimePtr(&e.At), apiserver.OneLine(e.Error)))
	}
	if err := tw.Flush(); err != nil {
		return failf("write output: %v", err)
	}
	return nil
}

// isSet reports whether b holds a JSON value other than null.
func isSet(b []byte) bool {
	s := strings.TrimSpace(string(b))
	return s != "" && s != "null"
}

// compact shortens JSON for one line of output.
func compact(b []byte) string {
	s := apiserver.OneLine(string(b))
	if s == "" {
		return "-"
	}
	return apiserver.TruncateString(s, 200)
}

// --- jobs cancel ---

func newJobsCancelCmd() *cobra.Command {
	var tgt target
	var asJSON bool
	var bulk cancelManyOpts
	cmd := &cobra.Command{
		Use:   "cancel ID | --state S --kind K --queue Q | --all",
		Short: "Cancel a job, or every unfinished job that matches filters (a running one is stopped by its daemon)",
		Long: `Cancel the job ID, or every unfinished job that matches the filters --state,
--kind and --queue, or with --all every unfinished job. A running job is
stopped by its daemon. The filters are read from the command line only,
never from LEASEHOLD_STATE, LEASEHOLD_KIND, LEASEHOLD_QUEUE or LEASEHOLD_ALL.`,
		Args: argsBetween(0, 1, "ID | --state S --kind K --queue Q | --all"),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			bulk.dropEnv(cmd)
			switch {
			case len(args) == 1 && bulk.set():
				return usagef("pass a job ID or filters (--state, --kind, --queue, --all), not both")
			case len(args) == 0 && !bulk.set():
				return usagef("nothing to cancel: pass a job ID, or filters --state, --kind, --queue (or --all)")
			case len(args) == 0:
				return runCancelMany(cmd, &tgt, &bulk, asJSON)
			}
			id := args[0]
			j, err := callJob(cmd, &tgt, http.MethodPost, id, "/cancel", true)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case asJSON:
				return printJSON(out, j)
			case j.CancelRequested:
				return printLine(out, fmt.Sprintf("%s cancel requested: it is running; its daemon stops it (see 'leasehold jobs wait %s')", id, id))
			default:
				return printLine(out, fmt.Sprintf("%s %s", id, j.State))
			}
		}),
	}
	addTargetFlags(cmd, &tgt)
	addCancelManyFlags(cmd, &bulk)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job as JSON (bulk: the counts)")
	return cmd
}

// --- jobs wait ---

type waitOpts struct {
	target  target
	all     bool
	timeout time.Duration
	json    bool
	// timeoutFlag names the timeout as the user set it: --timeout, or
	// LEASEHOLD_TIMEOUT (which may have been meant for enqueue).
	timeoutFlag string
	// tick refreshes the progress of a wait for ids while a long-poll is
	// out: it may last waitPoll, far past the meter's plainEvery.
	tick <-chan time.Time
}

// Long-poll, polling and progress intervals of jobs wait.
const (
	waitPoll    = 30 * time.Second
	waitAllPoll = 250 * time.Millisecond
	// waitAllPollMax bounds the pause between the counts of a wait --all
	// that take long to read (waitAllPause).
	waitAllPollMax = 10 * time.Second
	waitProgress   = time.Second
)

func newJobsWaitCmd() *cobra.Command {
	o := &waitOpts{}
	cmd := &cobra.Command{
		Use:   "wait [ID... | --all]",
		Short: "Wait until jobs are final (completed, discarded or cancelled)",
		Long: `Wait until the given jobs are final and print each one's id and final state,
or with --all until no job is scheduled, available, running or retryable.
Progress goes to stderr: a bar on a terminal, else a line every 10 s for a
wait that lasts over 2 s. Exits 0 once everything waited for is final,
whatever the final states; 1 if --timeout passes first, after printing the
jobs as they are (a line per final job; with --json every job, or with --all
the counts, as on success). A wait reads again, a second later, after a 503
(the daemon's store did not answer in time), until --timeout, and after a
daemon it reached stops answering (a restart), for up to 5 minutes.`,
		Args: argsBetween(0, -1, "[ID... | --all] [--timeout DUR]"),
		RunE: action(func(cmd *cobra.Command, args []string) error { return runJobsWait(cmd, o, args) }),
	}
	addTargetFlags(cmd, &o.target)
	cmd.Flags().BoolVar(&o.all, "all", false, "wait until every job is final")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "give up after this long (0: wait forever)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the final jobs as a JSON array (with --all: the counts)")
	return cmd
}

func runJobsWait(cmd *cobra.Command, o *waitOpts, ids []string) error {
	switch {
	case o.all && len(ids) > 0:
		return usagef("pass job ids or %s, not both", flagLabel(cmd, "all"))
	case !o.all && len(ids) == 0:
		return usagef("nothing to wait for: pass job ids or --all")
	}
	o.timeoutFlag = flagLabel(cmd, "timeout")
	if o.timeout < 0 {
		return usagef("%s %s is negative: want a duration such as 5m, or 0 to wait forever", o.timeoutFlag, o.timeout)
	}
	for _, id := range ids {
		if err := jobIDArg(id); err != nil {
			return err
		}
	}
	ctx := cmd.Context()
	if o.timeout > 0 {
		// Set before connecting: the timeout bounds every read,
		// the first included.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	c, err := o.target.client(ctx)
	if err != nil {
		return err
	}
	defer c.close()
	p := newMeter(cmd.ErrOrStderr(), "waiting")
	defer p.clear()
	if o.all {
		return waitAll(ctx, cmd.Context(), c, o, cmd.OutOrStdout(), p)
	}
	t := time.NewTicker(waitProgress)
	defer t.Stop()
	o.tick = t.C
	return waitIDs(ctx, cmd.Context(), c, o, ids, cmd.OutOrStdout(), p)
}

func waitIDs(ctx, parent context.Context, c *client, o *waitOpts, ids []string, out io.Writer, p *meter) error {
	final := make([]*coordinator.Job, 0, len(ids))
	var reads waitReads
	for i, id := range ids {
		for {
			p.update(i, len(ids), id+" is not final yet")
			wait := waitPoll
			if dl, ok := ctx.Deadline(); ok {
				wait = min(wait, max(time.Until(dl), time.Millisecond))
			}
			start := time.Now()
			res, err := pollJob(ctx, c, id, wait, o.tick, func() { p.update(i, len(ids), id+" is not final yet") })
			if ctx.Err() != nil {
				p.clear()
				return waitIDsTimedOut(parent, c, o, ids, final, out)
			}
			if again, err := reads.retry(err, c); err != nil {
				return err
			} else if again != "" {
				p.update(i, len(ids), id+" could not be read ("+again+"): retrying")
				pause(ctx, waitRetry)
				continue
			}
			if res.Job.State.Final() {
				p.clear()
				final = append(final, res.Job)
				if !o.json {
					if err := printLine(out, fmt.Sprintf("%s %s", res.Job.ID, res.Job.State)); err != nil {
						return err
					}
				}
				break
			}
			// A draining daemon answers each long-poll at once with
			// the job as it is (StopWaits), for as long as its drain
			// lasts: pause after an answer that came well before its
			// wait, rather than read again at once.
			if time.Since(start) < wait/2 {
				pause(ctx, waitRetry)
			}
		}
	}
	p.done(len(ids), len(ids), "")
	if o.json {
		return printJSON(out, final)
	}
	return nil
}

// waitRetry is how long jobs wait pauses after a read that failed for a
// while (a 503, a daemon restarting) before it reads again.
const waitRetry = time.Second

// waitUnreachable is how long a wait reads again a daemon it reached
// before and that no longer answers (stopped, restarting) before it gives
// up (a variable for tests).
var waitUnreachable = 5 * time.Minute

// waitReads decides which failed reads a wait outlasts.
type waitReads struct {
	reached bool      // the daemon answered a read of this wait
	lost    time.Time // when it stopped answering (zero: it answers)
}

// retry classifies the outcome of a read: again names why the wait should
// read again (a 503: the daemon's store did not answer in time, etcd
// without quorum, say; or a daemon the wait reached before that does not
// answer now, for up to waitUnreachable: it is restarting), else err is
// the wait's end (nil after a read that succeeded). A daemon never reached
// ends the wait at once: --server is likely wrong.
func (w *waitReads) retry(err error, c *client) (again string, _ error) {
	var ce *cliError
	switch {
	case err == nil:
		w.reached, w.lost = true, time.Time{}
		return "", nil
	case unavailable(err) && errors.As(err, &ce) && ce.notProcessed:
		w.reached, w.lost = true, time.Time{}
		return "the daemon is at its --http-max-connections", nil
	case unavailable(err):
		w.reached, w.lost = true, time.Time{}
		return "the store did not answer in time", nil
	case !w.reached || !errors.As(err, &ce) || !ce.unreachable:
		return "", err
	case w.lost.IsZero():
		w.lost = time.Now()
	case time.Since(w.lost) >= waitUnreachable:
		return "", failf("%s has not answered for %s: start it (or check --server) and wait again", c.peer(), time.Since(w.lost).Round(time.Second))
	}
	return "the daemon does not answer: restarting?", nil
}

// unavailable reports whether err is the API's 503: the store did not
// answer in time (etcd without quorum, a leader election), which a wait
// outlasts, up to its --timeout, rather than fail at once.
func unavailable(err error) bool {
	var ce *cliError
	return errors.As(err, &ce) && ce.status == http.StatusServiceUnavailable
}

// pause waits d or until ctx is done. A variable for tests.
var pause = func(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// pollJob long-polls job id for up to wait, calling progress at each tick
// meanwhile. The poll runs in a goroutine of its own, awaited here.
func pollJob(ctx context.Context, c *client, id string, wait time.Duration, tick <-chan time.Time, progress func()) (*apiserver.JobResponse, error) {
	type answer struct {
		res *apiserver.JobResponse
		err error
	}
	rctx, cancel := context.WithTimeout(ctx, wait+requestTimeout)
	defer cancel()
	done := make(chan answer, 1)
	go func() {
		res, err := c.getJob(rctx, id, wait)
		done <- answer{res, err}
	}()
	for {
		select {
		case a := <-done:
			return a.res, a.err
		case <-tick:
			progress()
		}
	}
}

// waitIDsTimedOut ends a wait for ids whose timeout passed once the first
// len(final) were final. It reads the others as they are now (each with a
// context of its own: the wait's has expired, and one shared budget would
// run out on a long list) so that the output is what a script expects
// either way: with --json the array of every job, else a line per final
// job. The error counts the jobs not final, a job that could not be read
// among them, and names the first such job: it is missing from the output.
func waitIDsTimedOut(parent context.Context, c *client, o *waitOpts, ids []string, final []*coordinator.Job, out io.Writer) error {
	jobs := final
	var notFinal []string
	unread := ""
	rest := ids[len(final):]
	for k, id := range rest {
		rctx, cancel := context.WithTimeout(parent, o.lastReadTimeout())
		res, err := c.getJob(rctx, id, 0)
		gaveUp := rctx.Err() != nil
		cancel()
		if err != nil {
			// Unknown is not final. The others are read all the same,
			// unless the daemon did not answer in time: then neither
			// would it for them.
			if unread == "" {
				unread = fmt.Sprintf("; job %s could not be read: %s", id, apiserver.OneLine(err.Error()))
			}
			if gaveUp {
				notFinal = append(notFinal, rest[k:]...)
				break
			}
			notFinal = append(notFinal, id)
			continue
		}
		jobs = append(jobs, res.Job)
		switch {
		case !res.Job.State.Final():
			notFinal = append(notFinal, id)
		case !o.json:
			if err := printLine(out, fmt.Sprintf("%s %s", res.Job.ID, res.Job.State)); err != nil {
				return err
			}
		}
	}
	if o.json {
		if err := printJSON(out, jobs); err != nil {
			return err
		}
	}
	if len(notFinal) == 0 {
		return nil // all final after all, as the timeout passed
	}
	if len(ids) == 1 {
		return failf("timed out after %s: job %s is not final yet%s: raise %s or wait again", o.timeout, notFinal[0], unread, o.timeoutFlag)
	}
	are := "are"
	if len(notFinal) == 1 {
		are = "is"
	}
	return failf("timed out after %s: %d of %d jobs %s not final yet (%s first%s): raise %s or wait again", o.timeout, len(notFinal), len(ids), are, notFinal[0], unread, o.timeoutFlag)
}

// lastReadTimeout bounds a read made once the wait's timeout has passed:
// no longer than the timeout itself, so that a store that does not answer
// does not hold the command for a requestTimeout more.
func (o *waitOpts) lastReadTimeout() time.Duration {
	if o.timeout > 0 {
		return min(o.timeout, requestTimeout)
	}
	return requestTimeout
}

func waitAll(ctx, parent context.Context, c *client, o *waitOpts, out io.Writer, p *meter) error {
	var last *apiserver.StatsResponse
	base := -1 // final jobs at the first poll
	var reads waitReads
	for {
		began := time.Now()
		st, err := c.stats(ctx)
		took := time.Since(began)
		if ctx.Err() != nil {
			p.clear()
			if last == nil {
				// Nothing was read: that is no sign of jobs not
				// final, and a store that did not answer within
				// the timeout is not asked again.
				return failf("timed out after %s: could not read the job counts from %s within the timeout: check that it is healthy, then wait again (or raise %s)", o.timeout, c.peer(), o.timeoutFlag)
			}
			// The counts as they are now, with a context of their own
			// (the wait's has expired); else those of the last poll.
			rctx, cancel := context.WithTimeout(parent, o.lastReadTimeout())
			if now, err := c.stats(rctx); err == nil {
				last = now
			}
			cancel()
			if last != nil && pendingTotal(last.Counts) == 0 {
				return printAllFinal(out, o, last) // all final after all
			}
			pending := ""
			if last != nil {
				// The counts line of a success, as they are.
				if err := printAllFinal(out, o, last); err != nil {
					return err
				}
				pending = ": " + pendingCounts(last.Counts)
			}
			return failf("timed out after %s with jobs not final yet%s: raise %s or wait again", o.timeout, pending, o.timeoutFlag)
		}
		if again, err := reads.retry(err, c); err != nil {
			return err
		} else if again != "" {
			if last != nil {
				p.update(last.Total-pendingTotal(last.Counts)-base, last.Total-base, "the counts could not be read ("+again+"): retrying")
			}
			pause(ctx, waitRetry)
			continue
		}
		last = st
		pending := pendingTotal(st.Counts)
		if base < 0 {
			base = st.Total - pending
		}
		if pending == 0 {
			p.done(st.Total-base, st.Total-base, "")
			return printAllFinal(out, o, st)
		}
		p.update(st.Total-pending-base, st.Total-base, pendingCounts(st.Counts))
		select {
		case <-ctx.Done():
		case <-time.After(waitAllPause(took)):
		}
	}
}

// waitAllPause is the pause of a wait --all after counts that took took
// to read: waitAllPoll, or ten times as long as the read when that is
// longer (at most waitAllPollMax). The daemon counts every job it keeps,
// finished ones included, at each read: a wait over hundreds of thousands
// of kept jobs polled every 250 ms kept a core of the daemon counting
// (2026-12-06); now it takes at most about a tenth.
func waitAllPause(took time.Duration) time.Duration {
	return min(max(waitAllPoll, 10*took), waitAllPollMax)
}

// printAllFinal prints the counts of a wait --all that ended: all final,
// or, at a timeout, not.
func printAllFinal(out io.Writer, o *waitOpts, st *apiserver.StatsResponse) error {
	if o.json {
		return printJSON(out, st.Counts)
	}
	head := "all jobs final"
	if pendingTotal(st.Counts) > 0 {
		head = "not all jobs final"
	}
	return printLine(out, fmt.Sprintf("%s: completed=%d discarded=%d cancelled=%d", head,
		st.Counts[coordinator.StateCompleted], st.Counts[coordinator.StateDiscarded], st.Counts[coordinator.StateCancelled]))
}

var pendingStates = []coordinator.State{coordinator.StateScheduled, coordinator.StateAvailable, coordinator.StateRunning, coordinator.StateRetryable}

func pendingTotal(counts map[coordinator.State]int) int {
	n := 0
	for _, st := range pendingStates {
		n += counts[st]
	}
	return n
}

func pendingCounts(counts map[coordinator.State]int) string {
	parts := make([]string, len(pendingStates))
	for i, st := range pendingStates {
		parts[i] = fmt.Sprintf("%s=%d", st, counts[st])
	}
	return strings.Join(parts, " ")
}
