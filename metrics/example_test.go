package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/metrics"
	"github.com/leasehold/leasehold/worker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// A program that embeds a worker serves its metrics as the daemon does:
// the hooks go in before the coordinator and the worker are built, the
// gauges are registered once the handlers are.
func Example() {
	dir, _ := os.MkdirTemp("", "leasehold-metrics-example")
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.DiscardHandler)
	store, err := localstore.Open(dir, localstore.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	m := metrics.New(reg)
	ccfg := coordinator.Config{Logger: quiet}
	m.HookCoordinator(&ccfg)
	coord, _ := coordinator.New(m.WrapStore(store, "pebble"), ccfg)
	wcfg := worker.Config{Concurrency: 4, Maintain: true, Logger: quiet}
	m.HookWorker(&wcfg)
	w, _ := worker.New(coord, wcfg)
	w.Handle("email", func(context.Context, *worker.Job) error { return nil })
	m.RegisterWorker(w)
	m.RegisterJobs(coord, quiet)

	ctx := context.Background()
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	res, _ := coord.Enqueue(ctx, coordinator.EnqueueParams{Kind: "email", Payload: []byte(`{"to":"a@example.com"}`)})
	m.CountEnqueued(res.Job)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := coord.Wait(wctx, res.Job.ID); err != nil {
		panic(err)
	}
	// Stop returns once every outcome is recorded and counted.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = w.Stop(sctx)

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(body)) {
		for _, name := range []string{"leasehold_enqueued_total{", "leasehold_job_completions_total{", `leasehold_jobs{state="completed"}`} {
			if strings.HasPrefix(line, name) {
				fmt.Print(line)
			}
		}
	}
	// Output:
	// leasehold_enqueued_total{kind="email",queue="default"} 1
	// leasehold_job_completions_total{kind="email"} 1
	// leasehold_jobs{state="completed"} 1
}
