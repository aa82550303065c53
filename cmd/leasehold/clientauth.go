package main

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/internal/apiserver"
)

// clientAuth says how the CLI authenticates to the daemon's API and
// trusts its TLS certificate.
type clientAuth struct {
	token     string
	tokenFile string
	serverCA  string
}

func addClientAuthFlags(cmd *cobra.Command, a *clientAuth) {
	f := cmd.Flags()
	f.StringVar(&a.token, "api-token", "", "bearer token for the daemon's API, when it requires one (prefer LEASEHOLD_API_TOKEN or --api-token-file)")
	f.StringVar(&a.tokenFile, "api-token-file", "", "read the API token from this file (one line)")
	f.StringVar(&a.serverCA, "server-ca", "", "CA certificate (PEM) that signed the daemon's --tls-cert, for an https --server")
}

// setAuth applies a to c: the token it sends and the CA it trusts.
func (c *client) setAuth(a clientAuth) error {
	token, err := readToken(a.token, a.tokenFile, "--")
	if err != nil {
		return err
	}
	c.token = token
	if a.serverCA == "" {
		return nil
	}
	pem, err := os.ReadFile(a.serverCA)
	if err != nil {
		return usagef("--server-ca: %s: check the path", apiserver.OneLine(err.Error()))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return usagef("--server-ca %s holds no PEM certificate", a.serverCA)
	}
	tr, ok := c.hc.Transport.(*http.Transport)
	if !ok {
		return nil
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return nil
}
