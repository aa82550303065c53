package client_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apiserver"
)

// An enqueue that an enqueue hook of the program's refuses (its error, or
// its panic) wrote nothing, and the same enqueue is refused again: on
// each route the error wraps coordinator.ErrEnqueueRefused with the
// hook's message, and not ErrOutcomeUnknown. Through a daemon it was a
// 500, which the client reads as in doubt ("may or may not have been
// inserted"), so that a program inserted again, for nothing, a job the
// hook refuses.
func TestEnqueueHookRefusalIsNotOutcomeUnknown(t *testing.T) {
	store := openPebble(t)
	coord, err := coordinator.New(store, coordinator.Config{Logger: quiet(), EnqueueHooks: []coordinator.EnqueueHook{
		func(_ context.Context, p *coordinator.EnqueueParams) error {
			switch p.Queue {
			case "over-quota":
				return errors.New("tenant acme is over its quota")
			case "poison":
				panic("tenant lookup: nil map")
			}
			return nil
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	api := apiserver.New(apiserver.Config{Coord: coord, Kinds: map[string]apiserver.PayloadCheck{"echo": nil}, MaxPayload: coord.MaxPayloadBytes(), Logger: quiet()})
	hs := httptest.NewServer(api)
	t.Cleanup(func() { api.StopWaits(); hs.Close() })
	hc, err := client.NewHTTP(hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hc.Close() })
	routes := []route{{"http", hc, ""}, {"coordinator", client.New(coord, nil), ""}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range routes {
		for q, msg := range map[string]string{"over-quota": "tenant acme is over its quota", "poison": "tenant lookup: nil map"} {
			o := &client.InsertOpts{Queue: q}
			_, err := r.c.Insert(ctx, client.RawArgs{KindName: "echo"}, o)
			_, errMany := r.c.InsertMany(ctx, []client.InsertParams{{Args: client.RawArgs{KindName: "echo"}}, {Args: client.RawArgs{KindName: "echo"}, Opts: o}})
			for what, err := range map[string]error{"Insert": err, "InsertMany": errMany} {
				t.Logf("%s: %s (%s): %v", r.name, what, q, err)
				if !errors.Is(err, coordinator.ErrEnqueueRefused) || errors.Is(err, client.ErrOutcomeUnknown) || !strings.Contains(err.Error(), msg) {
					t.Errorf("%s: %s refused by the hook (%s): %v; want coordinator.ErrEnqueueRefused with the hook's message, not client.ErrOutcomeUnknown", r.name, what, q, err)
				}
			}
		}
	}
	counts, err := routes[0].c.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for st, n := range counts {
		if n != 0 {
			t.Errorf("%d jobs %s: a refused enqueue wrote them", n, st)
		}
	}
}
