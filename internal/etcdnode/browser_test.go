package etcdnode

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// A web page that the operator of a member on loopback visits can send
// its client port what a form sends (a POST with a text/plain body, no
// preflight), and read the answers the member allows it to: etcd's
// HTTP/JSON gateway took such a POST as a write (a delete of every key
// would wipe the namespace) and answered reads with
// Access-Control-Allow-Origin: *, so any page could read every job. The
// member serves no gateway unless asked (Config.GRPCGateway); its clients
// speak gRPC.
func TestBrowserCannotReachTheStoreOverHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, cu := startNode(ctx, t)
	defer n.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cu}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "job", "secret payload"); err != nil {
		t.Fatal(err)
	}

	browser := func(path, body string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, cu+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "text/plain;charset=UTF-8")
		req.Header.Set("Origin", "https://evil.example")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	// "job" and "joc" in base64: the range of the key.
	code, h, body := browser("/v3/kv/range", `{"key":"am9i","range_end":"am9j"}`)
	if strings.Contains(body, "c2VjcmV0IHBheWxvYWQ") || h.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("a cross-site page's read was answered (%d, Access-Control-Allow-Origin %q): %s", code, h.Get("Access-Control-Allow-Origin"), body)
	}
	code, _, body = browser("/v3/kv/deleterange", `{"key":"AA==","range_end":"AA=="}`)
	got, err := cli.Get(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 {
		t.Fatalf("a cross-site page's form post deleted every key (%d %s)", code, body)
	}
}

// A member asked for the gateway (a script's curl) serves it, still
// without letting another origin read its answers.
func TestGRPCGatewayOnRequest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cu := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	n, err := Start(ctx, Config{Dir: t.TempDir(), ClientURL: cu, PeerURL: "http://127.0.0.1:" + strconv.Itoa(freePort(t)), GRPCGateway: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cu+"/v3/maintenance/status", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", "https://evil.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"leader"`) {
		t.Fatalf("the gateway asked for does not serve: %d %s", resp.StatusCode, b)
	}
	if o := resp.Header.Get("Access-Control-Allow-Origin"); o != "" {
		t.Errorf("Access-Control-Allow-Origin %q: another origin may read the answer", o)
	}
}
