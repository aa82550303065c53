//go:build race

package worker_test

// raceEnabled: the race detector allows at most 8,128 live goroutines.
const raceEnabled = true
