package coordinator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A queue never configured has no update time: its JSON leaves
// updated_at out rather than saying 0001-01-01.
func TestQueueConfigJSONOmitsZeroUpdate(t *testing.T) {
	b, err := json.Marshal(QueueInfo{QueueConfig: QueueConfig{Name: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "updated_at") {
		t.Fatalf("never-configured queue: %s", b)
	}
	at := time.Date(2030, 1, 2, 15, 4, 5, 0, time.UTC)
	b, err = json.Marshal(QueueConfig{Name: "pdf", Paused: true, PausedAt: &at, UpdatedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"updated_at":"2030-01-02T15:04:05Z"`) {
		t.Fatalf("configured queue: %s", b)
	}
}
