package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/spf13/cobra"
)

// callJob makes one request about job id (path /v1/jobs/ID plus suffix)
// and returns the job the answer carries; with mustAnswer, an answer
// without one is an error.
func callJob(cmd *cobra.Command, tgt *target, method, id, suffix string, mustAnswer bool) (*coordinator.Job, error) {
	if err := jobIDArg(id); err != nil {
		return nil, err
	}
	c, err := tgt.client(cmd.Context())
	if err != nil {
		return nil, err
	}
	defer c.close()
	var res apiserver.JobResponse
	if err := c.call(cmd.Context(), method, "/v1/jobs/"+url.PathEscape(id)+suffix, nil, nil, &res); err != nil {
		return nil, err
	}
	if mustAnswer && res.Job == nil {
		return nil, failf("the daemon answered without a job: is --server a leasehold daemon?")
	}
	return res.Job, nil
}

// --- jobs retry ---

func newJobsRetryCmd() *cobra.Command {
	var tgt target
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "retry ID",
		Short: "Run a discarded or cancelled job again now",
		Long: `Make a discarded or cancelled job available again now, keeping its history
(errors, attempts, checkpoint); if it had used all its attempts it gets one
more. A scheduled or retryable job is made available now. A running,
available or completed job, or one whose record has grown too large to run
again, is refused with a message saying why (exit 1).`,
		Args: argsBetween(1, 1, "ID [--json]"),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			id := args[0]
			j, err := callJob(cmd, &tgt, http.MethodPost, id, "/retry", true)
			if err != nil {
				// The id is checked before the request: a 400 is about
				// the job (grown too large to run again, ADR 0018).
				return refusedNotBadInput(err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), j)
			}
			return printLine(cmd.OutOrStdout(), fmt.Sprintf("%s %s: attempt %d of %d next", id, j.State, j.Attempt+1, j.MaxAttempts))
		}),
	}
	addTargetFlags(cmd, &tgt)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the job as JSON")
	return cmd
}

// --- jobs delete ---

func newJobsDeleteCmd() *cobra.Command {
	var tgt target
	cmd := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a finished job now (without waiting for retention)",
		Long: `Delete a completed, discarded or cancelled job now, instead of waiting for
the daemon's --retention. An unfinished job is refused (exit 1): cancel it
first.`,
		Args: argsBetween(1, 1, "ID"),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			id := args[0]
			j, err := callJob(cmd, &tgt, http.MethodDelete, id, "", false)
			if err != nil {
				return err
			}
			state := "finished"
			if j != nil {
				state = string(j.State)
			}
			return printLine(cmd.OutOrStdout(), fmt.Sprintf("%s deleted (it was %s)", id, state))
		}),
	}
	addTargetFlags(cmd, &tgt)
	return cmd
}

// --- jobs cancel --state S --kind K --queue Q | --all ---

type cancelManyOpts struct {
	state, kind, queue string
	all                bool
}

func addCancelManyFlags(cmd *cobra.Command, o *cancelManyOpts) {
	f := cmd.Flags()
	f.StringVar(&o.state, "state", "", "cancel every job in this state: scheduled, available, running or retryable")
	f.StringVar(&o.kind, "kind", "", "cancel every unfinished job of this kind")
	f.StringVar(&o.queue, "queue", "", "cancel every unfinished job in this queue")
	f.BoolVar(&o.all, "all", false, "cancel every unfinished job")
	for _, name := range []string{"state", "kind", "queue"} {
		nonEmpty(cmd, name, "name one, or leave the flag out (an empty filter would match every job)")
	}
}

func (o *cancelManyOpts) set() bool { return o.state != "" || o.kind != "" || o.queue != "" || o.all }

// dropEnv clears the filters that came from environment variables: a bulk
// cancel takes its filters from the command line only, so that an
// exported LEASEHOLD_QUEUE (meant for enqueue, say) neither turns a
// forgotten ID into the cancel of a whole queue nor refuses a given one.
func (o *cancelManyOpts) dropEnv(cmd *cobra.Command) {
	for _, name := range []string{"state", "kind", "queue", "all"} {
		unsetFromEnv(cmd, name)
	}
}

// validate checks the filters before any request is made.
func (o *cancelManyOpts) validate() error {
	if o.state != "" {
		st, err := coordinator.ParseState(o.state)
		if err != nil {
			return usagef("--state: %s", apiserver.CleanCoordError(err))
		}
		if st.Final() {
			return usagef("--state %s: finished jobs cannot be cancelled; use scheduled, available, running or retryable", st)
		}
	}
	if o.kind != "" {
		if err := coordinator.ValidateKind(o.kind); err != nil {
			return usagef("--kind: %s", apiserver.CleanCoordError(err))
		}
	}
	if o.queue != "" {
		if err := coordinator.ValidateQueue(o.queue); err != nil {
			return usagef("--queue: %s", apiserver.CleanCoordError(err))
		}
	}
	if o.all && (o.state != "" || o.kind != "" || o.queue != "") {
		return usagef("--all cancels every unfinished job: pass it alone, or filters without it")
	}
	return nil
}

// bulkCancelTimeout bounds a bulk cancel's request: time for some 40
// million jobs on etcd. Interrupted, it can be run again: it cancels what
// is left.
const bulkCancelTimeout = time.Hour

func runCancelMany(cmd *cobra.Command, tgt *target, o *cancelManyOpts, asJSON bool) error {
	if err := o.validate(); err != nil {
		return err
	}
	c, err := tgt.client(cmd.Context())
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.probe(cmd.Context()); err != nil {
		return err
	}
	var res coordinator.CancelManyResult
	req := apiserver.CancelManyRequest{State: o.state, Kind: o.kind, Queue: o.queue, All: o.all}
	// One request cancels every match: a large backlog takes longer than
	// one ordinary request may (about 12,000 jobs a second on etcd).
	ctx, cancel := context.WithTimeout(cmd.Context(), bulkCancelTimeout)
	defer cancel()
	if err := c.call(ctx, http.MethodPost, "/v1/jobs/cancel", nil, req, &res); err != nil {
		var ce *cliError
		if errors.As(err, &ce) && (res.Cancelled > 0 || res.CancelRequested > 0) {
			// The daemon's error answer says what it did before.
			ce.msg = fmt.Sprintf("cancelled %s and requested the cancel of %s before it failed: %s", nJobs(res.Cancelled, ""), nJobs(res.CancelRequested, "running "), ce.msg)
		}
		return err
	}
	if asJSON {
		return printJSON(cmd.OutOrStdout(), res)
	}
	who := "their daemons stop them"
	if res.CancelRequested == 1 {
		who = "its daemon stops it"
	}
	return printLine(cmd.OutOrStdout(), fmt.Sprintf("cancelled %s; cancel requested for %s (%s)", nJobs(res.Cancelled, ""), nJobs(res.CancelRequested, "running "), who))
}

// nJobs says n jobs, with the adjective adj ("running ") before the noun:
// "1 job", "2 running jobs".
func nJobs(n int, adj string) string {
	if n == 1 {
		return fmt.Sprintf("1 %sjob", adj)
	}
	return fmt.Sprintf("%d %sjobs", n, adj)
}
