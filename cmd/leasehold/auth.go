package main

// The daemon's side of the API's access control (package apiserver):
// the API token of --api-token or --api-token-file, TLS, and whether
// --listen is loopback only.

import (
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"strings"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/internal/apiserver"
)

// loopbackListener reports whether ln listens on a loopback address only.
// It reads the address bound, not the one asked for: a name such as
// "api.localhost" is resolved, and may resolve beyond loopback.
func loopbackListener(ln net.Listener) bool {
	a, ok := ln.Addr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// readToken returns the API token of --api-token or --api-token-file.
func readToken(token, file, flagPrefix string) (string, error) {
	if token != "" && file != "" {
		return "", usagef("%sapi-token and %sapi-token-file are both set: set one of them", flagPrefix, flagPrefix)
	}
	if file == "" {
		t := strings.TrimSpace(token)
		if strings.ContainsFunc(t, unicode.IsControl) {
			return "", usagef("%sapi-token holds a control character (a line break?): pass the token alone, on one line", flagPrefix)
		}
		return t, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", usagef("%sapi-token-file: %s: check the path and its permissions", flagPrefix, apiserver.OneLine(err.Error()))
	}
	t := strings.TrimSpace(string(b))
	if t == "" || strings.ContainsFunc(t, unicode.IsControl) {
		return "", usagef("%sapi-token-file %s: want one line holding the token, without control characters", flagPrefix, file)
	}
	return t, nil
}

// loadKeyPair returns the TLS configuration of the API's --tls-cert and
// --tls-key.
func loadKeyPair(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, usagef("--tls-cert %s / --tls-key %s: %s: give a PEM certificate and its key", certFile, keyFile, apiserver.OneLine(err.Error()))
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// warnExposedSecrets logs one warning for each secret of the daemon that
// other users of the host can read: an API token on the command line
// (ps shows it), and a token or TLS key file that group or others may
// read. The daemon goes on: the secret is out already, and a restart
// with it moved is what helps.
func warnExposedSecrets(cmd *cobra.Command, o *daemonOpts, log *slog.Logger) {
	if flagSource(cmd, "api-token") == 3 {
		log.Warn("--api-token is on the command line, which other users of the host can read (ps): use --api-token-file (mode 0600)")
	}
	for _, f := range []struct{ flag, path string }{{"api-token-file", o.apiTokenFile}, {"tls-key", o.tlsKey}} {
		if f.path == "" {
			continue
		}
		if st, err := os.Stat(f.path); err == nil && st.Mode().Perm()&0o077 != 0 {
			log.Warn("a secret file is readable by other users of the host: chmod 600 it", slog.String("flag", "--"+f.flag),
				slog.String("file", f.path), slog.String("mode", st.Mode().Perm().String()))
		}
	}
}
