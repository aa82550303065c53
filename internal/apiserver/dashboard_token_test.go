package apiserver

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/leasehold/leasehold/internal/testutil"
)

// The dashboard's API token field is read by the page's script alone: a
// form submitted without it (scripts off, or Enter before the script
// ran) must not put the token in the page's URL (?token=...), where the
// browser's history and address bar keep it.
func TestDashboardTokenFieldIsNeverSubmitted(t *testing.T) {
	_, h := newAPIOn(t, nil, Config{Auth: AuthConfig{Token: "s3cret"}})
	code, body := testutil.APICall(t, h, "GET", "/", "")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d %s", code, body)
	}
	form := regexp.MustCompile(`(?s)<form id="token-form"[^>]*>.*?</form>`).Find(body)
	if form == nil {
		t.Fatalf("no token form on the overview of a daemon with a token")
	}
	if !regexp.MustCompile(`<input type="password"`).Match(form) {
		t.Fatalf("the token form has no password field: %s", form)
	}
	// A field without a name is not submitted; the form's own method
	// and action are then moot.
	if m := regexp.MustCompile(`<(input|select|textarea|button)[^>]*\sname=`).Find(form); m != nil {
		t.Errorf("the token form has a named field, which a submit without the script sends in the URL: %s", m)
	}
}
