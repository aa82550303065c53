package main

import (
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold/coordinator/etcdtest"
)

// catchUp must learn from a progress notification that nothing below a
// revision is left to see, even when that revision changed no key of the
// namespace (no event of the watch carries it).
func TestStoreLogCatchUpWithoutAnEventAtTheRevision(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	l, err := startStoreLog(t.Context(), cli, "ns", filepath.Join(t.TempDir(), "store.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.result()
	if _, err := cli.Put(t.Context(), "/leasehold/ns/j/01JF0000000000000000000001", "x"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Put(t.Context(), "/elsewhere", "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.catchUp(t.Context(), cli, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
}
