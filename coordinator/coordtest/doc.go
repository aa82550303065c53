// Package coordtest is the behaviour suite that the job state machine must
// pass on every backend of the kv seam. Run it from a backend's tests:
//
//	func TestConformance(t *testing.T) {
//		coordtest.Run(t, func(t *testing.T) kv.Store { return openStore(t) })
//	}
//
// Each test uses its own namespace, so one store may serve them all. The
// suite covers the safety contract of DESIGN.md that can be shown in one
// process: compare-and-set claims, growing tokens, fenced writes, cancel
// requests that survive the owner's writes, reaping, retries, scheduling,
// uniqueness and retention.
package coordtest
