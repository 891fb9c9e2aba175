package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Check verifies that body is exactly one JSON object, no deeper than
// maxDepth, with no NUL character in any string, no object naming one member
// twice (JSON leaves the meaning open: encoding/json and jsonb take the last
// value, other parsers the first, so a proxy in front may have checked another
// value than the one applied), and only what PostgreSQL's
// jsonb can hold (values of pk and columns reach it as sent): no lone UTF-16
// surrogate escape, no number beyond the range of numeric. Its numbers written
// out in full (as PostgreSQL renders numeric) must fit in maxDigits: a few
// bytes such as 1e131071 would otherwise cost the database 131,072 digits
// wherever the value is rendered as text.
// It returns ErrDuplicateMember for an object naming one member twice.
func Check(body []byte, maxDepth int, maxDigits int64) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var open []jsonLevel // the objects and arrays open at a token, innermost last
	// valueDone notes that a value of the innermost object or array ended.
	valueDone := func() {
		if len(open) > 0 {
			open[len(open)-1].wantName = open[len(open)-1].names != nil
		}
	}
	first := true
	var digits int64
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return errors.New("body is not valid JSON")
		}
		if first && tok != json.Delim('{') {
			return errors.New("body must be a JSON object")
		}
		first = false
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(open) == maxDepth {
					return fmt.Errorf("body is nested deeper than %d levels", maxDepth)
				}
				if t == '{' {
					open = append(open, jsonLevel{names: map[string]bool{}, wantName: true})
				} else {
					open = append(open, jsonLevel{})
				}
			default:
				open = open[:len(open)-1]
				valueDone()
			}
		case string:
			if strings.ContainsRune(t, 0) {
				return errors.New("body contains a NUL character")
			}
			if in := &open[len(open)-1]; in.wantName {
				if in.names[t] {
					return ErrDuplicateMember
				}
				in.names[t], in.wantName = true, false
			} else {
				valueDone()
			}
		case json.Number:
			n, ok := writtenOut(string(t))
			if !ok {
				return errors.New("body has a number out of range")
			}
			if digits += n; digits > maxDigits {
				return fmt.Errorf("body has numbers of more than %d digits in all when written out without exponents", maxDigits)
			}
			valueDone()
		default: // true, false, null
			valueDone()
		}
		if len(open) == 0 && dec.More() {
			return errors.New("body has data after the JSON object")
		}
	}
	if first {
		return errors.New("body is empty")
	}
	if loneSurrogate(body) {
		return errors.New("body has an unpaired UTF-16 surrogate escape")
	}
	return nil
}

// ErrDuplicateMember is Check's error for an object naming one member twice.
var ErrDuplicateMember = errors.New("body has an object that names one member twice")

// jsonLevel is an object or array that Check is in.
type jsonLevel struct {
	names    map[string]bool // an object's member names so far; nil for an array
	wantName bool            // in an object: the next string is a member name
}

// PostgreSQL numeric holds at most this many digits before and after the
// decimal point.
const (
	numericMaxIntDigits  = 131072
	numericMaxFracDigits = 16383
)

// writtenOut returns how many digits the JSON number n (valid syntax) has when
// written without an exponent, counting digits as written (conservative), and
// whether that is within the range of PostgreSQL numeric.
func writtenOut(n string) (int64, bool) {
	mant, exp := n, int64(0)
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		var err error
		if exp, err = strconv.ParseInt(strings.TrimPrefix(n[i+1:], "+"), 10, 32); err != nil {
			return 0, false
		}
		mant = n[:i]
	}
	intPart, frac, _ := strings.Cut(strings.TrimPrefix(mant, "-"), ".")
	intDigits, fracDigits := int64(len(intPart))+exp, int64(len(frac))-exp
	if intDigits > numericMaxIntDigits || fracDigits > numericMaxFracDigits {
		return 0, false
	}
	return max(intDigits, 1) + max(fracDigits, 0), true
}

// loneSurrogate reports whether body (valid JSON) has a \u escape of a UTF-16
// surrogate that is not a high surrogate directly followed by a low one. Go
// decodes it as U+FFFD; PostgreSQL's jsonb rejects it.
func loneSurrogate(body []byte) bool {
	escape := func(i int) rune { // the \uXXXX escape at body[i], or -1
		if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
			return -1
		}
		v, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
		if err != nil {
			return -1
		}
		return rune(v)
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		r := escape(i)
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if lo := escape(i + 6); lo < 0xDC00 || lo >= 0xE000 {
				return true
			}
			i += 11
		case r >= 0xDC00 && r < 0xE000:
			return true
		default:
			i++ // the escaped character (a backslash, quote, u, ...)
		}
	}
	return false
}
