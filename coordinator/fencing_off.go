//go:build leasehold_nofence

package coordinator

// fencing is false only in the deliberately broken build used to show that
// cluster-test detects stale writes: `go build -tags leasehold_nofence`.
// Never ship it: run writes are then applied without their fencing
// condition and without the session check.
const fencing = false
