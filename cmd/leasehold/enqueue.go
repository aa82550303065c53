package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apicall"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/jsontext"
	"github.com/spf13/cobra"
)

// The batches clients send stay within what the daemon takes.
const _ = uint(apiserver.MinBatchBody - 2*apicall.BatchBytes)

// batchSize returns how many copies of req one batch request carries
// (apicall.BatchLen).
func batchSize(req apiserver.CreateRequest) (int, error) {
	b, err := json.Marshal(req) // as the request encodes it
	if err != nil {
		return 0, failf("encode the job: %v", err)
	}
	return apicall.BatchLen(apicall.BatchJobs, func(int) int { return len(b) }), nil
}

type enqueueOpts struct {
	target      target
	count       int
	queue       string
	priority    int
	delay       time.Duration
	at          string
	maxAttempts int
	timeout     time.Duration
	uniqueKey   string
	json        bool
	uniq        uniqueFlags // --unique-by-*, --unique-states, --metadata (enqueue_unique.go)
}

func newEnqueueCmd() *cobra.Command {
	o := &enqueueOpts{}
	cmd := &cobra.Command{
		Use:   "enqueue KIND [PAYLOAD_JSON]",
		Short: "Enqueue jobs and print their ids",
		Long: `Enqueue a job of KIND with PAYLOAD_JSON (default {}; "-" reads it from
stdin) and print its id. With --count N, enqueue N such jobs and print one id
per line. With --unique-key, a live job with the same key is returned instead
of inserting a second one; its id is printed and stderr says so. A queue no
live daemon serves is accepted (its daemons may start later) with a warning
on stderr.`,
		Example: `  leasehold enqueue sleep '{"ms":100}'
  leasehold enqueue echo '{"hello":"world"}' --count 1000 --queue bulk
  leasehold enqueue report '{}' --delay 10m --unique-key nightly-2030-01-02`,
		Args: argsBetween(1, 2, "KIND [PAYLOAD_JSON]"),
		RunE: action(func(cmd *cobra.Command, args []string) error { return runEnqueue(cmd, o, args) }),
	}
	f := cmd.Flags()
	addWriteTargetFlags(cmd, &o.target)
	f.IntVar(&o.count, "count", 1, "number of identical jobs to enqueue (at most 1000000)")
	f.StringVar(&o.queue, "queue", coordinator.DefaultQueue, "queue")
	f.IntVar(&o.priority, "priority", coordinator.DefaultPriority, "priority from 1 (first) to 4 (last)")
	f.DurationVar(&o.delay, "delay", 0, "run no earlier than this long from now (e.g. 90s, 10m)")
	f.StringVar(&o.at, "at", "", "run no earlier than this RFC 3339 time (e.g. 2030-01-02T15:04:05Z)")
	f.IntVar(&o.maxAttempts, "max-attempts", coordinator.DefaultMaxAttempts, "attempts before the job is discarded")
	f.DurationVar(&o.timeout, "timeout", 0, "bound on each attempt (0: the daemon's default)")
	f.StringVar(&o.uniqueKey, "unique-key", "", "do not enqueue if a live job has this key")
	f.BoolVar(&o.json, "json", false, "print the jobs as one JSON array")
	addUniqueFlags(cmd, &o.uniq)
	nonEmpty(cmd, "queue", fmt.Sprintf("leave it out for the %q queue, or name one", coordinator.DefaultQueue))
	nonEmpty(cmd, "at", "leave it out to run the job now, or give a time such as 2030-01-02T15:04:05Z")
	nonEmpty(cmd, "unique-key", "leave it out for a job without a key, or give the key")
	return cmd
}

