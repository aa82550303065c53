package coordtest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/coordinator/coordtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/localstore"
)

// TestLocalstore runs the suite on the embedded Pebble store.
func TestLocalstore(t *testing.T) {
	coordtest.Run(t, func(t *testing.T) kv.Store {
		s, err := localstore.Open(t.TempDir(), localstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
