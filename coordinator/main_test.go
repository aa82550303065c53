package coordinator_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The examples open sessions (a heartbeat goroutine each): none may
// outlive its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
