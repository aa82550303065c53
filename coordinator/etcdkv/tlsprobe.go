package etcdkv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// What a TLS probe of an endpoint that did not answer found (Dial wraps
// them): the usual ways a client's TLS settings and a server's disagree.
var (
	// ErrClientCertRequired: the server requires a client certificate
	// (etcd's --client-cert-auth) and got none, or one it does not trust:
	// set CertFile and KeyFile.
	ErrClientCertRequired = errors.New("etcdkv: the server requires a client certificate it trusts")
	// ErrServerCertUntrusted: the server's certificate is not signed by
	// CAFile (or the system roots), or not for its name: set CAFile, or
	// ServerName.
	ErrServerCertUntrusted = errors.New("etcdkv: the server's certificate is not trusted")
	// ErrServerTLS: an http:// endpoint whose server speaks TLS: use
	// https://.
	ErrServerTLS = errors.New("etcdkv: the server speaks TLS")
	// ErrServerPlain: an https:// endpoint whose server does not speak
	// TLS: use http://.
	ErrServerPlain = errors.New("etcdkv: the server does not speak TLS")
)

// probeTLS connects to each TCP endpoint for up to a second: over TLS as
// the client would (with tc, or the system roots when tc is nil) for an
// https:// one, and with a handshake that checks nothing for an http://
// one. It returns what explains a failed dial (the errors above, for the
// first endpoint that shows one), or nil.
func probeTLS(ctx context.Context, eps []string, tc *tls.Config) error {
	errs := make([]error, len(eps))
	var g errgroup.Group
	for i, ep := range eps {
		scheme, host, ok := strings.Cut(ep, "://")
		if !ok || (scheme != "http" && scheme != "https") {
			continue
		}
		host, _, _ = strings.Cut(host, "/")
		g.Go(func() error {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if err := probeOne(pctx, host, scheme == "https", tc); err != nil {
				errs[i] = fmt.Errorf("%s: %w", ep, err)
			}
			return nil
		})
	}
	_ = g.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// probeOne is probeTLS for one endpoint.
func probeOne(ctx context.Context, host string, https bool, tc *tls.Config) error {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil // not a TLS matter
	}
	defer raw.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	if !https {
		// A plain endpoint: does a TLS server answer it?
		probe := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}) //nolint:gosec // only asks whether the server speaks TLS
		if probe.HandshakeContext(ctx) == nil {
			return ErrServerTLS
		}
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12} // clientv3's for https without files: the system roots
	if tc != nil {
		cfg = tc.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(host)
	}
	cfg.NextProtos = []string{"h2"}
	conn := tls.Client(raw, cfg)
	err = conn.HandshakeContext(ctx)
	if err == nil {
		// TLS 1.3: a server that refuses the client's certificate says so
		// after the handshake, in an alert that the first read returns; a
		// server that takes it answers the HTTP/2 preface with its
		// settings.
		if _, err = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err == nil {
			var b [1]byte
			_, err = conn.Read(b[:])
		}
	}
	var rec tls.RecordHeaderError
	var cve *tls.CertificateVerificationError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &rec):
		return ErrServerPlain
	case errors.As(err, &cve):
		return fmt.Errorf("%w (%v)", ErrServerCertUntrusted, cve.Err)
	case strings.Contains(err.Error(), "certificate required"), strings.Contains(err.Error(), "bad certificate"),
		strings.Contains(err.Error(), "unknown certificate authority"):
		return fmt.Errorf("%w (%v)", ErrClientCertRequired, err)
	}
	return nil
}
