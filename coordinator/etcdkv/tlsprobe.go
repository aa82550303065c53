package etcdkv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
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
// one. It returns nil as soon as one endpoint's TLS matches the client's
// (or when none shows a mismatch), and otherwise what explains a failed
// dial: the errors above, for the first endpoint in order that shows one.
func probeTLS(ctx context.Context, eps []string, tc *tls.Config) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		i     int
		match bool
		err   error
	}
	results := make(chan result, len(eps))
	n := 0
	for i, ep := range eps {
		scheme, host := splitEndpoint(ep)
		if scheme != "http" && scheme != "https" {
			continue
		}
		n++
		go func() {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			defer pcancel()
			match, err := probeOne(pctx, host, scheme == "https", tc)
			if err != nil {
				err = fmt.Errorf("%s: %w", ep, err)
			}
			results <- result{i, match, err}
		}()
	}
	errs := make([]error, len(eps))
	for k := range n {
		r := <-results
		if r.match {
			cancel() // the others end promptly: drain them
			for range n - k - 1 {
				<-results
			}
			return nil
		}
		errs[r.i] = r.err
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// probeOne is probeTLS for one endpoint: match reports that its TLS, or
// its lack of it, is what the client speaks; err names a mismatch. Both
// zero: unknown (no connection, no answer in time).
func probeOne(ctx context.Context, host string, https bool, tc *tls.Config) (match bool, err error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return false, nil // not a TLS matter
	}
	defer raw.Close()
	stop := context.AfterFunc(ctx, func() { _ = raw.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	if !https {
		// A plain endpoint: does a TLS server answer it?
		probe := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}) //nolint:gosec // only asks whether the server speaks TLS
		err := probe.HandshakeContext(ctx)
		switch {
		case err == nil:
			return false, ErrServerTLS
		case ctx.Err() != nil:
			return false, nil
		}
		return true, nil
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
		return true, nil
	case errors.As(err, &rec):
		return false, ErrServerPlain
	case errors.Is(err, io.EOF) && !conn.ConnectionState().HandshakeComplete && ctx.Err() == nil:
		// etcd without TLS closes the connection on a ClientHello.
		return false, fmt.Errorf("%w (it closed the connection at the TLS handshake)", ErrServerPlain)
	case errors.As(err, &cve):
		return false, fmt.Errorf("%w (%v)", ErrServerCertUntrusted, cve.Err)
	case strings.Contains(err.Error(), "certificate required"), strings.Contains(err.Error(), "bad certificate"),
		strings.Contains(err.Error(), "unknown certificate authority"):
		return false, fmt.Errorf("%w (%v)", ErrClientCertRequired, err)
	}
	return false, nil
}
