package coordinator

import (
	"errors"
	"testing"
)

// Queue names are path segments of the API (/v1/queues/{q}/pause): "."
// and "..", though made of valid characters, would name other paths, so
// a queue of that name could never be paused or limited.
func TestValidateQueueRefusesDotSegments(t *testing.T) {
	for _, q := range []string{".", ".."} {
		if err := ValidateQueue(q); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateQueue(%q) = %v, want ErrInvalid", q, err)
		}
	}
	for _, q := range []string{"...", ".a", "a.b", "default"} {
		if err := ValidateQueue(q); err != nil {
			t.Errorf("ValidateQueue(%q) = %v, want nil", q, err)
		}
	}
}
