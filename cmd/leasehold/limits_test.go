package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// largestJob is a create request at every limit of the coordinator: the
// largest payload and metadata, the longest kind, queue and unique key.
func largestJob(maxPayload int) apiserver.CreateRequest {
	long := strings.Repeat("q", 128)
	return apiserver.CreateRequest{
		Kind:      "echo",
		Payload:   json.RawMessage(`"` + strings.Repeat("p", maxPayload-2) + `"`),
		Queue:     long,
		Priority:  new(4),
		Delay:     "90s",
		Timeout:   "30s",
		UniqueKey: strings.Repeat("\u00e9", 128), // 256 bytes, escaped or not
		Unique:    &apiserver.UniqueRequest{ByQueue: true, ByPeriod: "1h", ByState: []string{"completed", "discarded", "cancelled"}},
		Metadata:  json.RawMessage(`{"m":"` + strings.Repeat("m", coordinator.MaxMetadataBytes-8) + `"}`),
	}
}

// A job at the largest payload and metadata is taken alone as in a batch.
func TestAPICreateTakesTheLargestJob(t *testing.T) {
	e := newAPIEnv(t, envOpts{noWorker: true})
	req := largestJob(coordinator.DefaultMaxPayloadBytes)
	if len(req.Payload) != coordinator.DefaultMaxPayloadBytes || len(req.Metadata) != coordinator.MaxMetadataBytes {
		t.Fatalf("payload %d, metadata %d bytes: not at the limits", len(req.Payload), len(req.Metadata))
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.do(t, "POST", "/v1/jobs/batch", `{"jobs":[`+string(b)+`]}`); code != http.StatusCreated {
		t.Errorf("POST /v1/jobs/batch with the largest job: %d %.300s, want 201", code, body)
	}
	req.UniqueKey = strings.Repeat("\u00e8", 128)
	b, err = json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.do(t, "POST", "/v1/jobs", string(b)); code != http.StatusCreated {
		t.Errorf("POST /v1/jobs with the largest job: %d %.300s, want 201 as for a batch", code, body)
	}
}
