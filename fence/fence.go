package fence

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrLeaseLost is returned by a fenced write that the store refused because
// the run no longer owns the job: its lease expired or was revoked, or a newer
// claim took the job. The caller must stop the run and record nothing.
var ErrLeaseLost = errors.New("fence: lease lost")

// ErrStaleToken is returned by [Token.Validates] when a token is older than
// one already seen by a resource that fences on tokens.
var ErrStaleToken = errors.New("fence: stale token")

// Token is the fencing token of one job run. The zero Token is never issued.
type Token int64

// IsZero reports whether t is the zero token, which no claim ever issues.
func (t Token) IsZero() bool { return t == 0 }

// String returns the decimal form of the token.
func (t Token) String() string { return strconv.FormatInt(int64(t), 10) }

// Validates checks t against the highest token a resource outside the store
// has accepted so far for the same job (zero if none). A resource that
// writes only when Validates returns nil, and then remembers t for that
// job, never accepts a write from a run that was superseded: this is how
// side effects are fenced. Keep the highest token per job (or per job and
// resource): tokens of different jobs are revisions of one store, ordered
// by claim time, and two jobs claimed together share one.
func (t Token) Validates(highest Token) error {
	if t.IsZero() {
		return fmt.Errorf("%w: zero token", ErrStaleToken)
	}
	if t < highest {
		return fmt.Errorf("%w: token %d is older than %d", ErrStaleToken, t, highest)
	}
	return nil
}

// ParseToken parses the decimal form produced by [Token.String].
func ParseToken(s string) (Token, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("fence: parse token %q: want a positive integer", s)
	}
	return Token(n), nil
}

// Predicate is the condition every fenced write carries: the ownership key
// Key must exist and have been created by the claim that issued Token.
// Stores express it as a compare on the key's creation revision.
type Predicate struct {
	// Key is the job's ownership key, in the store's key space.
	Key string
	// Token is the revision at which the claim created Key.
	Token Token
}

// Holds reports whether an ownership key observed with creation revision
// createRev (zero when the key does not exist) satisfies the predicate.
func (p Predicate) Holds(createRev int64) bool {
	return !p.Token.IsZero() && createRev == int64(p.Token)
}

// LostError describes a refused fenced write: which job, which token, and
// what the store saw instead. It unwraps to [ErrLeaseLost].
type LostError struct {
	JobID string
	Token Token
	// Current is the creation revision of the ownership key found by the
	// store, or zero if the key was gone.
	Current int64
	// Op names the write that was refused ("checkpoint", "complete", ...).
	Op string
	// Local is true when the write was not sent at all: the run's session
	// had passed its validity deadline, so the lease may be gone.
	Local bool
}

func (e *LostError) Error() string {
	why := "ownership key is gone"
	switch {
	case e.Local:
		why = "not sent: the session's lease could not be renewed in time"
	case e.Current != 0:
		why = fmt.Sprintf("job was claimed again at token %d", e.Current)
	}
	return fmt.Sprintf("fence: %s of job %s under token %d refused: %s", e.Op, e.JobID, e.Token, why)
}

// Unwrap makes errors.Is(err, ErrLeaseLost) true.
func (e *LostError) Unwrap() error { return ErrLeaseLost }
