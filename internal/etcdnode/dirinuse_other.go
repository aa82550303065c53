//go:build !unix

package etcdnode

// backendLocked is not known here: Start leaves a data directory in use
// to etcd (and its context).
func backendLocked(string) (held bool, pid int) { return false, 0 }
