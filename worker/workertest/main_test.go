package workertest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// A test worker's goroutines (the worker's, the store's, etcd's) all end
// with the test that started them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