// enqueueRequest validates the command line and builds the request. It
// sends nothing.
func enqueueRequest(cmd *cobra.Command, o *enqueueOpts, args []string) (apiserver.CreateRequest, error) {
	if err := o.target.etcd.validate(); err != nil {
		return apiserver.CreateRequest{}, err
	}
	if err := o.target.useMaxPayload(cmd); err != nil {
		return apiserver.CreateRequest{}, err
	}
	req := apiserver.CreateRequest{Kind: args[0], Queue: o.queue, UniqueKey: o.uniqueKey}
	if err := coordinator.ValidateKind(req.Kind); err != nil {
		return req, usagef("%s", apiserver.CleanCoordError(err))
	}
	if len(args) > 1 {
		raw := []byte(args[1])
		if args[1] == "-" {
			b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<30))
			if err != nil {
				return req, failf("read payload from stdin: %v", err)
			}
			if len(bytes.TrimSpace(b)) == 0 {
				return req, usagef(`payload "-" read nothing from stdin: pipe a JSON value into it (echo '{"ms":100}' | leasehold enqueue sleep -), or give the payload as an argument`)
			}
			raw = b
		}
		if at := apiserver.InvalidUTF8(raw); at >= 0 {
			return req, usagef("payload is not valid UTF-8 (at byte %d): JSON text is UTF-8; encode binary data (base64 or hex, say)", at)
		}
		// json.Valid, not a decode into any: a number beyond float64
		// (1e400) is valid JSON, which the daemon takes and keeps as
		// written.
		if !json.Valid(raw) {
			var v any
			err := json.Unmarshal(raw, &v) // says what is wrong, and where
			return req, usagef(`payload is not valid JSON (%s): pass a JSON object such as '{"ms":100}'`, strings.TrimPrefix(fmt.Sprint(err), "json: "))
		}
		if at := jsontext.LoneSurrogate(raw); at >= 0 {
			return req, usagef("%s", jsontext.LoneSurrogateError("payload", at))
		}
		req.Payload = json.RawMessage(raw)
	}
	if err := coordinator.ValidateQueue(o.queue); err != nil {
		return req, usagef("%s", envLabeled(cmd, "queue", apiserver.CleanCoordError(err)))
	}
	// Sent as JSON, a key that is not UTF-8 would reach the daemon with
	// its bad bytes replaced by U+FFFD: as another key, maybe a live
	// job's, and this job would not be enqueued.
	if !utf8.ValidString(o.uniqueKey) {
		return req, usagef("%s is not valid UTF-8: encode a binary key (hex or base64, say)", flagLabel(cmd, "unique-key"))
	}
	if o.count < 1 {
		return req, usagef("%s %d: want 1 or more", flagLabel(cmd, "count"), o.count)
	}
	if o.count > maxEnqueueCount {
		return req, usagef("%s %d: want at most %d; for more, run enqueue again", flagLabel(cmd, "count"), o.count, maxEnqueueCount)
	}
	if o.priority < 1 || o.priority > 4 {
		return req, usagef("%s %d: want 1 (first) to 4 (last)", flagLabel(cmd, "priority"), o.priority)
	}
	if o.priority != coordinator.DefaultPriority {
		req.Priority = &o.priority
	}
	if o.maxAttempts < 1 {
		return req, usagef("%s %d: want 1 or more", flagLabel(cmd, "max-attempts"), o.maxAttempts)
	}
	if o.maxAttempts != coordinator.DefaultMaxAttempts {
		req.MaxAttempts = &o.maxAttempts
	}
	if o.timeout < 0 {
		return req, usagef("%s %s is negative: want a duration such as 30s, or 0 for the daemon's default", flagLabel(cmd, "timeout"), o.timeout)
	}
	if o.timeout > 0 {
		if o.timeout < time.Millisecond {
			return req, usagef("%s %s is under 1ms: want a duration such as 30s", flagLabel(cmd, "timeout"), o.timeout)
		}
		req.Timeout = o.timeout.String()
	}
	// One given on the command line wins over the other's environment
	// variable; both from one source is a mistake.
	switch drop, err := exclusive(cmd, "delay", "at"); {
	case err != nil:
		return req, err
	case drop == "delay":
		o.delay = 0
	case drop == "at":
		o.at = ""
	}
	if o.delay < 0 {
		return req, usagef("%s %s is negative: want a duration such as 90s", flagLabel(cmd, "delay"), o.delay)
	}
	if o.delay > 0 {
		req.Delay = o.delay.String()
	}
	if o.at != "" {
		t, err := time.Parse(time.RFC3339Nano, o.at)
		if _, local := time.Parse("2006-01-02T15:04:05.999999999", o.at); err != nil && local == nil {
			// date +%FT%T: the time is there, its zone is not.
			return req, usagef("%s %q has no time zone: add Z for UTC or an offset such as +02:00 (date -u +%%FT%%TZ, date --iso-8601=seconds)", flagLabel(cmd, "at"), o.at)
		}
		if err != nil {
			return req, usagef("%s %q is not an RFC 3339 time: use e.g. 2030-01-02T15:04:05Z", flagLabel(cmd, "at"), o.at)
		}
		// Refused here too, before any request (no daemon needed), in
		// words that name the flag or the LEASEHOLD_AT it came from; the
		// limit is inclusive (the coordinator clamps retries and snoozes
		// to it).
		if t.After(coordinator.MaxScheduledAt) {
			return req, usagef("%s %s is after %s, the latest time a job can be scheduled for: use an earlier time", flagLabel(cmd, "at"), o.at, coordinator.MaxScheduledAt.Format(time.RFC3339))
		}
		req.ScheduledAt = t.Format(time.RFC3339Nano)
	}
	if err := o.uniq.apply(cmd, &req); err != nil {
		return req, err
	}
	if (o.uniqueKey != "" || req.Unique != nil) && o.count > 1 {
		return req, usagef("%s with %s %d would give %d jobs one key: enqueue one job per key", o.uniqueFlag(cmd), flagLabel(cmd, "count"), o.count, o.count)
	}
	return req, nil
}

