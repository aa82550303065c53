package apiserver

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/testutil"
)

// unreadBody fails the test if the handler reads it.
type unreadBody struct{ t *testing.T }

func (b unreadBody) Read([]byte) (int, error) {
	b.t.Error("the handler read a body whose Content-Length is over the limit")
	return 0, errors.New("read")
}

func (unreadBody) Close() error { return nil }

// A body announced as over the limit is refused with 413 before a byte of
// it is read: a client waiting for "100 Continue" gets the answer instead
// of a connection reset in the middle of its upload.
func TestAPIRefusesAnnouncedTooLargeBodyUnread(t *testing.T) {
	log := testutil.QuietLogger(t)
	coord, err := coordinator.New(testutil.TempLocal(t, log), coordinator.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Coord: coord, Logger: log})
	for _, path := range []string{"/v1/jobs", "/v1/jobs/batch"} {
		req := httptest.NewRequest("POST", path, nil)
		req.Body, req.ContentLength = unreadBody{t}, 40<<20
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Expect", "100-continue")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "-byte limit") {
			t.Errorf("POST %s of 40 MiB: %d %s, want 413 naming the limit", path, rec.Code, rec.Body)
		}
	}
}

// repeatedKey finds a key given twice at the top of an object, spelled
// the same once decoded, and not keys of nested objects.
func TestRepeatedKey(t *testing.T) {
	for _, c := range []struct {
		in string
		k  string
		ok bool
	}{
		{`{"a":1,"b":{"a":2},"c":[{"a":1}]}`, "", false},
		{`{"a":1,"b":2,"a":3}`, "a", true},
		{`{"a":1,"\u0061":2}`, "a", true},
		{`{"jobs":[{"kind":"x","kind":"y"}]}`, "", false},
	} {
		if k, ok := repeatedKey([]byte(c.in)); k != c.k || ok != c.ok {
			t.Errorf("repeatedKey(%s) = %q, %v; want %q, %v", c.in, k, ok, c.k, c.ok)
		}
	}
}
