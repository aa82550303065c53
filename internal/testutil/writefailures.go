package testutil

import (
	"io"
	"net/http"
)

// WriteFailures returns handlers that answer a request in the ways that
// leave a write's outcome unknown to its client: the request was read,
// and no answer says that it was not processed (a connection dropped
// after the request, an answer cut short, a proxy's 502 or 504, the
// daemon's 503 for a request cancelled while it ran). A fresh map each
// call: tests add their own cases.
func WriteFailures() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"connection dropped after the request": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			hangUp(w)
		},
		"answer cut short": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "500")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"job":{"id":"`)
			_ = http.NewResponseController(w).Flush()
			hangUp(w)
		},
		"a proxy's 502": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html><body>502 Bad Gateway</body></html>\n")
		},
		"a proxy's 504": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusGatewayTimeout)
			_, _ = io.WriteString(w, "upstream request timeout\n")
		},
		"a 503 without the mark and without Retry-After": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":"request cancelled: the client disconnected or the daemon is stopping"}`+"\n")
		},
	}
}

// hangUp closes w's connection without an answer, or with what was
// already flushed.
func hangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
	}
}