// envLabeled prefixes msg with the environment variable that set flag
// name, if one did: the message names the value but not where it came
// from.
func envLabeled(cmd *cobra.Command, name, msg string) string {
	if env, ok := fromEnv(cmd, name); ok {
		return env + ": " + msg
	}
	return msg
}

// uniqueFlag names the first unique option that is set, for errors.
func (o *enqueueOpts) uniqueFlag(cmd *cobra.Command) string {
	name := "unique-states"
	switch {
	case o.uniqueKey != "":
		name = "unique-key"
	case o.uniq.byArgs:
		name = "unique-by-args"
	case o.uniq.byQueue:
		name = "unique-by-queue"
	case o.uniq.period != 0:
		name = "unique-period"
	}
	return flagLabel(cmd, name)
}

func runEnqueue(cmd *cobra.Command, o *enqueueOpts, args []string) error {
	req, err := enqueueRequest(cmd, o, args)
	if err != nil {
		return err
	}
	c, err := o.target.client(cmd.Context())
	if err != nil {
		return err
	}
	defer c.close()
	ctx := cmd.Context()
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()

	if o.count == 1 {
		var res apiserver.CreateResponse
		if err := c.call(ctx, http.MethodPost, "/v1/jobs", nil, req, &res); err != nil {
			return err
		}
		if res.Job == nil {
			return failf("the daemon at %s answered without a job: is --server a leasehold daemon?", c.server)
		}
		if o.json {
			if err := printJSON(stdout, []*coordinator.Job{res.Job}); err != nil {
				return err
			}
		} else if err := printLine(stdout, res.Job.ID); err != nil {
			// The job is in, but the script that reads its id has
			// not got it.
			return err
		}
		if res.Existed {
			fmt.Fprintf(stderr, "leasehold: enqueue: job %s already exists with unique key %s (state %s); nothing enqueued\n", res.Job.ID, res.Job.UniqueKey, res.Job.State)
			return nil
		}
		warnUnserved(ctx, c, &o.target, stderr, res.Job.Queue, 1)
		return nil
	}

	per, err := batchSize(req)
	if err != nil {
		return err
	}
	var all []*coordinator.Job
	done := 0
	p := newMeter(stderr, "enqueue")
	defer p.clear()
	for done < o.count {
		n := min(per, o.count-done)
		batch := apiserver.BatchRequest{Jobs: make([]apiserver.CreateRequest, n)}
		for i := range batch.Jobs {
			batch.Jobs[i] = req
		}
		var res apiserver.BatchResponse
		err := c.call(ctx, http.MethodPost, "/v1/jobs/batch", nil, batch, &res)
		if err == nil && len(res.Jobs) != n {
			// Answered as done, but not with these jobs.
			err = &cliError{code: exitFailure, outcomeUnknown: true, msg: fmt.Sprintf("the daemon answered %d jobs for a batch of %d: is --server a leasehold daemon?", len(res.Jobs), n)}
		}
		if err != nil {
			p.clear()
			var ce *cliError
			if errors.As(err, &ce) {
				// Which jobs are in (their ids printed), which may be,
				// and which were not sent.
				ce.msg = batchFailure(done, n, o.count, ce.outcomeUnknown) + ce.msg
			}
			// The jobs enqueued so far, if any: a failure before the
			// first prints nothing, as with one job (not "null").
			if o.json && len(all) > 0 {
				_ = printJSON(stdout, all)
			}
			return err
		}
		p.clear() // the ids go to stdout, maybe the same terminal
		if o.json {
			all = append(all, res.Jobs...)
		} else {
			var b strings.Builder
			for _, j := range res.Jobs {
				b.WriteString(j.ID)
				b.WriteByte('\n')
			}
			if _, err := io.WriteString(stdout, b.String()); err != nil {
				return failf("write output: %v", err)
			}
		}
		done += n
		p.update(done, o.count, "")
	}
	p.done(done, o.count, "")
	if o.json {
		if err := printJSON(stdout, all); err != nil {
			return err
		}
	}
	warnUnserved(ctx, c, &o.target, stderr, req.Queue, o.count)
	return nil
}

