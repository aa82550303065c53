package fence

import (
	"errors"
	"testing"
)

func TestPredicateHolds(t *testing.T) {
	p := Predicate{Key: "o/1", Token: 7}
	for _, tc := range []struct {
		rev  int64
		want bool
	}{{7, true}, {0, false}, {6, false}, {8, false}} {
		if got := p.Holds(tc.rev); got != tc.want {
			t.Errorf("Holds(%d) = %v, want %v", tc.rev, got, tc.want)
		}
	}
	if (Predicate{Key: "o/1"}).Holds(0) {
		t.Error("a zero token must never hold, not even against a missing key")
	}
}

func TestLostErrorIs(t *testing.T) {
	err := error(&LostError{JobID: "j", Token: 3, Current: 9, Op: "complete"})
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("errors.Is(%v, ErrLeaseLost) = false", err)
	}
	if got := err.Error(); got != "fence: complete of job j under token 3 refused: job was claimed again at token 9" {
		t.Errorf("message = %q", got)
	}
}

func TestValidates(t *testing.T) {
	if err := Token(5).Validates(4); err != nil {
		t.Errorf("newer token refused: %v", err)
	}
	if err := Token(5).Validates(5); err != nil {
		t.Errorf("same token refused: %v", err)
	}
	if err := Token(4).Validates(5); !errors.Is(err, ErrStaleToken) {
		t.Errorf("older token: err = %v, want ErrStaleToken", err)
	}
	if err := Token(0).Validates(0); !errors.Is(err, ErrStaleToken) {
		t.Errorf("zero token: err = %v, want ErrStaleToken", err)
	}
}

func TestParseToken(t *testing.T) {
	if tok, err := ParseToken("42"); err != nil || tok != 42 {
		t.Errorf("ParseToken(42) = %v, %v", tok, err)
	}
	for _, s := range []string{"", "-1", "0", "x"} {
		if _, err := ParseToken(s); err == nil {
			t.Errorf("ParseToken(%q) accepted", s)
		}
	}
}
