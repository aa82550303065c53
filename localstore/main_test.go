package localstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/coordinator/kv"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode, os.Getenv(helperDirEnv)))
	}
	goleak.VerifyTestMain(m)
}

// Child processes: the test binary re-executed with helperEnv set runs
// helperMain instead of the tests.
const (
	helperEnv    = "LOCALSTORE_TEST_HELPER"
	helperDirEnv = "LOCALSTORE_TEST_DIR"
)

// Exit codes of helper processes.
const (
	exitLocked = 3 // Open failed with ErrLocked
	exitOther  = 4 // anything else went wrong
)

func helperMain(mode, dir string) int {
	opts := Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	switch mode {
	case "hold":
		// Open dir, say so, and hold it until stdin closes.
		s, err := Open(dir, opts)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return exitOther
		}
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		if err := s.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return exitOther
		}
		return 0
	case "try":
		// Try to open dir once.
		s, err := Open(dir, opts)
		if errors.Is(err, ErrLocked) {
			fmt.Println(err)
			return exitLocked
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return exitOther
		}
		_ = s.Close()
		return 0
	case "fatal":
		// Call Pebble's fatal hook under a recover, as net/http does for
		// every request and the worker for a handler, and say whether the
		// process lived on.
		func() {
			defer func() { _ = recover() }()
			pebbleLogger{opts.Logger}.Fatalf("injected fatal error %d", 7)
		}()
		fmt.Println("survived")
		return 0
	case "write":
		// Write keys w/0, w/1, ... (some with a lease) and acknowledge each
		// on stdout once Txn has returned, until killed.
		s, err := Open(dir, opts)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return exitOther
		}
		ctx := context.Background()
		id, err := s.Grant(ctx, time.Minute)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return exitOther
		}
		w := bufio.NewWriter(os.Stdout)
		for i := 0; ; i++ {
			res, err := s.Txn(ctx, kv.Txn{Then: []kv.Op{
				kv.Put("w/"+strconv.Itoa(i), []byte(strconv.Itoa(i)), 0),
				kv.Put("owner/"+strconv.Itoa(i), nil, id),
			}})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return exitOther
			}
			fmt.Fprintf(w, "%d %d\n", i, res.Revision)
			_ = w.Flush()
		}
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return exitOther
}

// helper returns a command running helperMain(mode, dir).
func helper(t *testing.T, mode, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	return cmd
}

// openTemp opens a store in a fresh temporary directory, closed at the end of
// the test.
func openTemp(t testing.TB, opts Options) *Store {
	t.Helper()
	return openDir(t, t.TempDir(), opts)
}

func openDir(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustTxn(t testing.TB, s *Store, txn kv.Txn) kv.TxnResult {
	t.Helper()
	res, err := s.Txn(ctxT(t), txn)
	if err != nil {
		t.Fatalf("Txn: %v", err)
	}
	return res
}

func mustPut(t testing.TB, s *Store, key, value string, lease kv.LeaseID) int64 {
	t.Helper()
	return mustTxn(t, s, kv.Txn{Then: []kv.Op{kv.Put(key, []byte(value), lease)}}).Revision
}

func mustGet(t testing.TB, s *Store, key string) *kv.KeyValue {
	t.Helper()
	res, err := s.Range(ctxT(t), kv.RangeRequest{Start: key})
	if err != nil {
		t.Fatalf("Range: %v", err)
	}
	if len(res.KVs) == 0 {
		return nil
	}
	return &res.KVs[0]
}
