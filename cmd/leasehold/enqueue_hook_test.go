package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/testutil"
	"github.com/leasehold/leasehold/localstore"
)

// An enqueue refused by an enqueue hook of the program that serves the
// API wrote nothing, and would be refused again: the CLI says the hook's
// message and that nothing was written, exit 2 as for other input the
// API refuses, never that the outcome is unknown (the API's 500 said so).
func TestCLIEnqueueRefusedByAHook(t *testing.T) {
	log := testutil.QuietLogger(t)
	store, err := localstore.Open(t.TempDir(), localstore.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	coord, err := coordinator.New(store, coordinator.Config{Logger: slog.New(slog.DiscardHandler), EnqueueHooks: []coordinator.EnqueueHook{
		func(_ context.Context, p *coordinator.EnqueueParams) error {
			if p.Queue == "poison" {
				panic("tenant lookup: nil map")
			}
			return errors.New("tenant acme is over its quota")
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	api := apiserver.New(apiserver.Config{Coord: coord, Kinds: map[string]apiserver.PayloadCheck{"echo": nil}, MaxPayload: coordinator.DefaultMaxPayloadBytes, Logger: log})
	srv := httptest.NewServer(api)
	t.Cleanup(func() { api.StopWaits(); srv.Close() })
	for _, args := range [][]string{
		{"enqueue", "echo"},
		{"enqueue", "echo", "--count", "3"},
		{"enqueue", "echo", "--queue", "poison"},
	} {
		want := "tenant acme is over its quota"
		if strings.Contains(strings.Join(args, " "), "poison") {
			want = "tenant lookup: nil map"
		}
		r := runCLI(t, nil, "", append(args, "--server", srv.URL)...)
		if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, want) ||
			!strings.Contains(r.stderr, "nothing written") || strings.Contains(r.stderr, "outcome is unknown") {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line with the hook's message, nothing written, not an unknown outcome", strings.Join(args, " "), r.code, r.stderr)
		}
		t.Log(r.stderr)
	}
	page, err := coord.List(context.Background(), coordinator.ListParams{})
	if err != nil || len(page.Jobs) != 0 {
		t.Errorf("after the refusals: %d jobs, %v; want none", len(page.Jobs), err)
	}
}
