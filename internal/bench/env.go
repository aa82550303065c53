package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/leasehold/leasehold/coordinator/etcdkv"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/localstore"
)

// env is the store a run uses and what must be released after it.
type env struct {
	store kv.Store
	label string
	// persistent is true when the store outlives the run (a given data
	// directory or etcd cluster): the bench then deletes what it wrote.
	persistent bool
	endpoints  []string // shared mode: the etcd endpoints
	closers    []func()
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}

func openEnv(ctx context.Context, cfg Config) (*env, error) {
	e := &env{}
	var err error
	if cfg.Mode == ModeEmbedded {
		err = e.openLocal(cfg)
	} else {
		err = e.openEtcd(ctx, cfg)
	}
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *env) openLocal(cfg Config) error {
	dir := cfg.Data
	if dir == "" {
		tmp, err := os.MkdirTemp("", "leasehold-bench-")
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		e.closers = append(e.closers, func() { _ = os.RemoveAll(tmp) })
		dir = tmp
	} else {
		e.persistent = true
	}
	s, err := localstore.Open(dir, localstore.Options{Logger: cfg.Logger})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, func() {
		if err := s.Close(); err != nil {
			cfg.Logger.Warn("bench: closing the store", slog.Any("err", err))
		}
	})
	e.store, e.label = s, "pebble "+dir+memoryNote(cfg.Logger, dir)
	return nil
}

// memoryNote warns if dir is memory-backed, and returns what the store's
// label then adds: the numbers are not those of a durable store.
func memoryNote(log *slog.Logger, dir string) string {
	if !memoryBacked(dir) {
		return ""
	}
	log.Warn("bench: the store's directory is memory-backed (tmpfs): fsync reaches no disk, so the numbers are not durable ones; give a directory on a disk (--data, or TMPDIR)", slog.String("dir", dir))
	return " (memory-backed: not durable)"
}

func (e *env) openEtcd(ctx context.Context, cfg Config) error {
	eps := cfg.Etcd
	e.persistent = true
	e.label = "etcd " + strings.Join(eps, ",")
	if len(eps) == 0 {
		srv, err := etcdtest.New()
		if err != nil {
			return fmt.Errorf("bench: start an embedded etcd member: %w", err)
		}
		e.closers = append(e.closers, srv.Close)
		// Talk to the member directly, not through etcdtest's fault
		// proxy: a userspace TCP relay would take CPU from a small machine
		// and is no part of a real deployment.
		eps = []string{srv.Endpoint()}
		if m := srv.Etcd(); m != nil && len(m.Clients) > 0 {
			eps = []string{"http://" + m.Clients[0].Addr().String()}
		}
		e.persistent = false
		e.label = "etcd (embedded member)"
		if m := srv.Etcd(); m != nil {
			e.label += memoryNote(cfg.Logger, m.Config().Dir)
		}
	}
	e.endpoints = eps
	s, err := e.another(ctx)
	if err != nil {
		return err
	}
	e.store = s
	return nil
}

// another returns a store on its own etcd client (shared mode), for
// another daemon; the env closes it.
func (e *env) another(ctx context.Context) (kv.Store, error) {
	cli, err := etcdkv.Dial(ctx, etcdkv.Config{Endpoints: e.endpoints})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.closers = append(e.closers, func() { _ = cli.Close() })
	s := etcdkv.New(cli, etcdkv.Options{})
	e.closers = append(e.closers, func() { _ = s.Close() })
	return s, nil
}
