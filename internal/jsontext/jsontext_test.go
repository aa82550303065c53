package jsontext

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestLoneSurrogate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{`{}`, -1},
		{`{"a":"plain"}`, -1},
		{`{"a":"\u00e9\u4e2d"}`, -1},
		{`{"a":"\ud83d\ude00"}`, -1},               // a pair
		{`{"a":"\uD83D\uDE00\uD83D\uDE00"}`, -1},   // two, upper case
		{`{"a":"\\ud800"}`, -1},                    // an escaped backslash, then text
		{`{"a":"\\\ud83d\ude00"}`, -1},             // a backslash, then a pair
		{`{"\ud800":1}`, 2},                        // in a key
		{`{"a":"\ud800"}`, 6},                      // a high half alone
		{`{"a":"x\udc00"}`, 7},                     // a low half alone
		{`{"a":"\ud800\u0041"}`, 6},                // a high half, then no low one
		{`{"a":"\ud800\ud800\udc00"}`, 6},          // a high half, then a pair
		{`{"a":"\ud83d\ude00\udc00"}`, 18},         // a pair, then a low half
		{`{"a":"\ud800`, 6},                        // cut short
		{`"\u12"`, -1},                             // malformed: left to the parser
		{`{"a":"\"\ud800"}`, 8},                    // after an escaped quote
		{`["\ud800", "ok"]`, 2},                    // in an array
		{`{"u\\":"\ud800"}`, 8},                    // a key ending in a backslash
		{`{"a":1} "\ud800"`, 9},                    // not valid JSON: still found
		{`{"a":"\u005c\ud800"}`, 12},               // an escaped backslash escape, then a lone half
		{`{"a":"\ud83d\ude00", "b":"\udfff"}`, 26}, // after a pair, in another string
		{`{"a":"\u0022\ud800"}`, 12},               // an escaped quote escape stays in the string
		{`{"a":"\uDBFF\uDFFF"}`, -1},               // the last pair
		{`{"a":"\uD7FF\uE000"}`, -1},               // either side of the surrogates
		{`{"a":"no escape here \n \t"}`, -1},       // other escapes
		{`{"a":"\ud800\\udc00"}`, 6},               // a high half, then an escaped backslash
		{"{\"a\":\"\\ud800\"}\n", 6},               // trailing newline
		{`{"a":"\u"}`, -1},                         // malformed
		{`{"a":"\ud8"}`, -1},                       // malformed
		{`{"a":"\ud800\u"}`, 6},                    // high half, then a malformed escape
		{`{"a":"\ud800\udc0"}`, 6},                 // high half, then a short escape
		{`{"a":"\ud800\udc0g"}`, 6},                // high half, then a bad hex digit
		{`{"a":"\ud800 \udc00"}`, 6},               // a space between the halves
		{`{"a":"\udbff\udc00\ud800\udfff"}`, -1},   // two pairs
		{`{"a":"\udbff\udc00\ud800\udfff\ud800"}`, 30},
	} {
		if got := LoneSurrogate([]byte(tc.in)); got != tc.want {
			t.Errorf("LoneSurrogate(%s) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// Any JSON string that encoding/json decodes without changing it has no
// lone surrogate, and any with one decodes changed.
func FuzzLoneSurrogate(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud800"`, `"\ud83d\ude00"`, `"\\ud800"`, `"x\udc00y"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var s string
		if !utf8.ValidString(in) || json.Unmarshal([]byte(in), &s) != nil {
			return
		}
		lone := LoneSurrogate([]byte(in)) >= 0
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		// Re-encoded, a decoded string has no escapes of surrogates.
		if LoneSurrogate(out) >= 0 {
			t.Fatalf("re-encoded %q has a lone surrogate", out)
		}
		var back string
		if err := json.Unmarshal(out, &back); err != nil || back != s {
			t.Fatalf("round trip of %q: %q, %v", s, back, err)
		}
		if lone && !containsReplacement(s) {
			t.Fatalf("%s has a lone surrogate, but decodes to %q without U+FFFD", in, s)
		}
	})
}

func containsReplacement(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError {
			return true
		}
	}
	return false
}
