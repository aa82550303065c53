package main

import (
	"encoding/json"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/jsontext"
	"github.com/spf13/cobra"
)

// uniqueFlags are enqueue's unique options beyond --unique-key, and its
// metadata.
type uniqueFlags struct {
	byArgs   bool
	byQueue  bool
	period   time.Duration
	states   []string
	metadata string
}

func addUniqueFlags(cmd *cobra.Command, u *uniqueFlags) {
	f := cmd.Flags()
	f.BoolVar(&u.byArgs, "unique-by-args", false, "unique by kind and payload (as JSON values): return the existing job instead of inserting a second")
	f.BoolVar(&u.byQueue, "unique-by-queue", false, "unique by kind and queue (with the other --unique-* options)")
	f.DurationVar(&u.period, "unique-period", 0, "unique within a period, e.g. 1h: one job per kind (and payload, queue) per hour")
	f.StringSliceVar(&u.states, "unique-states", nil, "finished states in which an existing job still counts as a duplicate: completed, discarded, cancelled (unfinished jobs always count)")
	f.StringVar(&u.metadata, "metadata", "", "JSON stored with the job for middleware (trace ids, tenants)")
	nonEmpty(cmd, "unique-states", "leave it out to count only unfinished jobs as duplicates, or name finished states: completed, discarded, cancelled")
	nonEmpty(cmd, "metadata", `leave it out for none, or give a JSON object such as '{"tenant":"acme"}'`)
}

// apply validates the flags and sets them on req.
func (u *uniqueFlags) apply(cmd *cobra.Command, req *apiserver.CreateRequest) error {
	if u.metadata != "" {
		if at := apiserver.InvalidUTF8([]byte(u.metadata)); at >= 0 {
			return usagef("%s is not valid UTF-8 (at byte %d): JSON text is UTF-8; encode binary data (base64 or hex, say)", flagLabel(cmd, "metadata"), at)
		}
		if !json.Valid([]byte(u.metadata)) {
			return usagef(`%s is not valid JSON: pass e.g. '{"tenant":"acme"}'`, flagLabel(cmd, "metadata"))
		}
		if at := jsontext.LoneSurrogate([]byte(u.metadata)); at >= 0 {
			return usagef("%s", jsontext.LoneSurrogateError(flagLabel(cmd, "metadata"), at))
		}
		req.Metadata = json.RawMessage(u.metadata)
	}
	set := u.byArgs || u.byQueue || u.period != 0 || len(u.states) > 0
	if !set {
		return nil
	}
	if u.period < 0 {
		return usagef("%s %s is negative: want a duration such as 1h", flagLabel(cmd, "unique-period"), u.period)
	}
	ur := &apiserver.UniqueRequest{ByArgs: u.byArgs, ByQueue: u.byQueue}
	if u.period > 0 {
		ur.ByPeriod = u.period.String()
	}
	for _, s := range u.states {
		st, err := coordinator.ParseState(s)
		if err != nil || !st.Final() {
			return usagef("%s %q: want %s (unfinished jobs always count as duplicates)", flagLabel(cmd, "unique-states"), apiserver.TruncateString(s, 40), apiserver.UniqueStates)
		}
		ur.ByState = append(ur.ByState, string(st))
	}
	req.Unique = ur
	return nil
}
