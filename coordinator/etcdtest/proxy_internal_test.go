package etcdtest

import "testing"

func TestLoopbackHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:2379":         "127.0.0.1:2379",
		"http://127.0.0.1:2379":  "127.0.0.1:2379",
		"https://localhost:2379": "localhost:2379",
		"[::1]:2379":             "[::1]:2379",
		"127.1.2.3:1":            "127.1.2.3:1",
	} {
		if got, err := loopbackHostPort(in); err != nil || got != want {
			t.Errorf("loopbackHostPort(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"10.0.0.1:2379", "http://example.com:2379", "127.0.0.1", "", "0.0.0.0:2379"} {
		if got, err := loopbackHostPort(bad); err == nil {
			t.Errorf("loopbackHostPort(%q) = %q, want an error", bad, got)
		}
	}
}
