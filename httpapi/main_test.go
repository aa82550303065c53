package httpapi_test

import (
	"testing"

	"go.uber.org/goleak"
)

// A Handler's /readyz probe and long-polls run on goroutines of their own:
// none may outlive its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
