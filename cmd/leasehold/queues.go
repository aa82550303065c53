package main

import (
	"errors"
	"fmt"
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

func newQueuesListCmd() *cobra.Command {
	var tgt target
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the known queues: paused or not, limit, available jobs, daemons serving them",
		Args:  argsBetween(0, 0, "[--json]"),
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			var res apiserver.QueuesResponse
			if err := tgt.getOnce(cmd.Context(), "/v1/queues", &res); err != nil {
				return err
			}
			if res.Queues == nil {
				res.Queues = []coordinator.QueueInfo{}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, res.Queues)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "QUEUE\tSTATE\tLIMIT\tRUNNING/LIMIT\tAVAILABLE\tDAEMONS")
			for _, q := range res.Queues {
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
			if err := tw.Flush(); err != nil {
				return failf("write output: %v", err)
			}
			return nil
		}),
	}
	addTargetFlags(cmd, &tgt)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the queues as a JSON array")
	return cmd
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
