package main

import (
	"cmp"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/spf13/cobra"
)

func newWorkersCmd() *cobra.Command {
	cmd := groupCmd("workers", "Show the live daemons", "list")
	var tgt target
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the live daemons and how many jobs each runs",
		Args:  argsBetween(0, 0, "[--json]"),
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			var res apiserver.WorkersResponse
			if err := tgt.getOnce(cmd.Context(), "/v1/workers", &res); err != nil {
				return err
			}
			if res.Workers == nil {
				res.Workers = []coordinator.WorkerInfo{}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, res.Workers)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tHOST\tPID\tRUNNING\tCONCURRENCY\tQUEUES\tKINDS\tSTARTED")
			for _, w := range res.Workers {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", w.ID, w.Host, w.PID, w.Running, w.Concurrency,
					strings.Join(w.Queues, ","), strings.Join(w.Kinds, ","), w.StartedAt.Local().Format(time.DateTime))
			}
			if err := tw.Flush(); err != nil {
				return failf("write output: %v", err)
			}
			if len(res.Workers) == 0 {
				// A bare header looks like an answer; in shared mode
				// it is often a mistyped --namespace.
				if tgt.etcd.shared() {
					fmt.Fprintf(cmd.ErrOrStderr(), "leasehold: workers list: no live daemon in namespace %s: check --namespace\n", cmp.Or(tgt.etcd.namespace, coordinator.DefaultNamespace))
				} else {
					fmt.Fprintf(cmd.ErrOrStderr(), "leasehold: workers list: none registered in the store of the daemon at %s\n", tgt.server)
				}
			}
			return nil
		}),
	}
	addTargetFlags(list, &tgt)
	list.Flags().BoolVar(&asJSON, "json", false, "print the workers as a JSON array")
	cmd.AddCommand(list)
	return cmd
}
