package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/localstore"
)

// TestRawArgsInvalidJSON: RawArgs whose payload is not JSON are refused
// with ErrInvalid in one line that names the kind, where the JSON breaks
// and what to give instead; the error was encoding/json's about calling
// MarshalJSON. Nothing is written.
func TestRawArgsInvalidJSON(t *testing.T) {
	store, err := localstore.Open(t.TempDir(), localstore.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	coord, err := coordinator.New(store, coordinator.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(coord, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		args client.Args
		want string
	}{
		{client.RawArgs{KindName: "email", Payload: []byte(`{to: "ada"}`)}, "at byte 2: invalid character 't' looking for beginning of object key string"},
		{&client.RawArgs{KindName: "email", Payload: []byte(`{} {}`)}, "at byte 4: invalid character '{' after top-level value"},
		{client.RawArgs{KindName: "email", Payload: []byte(`{"to":`)}, "email is not valid JSON"},
	} {
		_, err := c.Insert(ctx, tc.args, nil)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if !errors.Is(err, coordinator.ErrInvalid) || strings.Contains(msg, "\n") || strings.Contains(msg, "MarshalJSON") ||
			!strings.Contains(msg, "RawArgs payload of kind email is not valid JSON") || !strings.Contains(msg, tc.want) ||
			!strings.HasSuffix(msg, "or none for {}") {
			t.Errorf("Insert(%+v): %v, want one ErrInvalid line saying %q and what to do", tc.args, err, tc.want)
		}
	}
	if _, err := c.InsertMany(ctx, []client.InsertParams{{Args: client.RawArgs{KindName: "email"}}, {Args: client.RawArgs{KindName: "email", Payload: []byte("nope")}}}); !errors.Is(err, coordinator.ErrInvalid) ||
		!strings.HasPrefix(err.Error(), "job 1: ") {
		t.Errorf("InsertMany with a bad payload second: %v, want ErrInvalid naming job 1", err)
	}
	if _, err := c.Insert(ctx, (*client.RawArgs)(nil), nil); !errors.Is(err, coordinator.ErrInvalid) {
		t.Errorf("Insert of nil *RawArgs: %v, want ErrInvalid", err)
	}
	if page, err := c.List(ctx, client.ListParams{Limit: 10}); err != nil || len(page.Jobs) != 0 {
		t.Errorf("jobs after refused inserts: %d, %v", len(page.Jobs), err)
	}
}
