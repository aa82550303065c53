package etcdtest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Servers, clients and proxies are stopped and awaited by the tests'
// cleanups, so nothing may be left running at exit.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
