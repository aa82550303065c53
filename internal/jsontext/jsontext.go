// Package jsontext holds checks of JSON text that encoding/json does not
// make.
package jsontext

import (
	"bytes"
	"fmt"
)

// LoneSurrogateError says that what, JSON text, has a lone surrogate
// escape at byte at (see LoneSurrogate), and what to do: one line.
func LoneSurrogateError(what string, at int) string {
	return fmt.Sprintf("%s has half of a UTF-16 surrogate pair escaped alone (at byte %d): Go reads it as U+FFFD and strict JSON readers refuse it; escape characters whole, and encode binary data (base64 or hex, say)", what, at)
}

// LoneSurrogate returns the offset in the JSON text b of the first \u
// escape, inside a string, of one half of a UTF-16 surrogate pair without
// the other, or -1 if there is none. encoding/json decodes such an escape
// to U+FFFD without a word (so that two different strings become one) and
// json.Valid accepts it, but stricter readers refuse the text. b need not
// be valid JSON: the escapes of well-formed strings are checked.
func LoneSurrogate(b []byte) int {
	if !bytes.Contains(b, []byte(`\u`)) {
		return -1
	}
	in := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
		case c == '\\':
			r, ok := escapeAt(b, i)
			switch {
			case !ok:
				i++ // a two-byte escape, or a malformed one
			case r >= 0xDC00 && r <= 0xDFFF:
				return i // a low half first
			case r >= 0xD800 && r <= 0xDBFF:
				if low, ok := escapeAt(b, i+6); !ok || low < 0xDC00 || low > 0xDFFF {
					return i
				}
				i += 11 // the pair
			default:
				i += 5
			}
		}
	}
	return -1
}

// escapeAt returns the code unit of the \uXXXX escape at b[i], if there is
// one.
func escapeAt(b []byte, i int) (rune, bool) {
	if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[i+2 : i+6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
