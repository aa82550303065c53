package etcdkv

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testutil"
)

func TestClientConfigTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := testutil.WriteCert(t, dir)
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	eps := []string{"https://127.0.0.1:2379"}

	c, err := clientConfig(Config{Endpoints: eps, CAFile: cert, CertFile: cert, KeyFile: key, ServerName: "etcd.example"})
	if err != nil {
		t.Fatal(err)
	}
	if c.TLS == nil || c.TLS.RootCAs == nil || len(c.TLS.Certificates) != 1 || c.TLS.ServerName != "etcd.example" {
		t.Fatalf("TLS config not filled in: %+v", c.TLS)
	}
	if c.AutoSyncInterval != 0 || c.DialKeepAliveTime != DefaultKeepAliveTime ||
		c.DialKeepAliveTimeout != DefaultKeepAliveTimeout || c.DialTimeout != DefaultDialTimeout {
		t.Fatalf("defaults not applied: %+v", c)
	}
	if c, err := clientConfig(Config{Endpoints: eps}); err != nil || c.TLS != nil {
		t.Fatalf("no TLS files: TLS %+v, %v", c.TLS, err)
	}

	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // substrings of the error
		is   error
	}{
		{"missing CA", Config{CAFile: missing}, []string{"CA file", "missing.pem"}, fs.ErrNotExist},
		{"garbage CA", Config{CAFile: garbage}, []string{"garbage.pem", "no PEM certificate"}, nil},
		{"missing cert", Config{CertFile: missing, KeyFile: key}, []string{"client certificate", "missing.pem"}, fs.ErrNotExist},
		{"missing key", Config{CertFile: cert, KeyFile: missing}, []string{"client key", "missing.pem"}, fs.ErrNotExist},
		{"garbage cert", Config{CertFile: garbage, KeyFile: key}, []string{"garbage.pem", "key.pem"}, nil},
		{"key for another cert", Config{CertFile: cert, KeyFile: garbage}, []string{"cert.pem", "garbage.pem"}, nil},
		{"cert without key", Config{CertFile: cert}, []string{"without a key"}, nil},
		{"key without cert", Config{KeyFile: key}, []string{"without a certificate"}, nil},
		{"TLS on http endpoint", Config{CAFile: cert, Endpoints: []string{"http://127.0.0.1:2379"}}, []string{"http://127.0.0.1:2379", "https://"}, nil},
		{"user without password", Config{Username: "u"}, []string{"username and a password"}, nil},
	} {
		if tc.cfg.Endpoints == nil {
			tc.cfg.Endpoints = eps
		}
		_, err := clientConfig(tc.cfg)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tc.name, err, w)
			}
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: error %q is not %v", tc.name, err, tc.is)
		}
	}
}

func TestDialUnreachable(t *testing.T) {
	if _, err := Dial(context.Background(), Config{}); err == nil {
		t.Fatal("Dial without endpoints succeeded")
	}
	// A port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "http://" + ln.Addr().String()
	_ = ln.Close()
	start := time.Now()
	cli, err := Dial(context.Background(), Config{Endpoints: []string{ep}, DialTimeout: 500 * time.Millisecond})
	if err == nil {
		_ = cli.Close()
		t.Fatal("Dial of a closed port succeeded")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Dial took %v with a 500ms DialTimeout", took)
	}
	if !strings.Contains(err.Error(), ep) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %q should name the endpoint and be a deadline", err)
	}
}

// With FailFast, endpoints that all refuse the connection fail the dial at
// once (the DialTimeout of a minute would fail the test's deadline
// first); one that accepts and does not answer is waited for as before.
func TestDialFailFast(t *testing.T) {
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_ = ln.Close()
		return "http://" + ln.Addr().String()
	}
	a, b := refused(), strings.TrimPrefix(refused(), "http://")
	_, err := Dial(context.Background(), Config{Endpoints: []string{a, b}, DialTimeout: time.Minute, FailFast: true})
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
		t.Fatalf("FailFast dial of two closed ports: %v; want connection refused, naming both", err)
	}

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	cli, err := Dial(context.Background(), Config{Endpoints: []string{a, "http://" + silent.Addr().String()},
		DialTimeout: 300 * time.Millisecond, FailFast: true})
	if err == nil {
		_ = cli.Close()
		t.Fatal("a dial of a closed port and a silent one succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("FailFast dial of a closed port and a silent one: %v; want it to wait out the DialTimeout", err)
	}
}

// A dial whose caller gave up (a signal during a daemon's start) says so:
// it must not blame the endpoints for not answering "within 5s".
func TestDialInterruptedSaysSo(t *testing.T) {
	// A listener that accepts and never answers: the dial waits on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ep := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	type dialed struct{ err error }
	done := make(chan dialed, 1)
	go func() {
		cli, err := Dial(ctx, Config{Endpoints: []string{ep}, DialTimeout: time.Minute})
		if cli != nil {
			_ = cli.Close()
		}
		done <- dialed{err}
	}()
	conn, err := ln.Accept() // the dial is under way
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cancel()
	d := <-done
	if d.err == nil {
		t.Fatal("an interrupted Dial succeeded")
	}
	if !errors.Is(d.err, context.Canceled) {
		t.Errorf("error %q is not context.Canceled", d.err)
	}
	if strings.Contains(d.err.Error(), "answered within") || !strings.Contains(d.err.Error(), "interrupted") {
		t.Errorf("error %q should say the dial was interrupted, not blame the endpoints", d.err)
	}
}
