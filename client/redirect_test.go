package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/coordinator"
)

// A front (a load balancer sending http:// to https://, a proxy moved to
// another path) that answers a change with 301, 302 or 303: Go's HTTP
// client follows those as a GET, without the body, so that a Delete read
// the job and returned it as deleted, nothing deleted (a Cancel or an
// Insert likewise, at a daemon that answers the GET). The change is not
// followed: it fails, with no sentinel and not of unknown outcome (the
// front did not pass it on), and the daemon sees nothing. A 307 or 308
// keeps the method and the body: followed, the change is made.
func TestHTTPChangeRedirectedAsAGetIsNotFollowed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, code := range []int{301, 302, 303, 307, 308} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			var mu sync.Mutex
			var seen []string // what the daemon got, method and path
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if rest, ok := strings.CutPrefix(r.URL.Path, "/old"); ok {
					http.Redirect(w, r, rest, code) // the front
					return
				}
				mu.Lock()
				seen = append(seen, r.Method+" "+r.URL.Path)
				mu.Unlock()
				job := `{"id":"` + someID + `","kind":"echo","queue":"default","state":"cancelled"}`
				switch r.URL.Path {
				case "/v1/jobs/batch":
					_, _ = io.WriteString(w, `{"jobs":[`+job+`,`+job+`],"existed":[false,false]}`)
				case "/v1/jobs/cancel":
					_, _ = io.WriteString(w, `{"cancelled":1,"cancel_requested":0}`)
				default:
					_, _ = io.WriteString(w, `{"job":`+job+`,"existed":false}`)
				}
			}))
			t.Cleanup(srv.Close)
			c, err := client.NewHTTP(srv.URL+"/old", nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			changes := map[string]struct {
				method string
				run    func() error
			}{
				"Insert": {"POST", func() error { _, err := c.Insert(ctx, client.RawArgs{KindName: "echo"}, nil); return err }},
				"InsertMany": {"POST", func() error {
					_, err := c.InsertMany(ctx, []client.InsertParams{{Args: client.RawArgs{KindName: "echo"}}, {Args: client.RawArgs{KindName: "echo"}}})
					return err
				}},
				"Cancel":     {"POST", func() error { _, err := c.Cancel(ctx, someID); return err }},
				"Retry":      {"POST", func() error { _, err := c.Retry(ctx, someID); return err }},
				"Delete":     {"DELETE", func() error { _, err := c.Delete(ctx, someID); return err }},
				"CancelMany": {"POST", func() error { _, err := c.CancelMany(ctx, client.CancelFilter{Kind: "echo"}); return err }},
			}
			for name, ch := range changes {
				mu.Lock()
				seen = nil
				mu.Unlock()
				err := ch.run()
				mu.Lock()
				got := seen
				mu.Unlock()
				if code == http.StatusTemporaryRedirect || code == http.StatusPermanentRedirect {
					if err != nil || len(got) != 1 || !strings.HasPrefix(got[0], ch.method+" ") {
						t.Errorf("%s redirected %d: %v, the daemon got %q; want done, with one %s", name, code, err, got, ch.method)
					}
					continue
				}
				if err == nil {
					t.Errorf("%s redirected %d: no error (the daemon got %q); want the redirect refused", name, code, got)
					continue
				}
				if len(got) != 0 {
					t.Errorf("%s redirected %d: the daemon got %q; want nothing", name, code, got)
				}
				for _, s := range []error{client.ErrOutcomeUnknown, coordinator.ErrInvalid, coordinator.ErrNotFound, coordinator.ErrWrongState} {
					if errors.Is(err, s) {
						t.Errorf("%s redirected %d: %v; want no sentinel (%v)", name, code, err, s)
					}
				}
				if !strings.Contains(err.Error(), "redirects to "+srv.URL+"/v1/") {
					t.Errorf("%s redirected %d: %v; want the error to say where the front redirects", name, code, err)
				}
			}

			// A read follows any redirect.
			if j, err := c.Get(ctx, someID); err != nil || j.ID != someID {
				t.Errorf("Get redirected %d: %v, %v; want the job", code, j, err)
			}
		})
	}
}
