package main

import (
	"bytes"
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
	"github.com/leasehold/leasehold/internal/apicall"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/spf13/cobra"
)

func newQueuesCmd() *cobra.Command {
	cmd := groupCmd("queues", "List, pause, resume and limit queues", "list, pause, resume or limit")
	cmd.Long = `Queue control, stored in the store so that it holds for every daemon and
survives restarts. A paused queue's jobs stay where they are (available,
scheduled, ...) and no daemon claims them until it is resumed; running jobs
go on. A queue's limit bounds its jobs running at once across all daemons;
a daemon that dies frees its share with its lease.`
	cmd.AddCommand(newQueuesListCmd(), newQueueChangeCmd("pause"), newQueueChangeCmd("resume"), newQueueChangeCmd("limit"))
	return cmd
}

// queuesPage is the number of queues queues list asks for at a time: it
// prints each page of the table as it comes, so that it holds one page,
// whatever the number of queues (--json holds the array until the end).
const queuesPage = 1000

type queuesListOpts struct {
	target target
	limit  int
	after  string
	json   bool
}

func newQueuesListCmd() *cobra.Command {
	o := &queuesListOpts{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the known queues: paused or not, limit, available jobs, daemons serving them",
		Long: `List the known queues in name order: every one, read a page of ` + strconv.Itoa(queuesPage) + ` at a
time (table columns are aligned within each page), or at most --limit of
them, and then, if there are more, on stderr the flags that list the next
ones (--after CURSOR, as 'jobs list' does). A queue known from the first
page to the last is listed once; one added or removed meanwhile at most once.
--json prints one array once every page came, and nothing if one fails.`,
		Args: argsBetween(0, 0, "[--limit N] [--after CURSOR] [--json]"),
		RunE: action(func(cmd *cobra.Command, _ []string) error { return runQueuesList(cmd, o) }),
	}
	addTargetFlags(cmd, &o.target)
	f := cmd.Flags()
	f.IntVar(&o.limit, "limit", 0, fmt.Sprintf("at most this many queues (1 to %d; default: every queue)", coordinator.MaxListLimit))
	f.StringVar(&o.after, "after", "", "start after this cursor (printed on stderr when --limit left queues out)")
	f.BoolVar(&o.json, "json", false, "print the queues as a JSON array")
	nonEmpty(cmd, "after", "leave it out to start at the first queue, or give the cursor that a listing printed")
	return cmd
}

func runQueuesList(cmd *cobra.Command, o *queuesListOpts) error {
	limited := cmd.Flags().Changed("limit")
	if limited && (o.limit < 1 || o.limit > coordinator.MaxListLimit) {
		return usagef("--limit %d: want 1 to %d, or leave it out for every queue", o.limit, coordinator.MaxListLimit)
	}
	if o.after != "" {
		if err := coordinator.ValidateQueueCursor(o.after); err != nil {
			return usagef("--after %q is not a cursor that a listing printed: it is the name of the last queue listed", o.after)
		}
	}
	c, err := o.target.client(cmd.Context())
	if err != nil {
		return err
	}
	defer c.close()
	pr := &queuesPrinter{out: cmd.OutOrStdout(), json: o.json}
	printed, after := 0, o.after
	for {
		want := queuesPage
		if limited {
			want = min(want, o.limit-printed)
		}
		q := url.Values{"limit": {strconv.Itoa(want)}}
		if after != "" {
			q.Set("after", after)
		}
		var res apiserver.QueuesResponse
		if err := c.call(cmd.Context(), http.MethodGet, "/v1/queues", q, nil, &res); err != nil {
			return olderDaemon(err, printed == 0 && !limited && o.after == "", func() error {
				// A daemon from before paging: every queue at once.
				var all apiserver.QueuesResponse
				if err := c.call(cmd.Context(), http.MethodGet, "/v1/queues", nil, nil, &all); err != nil {
					return err
				}
				return pr.page(all.Queues, true)
			})
		}
		printed += len(res.Queues)
		// A page without queues ends the listing whatever its next says:
		// the loop always moves on.
		last := res.Next == "" || len(res.Queues) == 0 || (limited && printed >= o.limit)
		if err := pr.page(res.Queues, last); err != nil {
			return err
		}
		if last {
			if res.Next != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "leasehold: queues list: more queues: run again with --limit %d --after %s\n", o.limit, res.Next)
			}
			return nil
		}
		after = res.Next
	}
}

// olderDaemon handles the refusal of a page by a daemon from before
// paging (its 400 names the first unknown query parameter in name order:
// "after" when a page after a cursor was asked for): fallback, if ok,
// else the error says what to do.
func olderDaemon(err error, ok bool, fallback func() error) error {
	var ce *cliError
	if !errors.As(err, &ce) || !apicall.RefusesParams(ce.msg, "limit", "after") {
		return err
	}
	if ok {
		return fallback()
	}
	ce.msg = "the daemon is older than --limit and --after of queues list: upgrade it, or leave them out to list every queue"
	return ce
}

