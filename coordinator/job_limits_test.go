package coordinator

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The scheduling limit is inclusive, and a time a nanosecond past it is
// refused in words that do not read as the limit itself.
func TestCheckScheduledAtNamesBothTimes(t *testing.T) {
	if err := checkScheduledAt(MaxScheduledAt); err != nil {
		t.Fatalf("the limit itself: %v", err)
	}
	err := checkScheduledAt(MaxScheduledAt.Add(time.Nanosecond))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "scheduled time 2262-01-01T00:00:00.000000001Z is after 2262-01-01T00:00:00Z,") {
		t.Fatalf("a nanosecond past the limit: %v", err)
	}
}
