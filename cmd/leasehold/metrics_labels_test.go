package main

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
)

// Clients name queues freely: leasehold_enqueued_total keeps at most
// maxQueueLabels of them as labels, the rest as "other", instead of one
// series per name ever sent.
func TestEnqueuedQueueLabelsBounded(t *testing.T) {
	m := newMetrics()
	for i := range maxQueueLabels + 50 {
		m.onEnqueued(&coordinator.Job{Queue: fmt.Sprintf("q%d", i), Kind: "echo"})
	}
	m.onEnqueued(&coordinator.Job{Queue: "q0", Kind: "echo"}) // a known one keeps its label
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	queues := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "leasehold_enqueued_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "queue" {
					queues[l.GetValue()] += s.GetCounter().GetValue()
				}
			}
		}
	}
	if len(queues) != maxQueueLabels+1 || queues["other"] != 50 || queues["q0"] != 2 {
		t.Fatalf("%d queue labels (other %v, q0 %v); want %d and other 50, q0 2", len(queues), queues["other"], queues["q0"], maxQueueLabels+1)
	}
}
