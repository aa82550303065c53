// Package httpapi serves leasehold's HTTP API and dashboard from a program
// that embeds the library: the same routes, bodies, errors and pages as
// the daemon's (README, "HTTP API"), so that the CLI (`leasehold jobs
// list --server URL`, `leasehold backup`, ...), package client's NewHTTP
// and a browser work against the program as they do against a daemon.
//
// In embedded mode this is the only way to see the program's jobs from
// outside it: its process holds the Pebble directory, and no daemon can
// open it beside the program. In shared mode any daemon of the namespace
// serves the same jobs; the program may serve them too.
//
//	h, err := httpapi.New(coord, httpapi.Config{Worker: w, Token: token, LoopbackOnly: true, Backup: store})
//	srv := &http.Server{Addr: "127.0.0.1:7420", Handler: h, ReadHeaderTimeout: 10 * time.Second}
//	srv.RegisterOnShutdown(h.StopWaits) // long-polls answer at once
//	go srv.ListenAndServe()
//	...
//	h.Drain()      // /readyz 503, long-polls answer; the rest serves on
//	_ = w.Stop(ctx) // the drain, with /healthz and /metrics answered
//	_ = srv.Shutdown(ctx)
//	_ = h.Close(ctx)
//
// The Handler serves the daemon's paths (/v1/jobs, /jobs/{id},
// /metrics) at the root of a server of its own, or under Config.Prefix on
// the program's mux (mux.Handle("/leasehold/", h) with Prefix
// "/leasehold"; the CLI then takes --server http://HOST/leasehold).
// Long-polls
// (GET /v1/jobs/{id}?wait=, `leasehold jobs wait`) last up to 5 minutes:
// leave the server's WriteTimeout at 0 or above that (the daemon sets
// ReadHeaderTimeout 10 s, ReadTimeout and IdleTimeout 2 min, and no
// WriteTimeout). The program's worker must have its
// handlers registered before New: their kinds are the ones the API
// accepts (plus Config.Kinds), and a request over a payload limit is
// told to raise the daemon's --max-payload, which for a program is
// coordinator.Config.MaxPayloadBytes.
package httpapi
