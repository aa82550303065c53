package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The harness's goroutines (workload, nemesis, store log, process
// watchers) must all have ended when run returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
