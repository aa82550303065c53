package coordinator

import (
	"errors"
	"testing"
	"time"
)

// TestNewNamesTheNegativeField: a negative limit in Config is ErrInvalid
// naming the field and what to give; it said "negative limit in
// coordinator config", whichever it was.
func TestNewNamesTheNegativeField(t *testing.T) {
	store := tempLocalstore(t)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxPayloadBytes: -1}, "coordinator: invalid request: coordinator.Config.MaxPayloadBytes is negative: want 0 (the default) or more"},
		{Config{MaxClaimBytes: -1}, "coordinator: invalid request: coordinator.Config.MaxClaimBytes is negative: want 0 (the default) or more"},
		{Config{MaxRescues: -1}, "coordinator: invalid request: coordinator.Config.MaxRescues is negative: want 0 (the default) or more"},
		{Config{Retention: -time.Hour}, "coordinator: invalid request: coordinator.Config.Retention is negative: want 0 (the default) or more"},
	} {
		if _, err := New(store, tc.cfg); !errors.Is(err, ErrInvalid) || err.Error() != tc.want {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
