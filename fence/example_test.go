package fence_test

import (
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/fence"
)

// A resource outside the store fences writes by token: it remembers the
// highest token it accepted and refuses older ones, so a run that was
// replaced (paused, partitioned) cannot overwrite its successor's work.
func ExampleToken_Validates() {
	var highest fence.Token
	write := func(t fence.Token) error {
		if err := t.Validates(highest); err != nil {
			return err
		}
		highest = t
		return nil
	}
	fmt.Println(write(7))  // the first run
	fmt.Println(write(12)) // the job was claimed again
	err := write(7)        // the first run wakes up
	fmt.Println(errors.Is(err, fence.ErrStaleToken))
	// Output:
	// <nil>
	// <nil>
	// true
}
