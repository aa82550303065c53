package fence_test

import (
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/fence"
)

// A resource outside the store fences writes by token: for each job, it
// remembers the highest token it accepted and refuses older ones, so a run
// that was replaced (paused, partitioned) cannot overwrite its successor's
// work. Tokens order the runs of one job; they are revisions of a store
// shared by all jobs, so tokens of different jobs must not be compared
// (two jobs claimed together even share one).
func ExampleToken_Validates() {
	highest := map[string]fence.Token{} // by job id
	write := func(jobID string, t fence.Token) error {
		if err := t.Validates(highest[jobID]); err != nil {
			return err
		}
		highest[jobID] = t
		return nil
	}
	fmt.Println(write("job-a", 7))  // the first run
	fmt.Println(write("job-b", 5))  // another job, claimed earlier: its own sequence
	fmt.Println(write("job-a", 12)) // job-a was claimed again
	err := write("job-a", 7)        // its first run wakes up
	fmt.Println(errors.Is(err, fence.ErrStaleToken))
	// Output:
	// <nil>
	// <nil>
	// <nil>
	// true
}
