package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
)

// An --exec command's stdout that json.Valid takes but that is not UTF-8
// JSON text (a legacy tool's Latin-1, a surrogate escaped alone) completes
// its job with that output as a string, as other output that is not JSON
// does, so that the job's JSON stays readable to strict JSON readers; and a
// checkpoint line like it is refused ("error: invalid"), recording
// nothing. Stored raw, such a result or checkpoint made GET /v1/jobs/ID,
// and every page of GET /v1/jobs listing the job, invalid UTF-8.
func TestExecResultNotUTF8IsAString(t *testing.T) {
	for name, tc := range map[string]struct{ command, want string }{
		"latin1":    {`printf '{"name":"caf\351"}'`, "{\"name\":\"caf\uFFFD\"}"},
		"surrogate": {`printf '{"s":"\\ud800"}'`, `{"s":"\ud800"}`},
		"checkpoint": {`printf '{"c":"caf\351"}\n' >&4; read -r ack <&4; printf '%s' "$ack" | cut -d: -f1,2`,
			"error: invalid"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newCheckpointEnv(t, tc.command, 0, 0)
			j := e.wait(t, e.enqueue(t))
			if j.State != coordinator.StateCompleted {
				t.Fatalf("job is %s, want completed (errors %+v)", j.State, j.Errors)
			}
			var got string
			if err := json.Unmarshal(j.Result, &got); err != nil || got != tc.want {
				t.Errorf("result %s (%v), want the string %q", j.Result, err, tc.want)
			}
			if c := strings.TrimSpace(string(j.Checkpoint)); c != "" && c != "null" {
				t.Errorf("checkpoint %s was recorded", c)
			}
		})
	}
}
