// Package testutil holds the small helpers that the tests of several
// packages share: a quiet logger, a local store in a temporary directory,
// a log buffer safe to read while written, one request to an
// http.Handler, a store that counts (and can cut) its range reads, a TLS
// certificate for 127.0.0.1, and the seed a randomized test was given.
// Only tests import it.
package testutil

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator/kv"
	"github.com/leasehold/leasehold/localstore"
)

// QuietLogger logs nowhere, unless the tests run with -v.
func QuietLogger(testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// TempLocal opens a local store in a temporary directory, closed when the
// test ends.
func TempLocal(t testing.TB, log *slog.Logger) *localstore.Store {
	t.Helper()
	ls, err := localstore.Open(t.TempDir(), localstore.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ls.Close() })
	return ls
}

// APICall sends one request to h, with the header pairs hdr, and returns
// the status and the body.
func APICall(t testing.TB, h http.Handler, method, path, body string, hdr ...string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, "http://127.0.0.1:7420"+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, err := io.ReadAll(rec.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Code, b
}

// SyncBuffer is a log destination safe to read while written.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ErrRangesCut is the error of a RangeCountingStore's reads while cut.
var ErrRangesCut = errors.New("testutil: range reads cut")

// RangeCountingStore counts range reads, and fails them with ErrRangesCut
// while FailRanges is set.
type RangeCountingStore struct {
	kv.Store
	Ranges     atomic.Int64
	FailRanges atomic.Bool
}

func (s *RangeCountingStore) Range(ctx context.Context, r kv.RangeRequest) (kv.RangeResult, error) {
	s.Ranges.Add(1)
	if s.FailRanges.Load() {
		return kv.RangeResult{}, ErrRangesCut
	}
	return s.Store.Range(ctx, r)
}

// WriteCert writes a self-signed certificate for 127.0.0.1 and localhost,
// valid for an hour, and its key, as PEM files in dir. It is its own CA,
// and serves as a server's and as a client's certificate.
func WriteCert(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leasehold test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// Seed returns the seed a randomized test was asked to run with:
// flagValue when it is not zero, else environment variable env when it
// is set (a value that is not a number fails the test). ok is false when
// neither was given: the test runs its default seeds.
func Seed(t testing.TB, flagValue uint64, env string) (seed uint64, ok bool) {
	t.Helper()
	if flagValue != 0 {
		return flagValue, true
	}
	v := os.Getenv(env)
	if v == "" {
		return 0, false
	}
	seed, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want a seed, a number: %v", env, v, err)
	}
	return seed, true
}
