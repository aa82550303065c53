package coordinator_test

import (
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
)

// TestNewWorkerIDUnique (promise 8): worker ids are host-pid-random, and
// ids made in one process differ, since fencing compares owner ids. (100
// ids: with 32 random bits, 1,000 would collide about once in 10,000 runs.)
func TestNewWorkerIDUnique(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	format := regexp.MustCompile("^" + regexp.QuoteMeta(fmt.Sprintf("%s-%d-", host, os.Getpid())) + "[0-9a-f]{8}$")
	seen := map[string]bool{}
	for range 100 {
		id := coordinator.NewWorkerID()
		if !format.MatchString(id) {
			t.Fatalf("worker id %q is not host-pid-random (%s)", id, format)
		}
		if seen[id] {
			t.Fatalf("worker id %q made twice in one process", id)
		}
		seen[id] = true
	}
}
