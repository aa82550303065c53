package coordtest

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
)

// Tests from a review of the job JSON that outside tools read
// (2026-12-06). Run adds them to the suite.
var jsonTextReviewTests = []suiteTest{
	{"OutcomeJSONNotUTF8Refused", testOutcomeJSONNotUTF8Refused},
}

// testOutcomeJSONNotUTF8Refused: a checkpoint or result that json.Valid
// takes but that is not UTF-8 JSON text (a byte of Latin-1 in a string, a
// surrogate escaped alone) is refused as ErrInvalid and writes nothing, as
// such a payload is: stored raw, it made the job's JSON (GET /v1/jobs/ID,
// and every page of GET /v1/jobs that lists it) unreadable to strict JSON
// readers. The run goes on and can record its outcome.
func testOutcomeJSONNotUTF8Refused(t *testing.T, h *harness) {
	j := h.enqueue(coordinator.EnqueueParams{Kind: "k"})
	run := h.claimOne(h.session(h.c))
	for _, bad := range []string{"{\"name\":\"caf\xe9\"}", `{"s":"\ud800"}`, `"\udc00x"`} {
		if err := run.Checkpoint(h.ctx(), json.RawMessage(bad)); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("Checkpoint(%q) = %v, want ErrInvalid", bad, err)
		}
		if err := run.Complete(h.ctx(), json.RawMessage(bad)); !errors.Is(err, coordinator.ErrInvalid) {
			t.Errorf("Complete(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if got := h.wantState(j.ID, coordinator.StateRunning); string(got.Checkpoint) != "null" && got.Checkpoint != nil {
		t.Fatalf("checkpoint %q was written", got.Checkpoint)
	}
	if err := run.Complete(h.ctx(), json.RawMessage(`{"name":"café","s":"\ud83d\ude00"}`)); err != nil {
		t.Fatalf("Complete with a valid result after the refusals: %v", err)
	}
	if got := h.wantState(j.ID, coordinator.StateCompleted); string(got.Result) != `{"name":"café","s":"\ud83d\ude00"}` {
		t.Fatalf("result = %s", got.Result)
	}
}
