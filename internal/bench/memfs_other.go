//go:build !linux

package bench

// memoryBacked is not detected on this platform.
func memoryBacked(string) bool { return false }
