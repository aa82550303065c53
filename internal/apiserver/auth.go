package apiserver

// Access control of the HTTP API and dashboard.
//
//   - The daemon listens on loopback by default (--listen 127.0.0.1:7420).
//     While it does, a request whose Host header is not a loopback name is
//     refused (403), so that a web page cannot reach it through DNS
//     rebinding.
//   - With --api-token (or --api-token-file), every state-changing request
//     (any method but GET, HEAD and OPTIONS) must carry
//     "Authorization: Bearer TOKEN", or it is refused with 401 and writes
//     nothing. Reads (GET: jobs, payloads, workers, stats, the dashboard,
//     /metrics, /healthz, /readyz) stay open, so that probes and scrapers
//     need no secret: run the daemon on loopback or behind a proxy if
//     payloads are confidential.
//   - A state-changing request that a browser marks as cross-origin
//     (Sec-Fetch-Site, or an Origin that is not the Host) is refused (403)
//     whatever the token (net/http's CrossOriginProtection), so that
//     another site cannot make an operator's browser cancel jobs. The
//     dashboard's actions are same-origin fetch calls that send the token,
//     which the operator types once per browser tab.
//   - Responses of the dashboard forbid framing and scripts other than
//     their own (Content-Security-Policy).

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// AuthConfig says how the API checks requests.
type AuthConfig struct {
	// Token, if set, is required on every state-changing request.
	Token string
	// LoopbackOnly refuses requests whose Host is not a loopback name:
	// set when the daemon listens on a loopback address.
	LoopbackOnly bool
}

// safeMethod reports whether m changes nothing.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

var crossOrigin = http.NewCrossOriginProtection()

// guard checks r against the API's access rules and answers it if they
// refuse it. It reports whether r may proceed.
func (a *Handler) guard(w http.ResponseWriter, r *http.Request) bool {
	if a.cfg.Auth.LoopbackOnly && !LoopbackHost(r.Host) {
		WriteError(w, http.StatusForbidden, fmt.Sprintf("host %q is not a loopback name: this daemon listens on loopback only; use http://127.0.0.1:PORT or http://localhost:PORT", TruncateString(r.Host, 80)))
		return false
	}
	if safeMethod(r.Method) {
		return true
	}
	if err := crossOrigin.Check(r); err != nil {
		WriteError(w, http.StatusForbidden, "cross-origin request refused: state-changing requests must come from the dashboard's own origin or from a non-browser client")
		return false
	}
	if a.cfg.Auth.Token != "" && !validBearer(r.Header.Get("Authorization"), a.cfg.Auth.Token) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="leasehold"`)
		WriteError(w, http.StatusUnauthorized, "missing or wrong API token: this daemon requires one for changes; pass --api-token (or set LEASEHOLD_API_TOKEN)")
		return false
	}
	return true
}

// validBearer reports whether header is "Bearer TOKEN" with the right
// token, in constant time.
func validBearer(header, token string) bool {
	scheme, got, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) == 1
}

// LoopbackHost reports whether a Host header names a loopback address.
func LoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
