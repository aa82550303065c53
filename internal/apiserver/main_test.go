package apiserver

import (
	"testing"

	"go.uber.org/goleak"
)

// The API's tests run stores, servers and long-polls: none of their
// goroutines may outlive its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