// queuesPrinter prints queues page by page: as rows of a table, with its
// header before the first page, or as one JSON array, written as
// printJSON writes a whole one. The array is held until the last page and
// written then: a page that fails leaves nothing on stdout, where a part
// of the array would be JSON that a script cannot read (about 200 bytes a
// queue: 2 MB for 10,000 queues).
type queuesPrinter struct {
	out  io.Writer
	json bool
	n    int          // JSON: queues encoded
	arr  bytes.Buffer // JSON: the array so far
	// header: the table's header is printed.
	header bool
}

// page prints qs; last ends the output.
func (p *queuesPrinter) page(qs []coordinator.QueueInfo, last bool) error {
	if p.json {
		for _, q := range qs {
			e, err := json.MarshalIndent(q, "  ", "  ")
			if err != nil {
				return fmt.Errorf("encode output: %w", err)
			}
			if p.n == 0 {
				p.arr.WriteString("[\n  ")
			} else {
				p.arr.WriteString(",\n  ")
			}
			p.arr.Write(e)
			p.n++
		}
		if !last {
			return nil
		}
		if p.n == 0 {
			p.arr.WriteString("[]\n")
		} else {
			p.arr.WriteString("\n]\n")
		}
		return p.write(p.arr.Bytes())
	}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	if !p.header {
		p.header = true
		fmt.Fprintln(tw, "QUEUE\tSTATE\tLIMIT\tRUNNING/LIMIT\tAVAILABLE\tDAEMONS")
	}
	for _, q := range qs {
		state, limit, held := "active", "-", "-"
		if q.Paused {
			state = "paused since " + fmtPaused(q.PausedAt)
		}
		if q.Limit > 0 {
			limit = strconv.Itoa(q.Limit)
			held = fmt.Sprintf("%d/%d", q.Held, q.Limit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", q.Name, state, limit, held, q.Available, len(q.Workers))
	}
	_ = tw.Flush() // into b
	return p.write(b.Bytes())
}

func (p *queuesPrinter) write(b []byte) error {
	if _, err := p.out.Write(b); err != nil {
		return failf("write output: %v", err)
	}
	return nil
}

// newQueueChangeCmd returns `queues pause|resume|limit`.
func newQueueChangeCmd(op string) *cobra.Command {
	var tgt target
	var force, asJSON bool
	use, short, usage := op+" QUEUE", "", "QUEUE"
	switch op {
	case "pause":
		short = "Pause a queue: no daemon claims its jobs until it is resumed"
	case "resume":
		short = "Resume a paused queue"
	case "limit":
		use, usage = "limit QUEUE N", "QUEUE N (0: no limit)"
		short = "Run at most N jobs of a queue at once across all daemons (0: no limit)"
	}
	nargs := 1
	if op == "limit" {
		nargs = 2
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  argsBetween(nargs, nargs, usage),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			q := args[0]
			if err := coordinator.ValidateQueue(q); err != nil {
				return usagef("%s", apiserver.CleanCoordError(err))
			}
			method, path := http.MethodPost, "/v1/queues/"+url.PathEscape(q)+"/"+op
			var body any
			if op == "limit" {
				n, err := strconv.Atoi(args[1])
				if err != nil || n < 0 || n > coordinator.MaxQueueLimit {
					return usagef("limit %q: want a number from 0 (no limit) to %d", args[1], coordinator.MaxQueueLimit)
				}
				method, body = http.MethodPut, apiserver.LimitRequest{Limit: &n}
			}
			var query url.Values
			if force {
				query = url.Values{"force": {"true"}}
			}
			c, err := tgt.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.close()
			var res apiserver.QueueResponse
			if err := c.call(cmd.Context(), method, path, query, body, &res); err != nil {
				var ce *cliError
				if errors.As(err, &ce) {
					ce.msg = strings.Replace(ce.msg, "or pass force=true", "or pass --force", 1)
				}
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, res.Queue)
			}
			return printLine(out, queueChangeMessage(op, res))
		}),
	}
	addTargetFlags(cmd, &tgt)
	if op != "resume" {
		cmd.Flags().BoolVar(&force, "force", false, "configure the queue even if no daemon serves it yet and it has no jobs")
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the queue's configuration as JSON")
	return cmd
}

func queueChangeMessage(op string, res apiserver.QueueResponse) string {
	q := res.Queue
	switch {
	case op == "pause" && res.Changed:
		return fmt.Sprintf("queue %s paused: no daemon claims its jobs until 'leasehold queues resume %s'", q.Name, q.Name)
	case op == "pause":
		return fmt.Sprintf("queue %s was already paused (since %s)", q.Name, fmtPaused(q.PausedAt))
	case op == "resume" && res.Changed:
		return fmt.Sprintf("queue %s resumed", q.Name)
	case op == "resume":
		return fmt.Sprintf("queue %s was not paused", q.Name)
	case q.Limit == 0:
		return fmt.Sprintf("queue %s: no limit on jobs running at once", q.Name)
	}
	return fmt.Sprintf("queue %s: at most %d jobs at once across all daemons", q.Name, q.Limit)
}

func fmtPaused(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}
