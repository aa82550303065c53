// Package metrics exports a leasehold worker's Prometheus metrics: the
// series the daemon serves at /metrics (jobs claimed, started and
// finished, queue latency, handler time, fenced writes refused, reaps,
// lease renewals, store errors, job counts by state and queue), for
// programs that embed the library. The daemon uses it too, and adds its
// HTTP, Go runtime and process series.
//
// The library has no metrics of its own: Metrics observes it through
// hooks (worker.Config's OnClaim, OnStart and OnOutcome,
// coordinator.Config's OnReap) and a kv.Store wrapper, so a program that
// does not use this package pays nothing. Wire it in before the
// coordinator and the worker are built:
//
//	m := metrics.New(prometheus.DefaultRegisterer)
//	ccfg := coordinator.Config{}
//	m.HookCoordinator(&ccfg)
//	coord, _ := coordinator.New(m.WrapStore(store, "pebble"), ccfg)
//	wcfg := worker.Config{Concurrency: 20}
//	m.HookWorker(&wcfg)
//	w, _ := worker.New(coord, wcfg)
//	w.Handle("email", sendEmail)
//	m.RegisterWorker(w)
//	m.RegisterJobs(coord, nil)
//
// and serve the registry (promhttp.Handler()). The README's metrics table
// lists every series.
package metrics
