package etcdkv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testutil"
)

// A dial that fails on a TLS mismatch says which: a server that requires
// a client certificate, one whose certificate the client does not trust,
// TLS spoken on an http:// endpoint, or plain TCP on an https:// one.
func TestProbeTLSNamesTheMismatch(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := testutil.WriteCert(t, dir)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	serve := func(clientAuth tls.ClientAuthType) *httptest.Server {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: clientAuth, ClientCAs: pool, NextProtos: []string{"h2"}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv
	}
	mutual, plainTLS := serve(tls.RequireAndVerifyClientCert), serve(tls.NoClientCert)
	plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(plain.Close)
	// A server that closes the connection on what it reads, as etcd
	// without TLS does on a ClientHello.
	closer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	t.Cleanup(func() { _ = closer.Close(); <-closed })
	go func() {
		defer close(closed)
		for {
			c, err := closer.Accept()
			if err != nil {
				return
			}
			var b [16 << 10]byte // the whole ClientHello: no reset on close
			_, _ = c.Read(b[:])
			_ = c.Close()
		}
	}()
	trusting := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	withCert := trusting.Clone()
	withCert.Certificates = []tls.Certificate{cert}

	for _, c := range []struct {
		name string
		ep   string
		tc   *tls.Config
		want error
	}{
		{"no client certificate", mutual.URL, trusting, ErrClientCertRequired},
		{"client certificate", mutual.URL, withCert, nil},
		{"untrusted server", plainTLS.URL, &tls.Config{MinVersion: tls.VersionTLS12}, ErrServerCertUntrusted},
		{"http to TLS", strings.Replace(plainTLS.URL, "https://", "http://", 1), nil, ErrServerTLS},
		{"https to plain", strings.Replace(plain.URL, "http://", "https://", 1), trusting, ErrServerPlain},
		{"plain to plain", plain.URL, nil, nil},
		{"https to a server that closes", "https://" + closer.Addr().String(), trusting, ErrServerPlain},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := probeTLS(context.Background(), []string{c.ep}, c.tc)
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Errorf("probeTLS(%s) = %v, want %v", c.ep, err, c.want)
			}
		})
	}
}
