// Package apiserver is the daemon's HTTP API: the JSON API under /v1/
// (enqueue, inspect, cancel, the operations on jobs, queues and periodic
// jobs, backups of the embedded store), the HTML dashboard, /healthz,
// /readyz and the Prometheus metrics at /metrics. api.go lists the routes
// and their bodies.
//
// New builds the API over a coordinator; the Handler it returns is an
// http.Handler. The daemon serves it with its worker, metrics and access
// rules; a shared-mode CLI command serves it in process (Config.CLI),
// with no daemon behind it; package httpapi wraps it for programs that
// embed the library (docs/adr/0022). The request and response types are the wire
// format that clients decode.
//
// At its stop, a daemon wakes the long-polls (Handler.StopWaits) and
// awaits the store reads of /readyz and /v1/stats left in flight
// (Handler.StopProbe).
package apiserver
