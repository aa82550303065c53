//go:build !unix

package bench

// maxRSSMB is not measured on this platform.
func maxRSSMB() float64 { return 0 }
