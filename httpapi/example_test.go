package httpapi_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/localstore"
	"github.com/leasehold/leasehold/worker"
)

// A program that embeds a worker in embedded mode serves the API that the
// CLI, package client and the dashboard use, as the daemon does.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "leasehold-httpapi-example")
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.DiscardHandler)
	store, err := localstore.Open(dir, localstore.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	coord, _ := coordinator.New(store, coordinator.Config{Logger: quiet})
	w, _ := worker.New(coord, worker.Config{Concurrency: 4, Maintain: true, Logger: quiet})
	w.Handle("email", func(context.Context, *worker.Job) error { return nil })
	ctx := context.Background()
	if err := w.Start(ctx); err != nil {
		panic(err)
	}

	h, err := httpapi.New(coord, httpapi.Config{Worker: w, Token: "s3cret", LoopbackOnly: true, Backup: store, Logger: quiet})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	srv.RegisterOnShutdown(h.StopWaits)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	// Elsewhere: `leasehold jobs list --server http://ADDR`, or
	c, _ := client.NewHTTP("http://"+ln.Addr().String(), &client.Options{Token: "s3cret"})
	res, err := c.Insert(ctx, client.RawArgs{KindName: "email", Payload: []byte(`{"to":"a@example.com"}`)}, nil)
	if err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	job, err := c.Wait(wctx, res.Job.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(job.Kind, job.State)
	_, err = c.Insert(ctx, client.RawArgs{KindName: "sms"}, nil)
	fmt.Println(err)

	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	h.Drain() // /readyz answers 503 while the worker drains; the rest serves on
	_ = w.Stop(sctx)
	_ = srv.Shutdown(sctx)
	<-served
	_ = h.Close(sctx)
	_ = c.Close()
	// Output:
	// email completed
	// coordinator: invalid request: unknown kind sms: this daemon runs email: register a handler for it or check its spelling
}
