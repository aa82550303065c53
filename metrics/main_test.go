package metrics

import (
	"testing"

	"go.uber.org/goleak"
)

// A wrapped store's watch forwards on a goroutine of its own: none may
// outlive its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
