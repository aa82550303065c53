//go:build !leasehold_nofence

package coordinator

// fencing is true in every real build. The leasehold_nofence build tag
// turns it off to prove that the fault tests catch the bug (see
// fencing_off.go).
const fencing = true