// batchFailure prefixes the error of an enqueue of count jobs whose batch
// request of n jobs failed after done were enqueued: which jobs are in
// (their ids printed), which may be (unknown: the request's outcome is),
// and which were not sent. It is "" when nothing was enqueued and nothing
// is in doubt, as for one job.
func batchFailure(done, n, count int, unknown bool) string {
	rest := count - done - n
	var head, doubt string
	if done > 0 {
		head = fmt.Sprintf("enqueued %d of %d jobs (their ids are printed); ", done, count)
		doubt = fmt.Sprintf("the next %d", n)
	} else {
		doubt = fmt.Sprintf("the first %d of %d", n, count)
	}
	switch {
	case unknown && rest > 0:
		return head + fmt.Sprintf("%s may or may not have been enqueued, the last %d were not sent: ", doubt, rest)
	case unknown && done > 0:
		return head + fmt.Sprintf("the last %d may or may not have been enqueued: ", n)
	case done > 0:
		return head + fmt.Sprintf("the other %d were not: ", count-done)
	}
	return ""
}

// servedQueuesTimeout bounds the read of the live daemons' queues after an
// enqueue: the jobs are in, and a slow answer must not hold the command.
const servedQueuesTimeout = 5 * time.Second

// warnUnserved writes one warning line to w when live daemons run but none
// serves queue: most likely a typo, whose jobs would wait forever. It is
// no refusal, as enqueuing for daemons deployed later is legitimate. It
// reads the daemons' registrations (GET /v1/workers, as 'workers list'
// and the DAEMONS column of 'queues list' do); a failed read says
// nothing: the jobs are enqueued either way. With no live daemon there is
// no queue to compare with (as for kinds, see liveKinds), but in shared
// mode that is what a mistyped --namespace looks like: the warning names
// the namespace instead.
func warnUnserved(ctx context.Context, c *client, t *target, w io.Writer, queue string, n int) {
	ctx, cancel := context.WithTimeout(ctx, servedQueuesTimeout)
	defer cancel()
	var res apiserver.WorkersResponse
	if err := c.call(ctx, http.MethodGet, "/v1/workers", nil, nil, &res); err != nil {
		return
	}
	jobs := "the job waits"
	if n > 1 {
		jobs = "the jobs wait"
	}
	if len(res.Workers) == 0 {
		if t.etcd.shared() {
			fmt.Fprintf(w, "leasehold: enqueue: warning: no live daemon in namespace %s: %s until one starts there; check --namespace\n",
				cmp.Or(t.etcd.namespace, coordinator.DefaultNamespace), jobs)
		}
		return
	}
	served := map[string]bool{}
	for _, wk := range res.Workers {
		for _, q := range wk.Queues {
			served[q] = true
		}
	}
	if served[queue] {
		return
	}
	fmt.Fprintf(w, "leasehold: enqueue: warning: no live daemon serves queue %q (the daemons serve %s): %s until one does\n",
		queue, strings.Join(apiserver.SortedKeys(served), ", "), jobs)
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return failf("write output: %v", err)
	}
	return nil
}

// printLine writes line and a newline to w. A write that fails (a full
// disk, a closed stdout) is a failure, exit 1, as in printJSON: a script
// that reads the output must not take an exit 0 without it for success.
func printLine(w io.Writer, line string) error {
	if _, err := io.WriteString(w, line+"\n"); err != nil {
		return failf("write output: %v", err)
	}
	return nil
}

// maxEnqueueCount bounds --count: a typo of a few digits would otherwise
// write jobs for hours.
const maxEnqueueCount = 1_000_000
