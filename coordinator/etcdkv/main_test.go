package etcdkv_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops its servers, clients and stores before it returns (they
// are registered with t.Cleanup), so nothing may be left running at exit.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
