package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits bound what one sync request may ask for.
type Limits struct {
	MaxBodyBytes     int64 // request body cap (413 request_too_large)
	MaxMutations     int   // mutations per push
	MaxPageSize      int   // largest page a pull or rebuild returns (a larger limit is capped)
	DefaultPageSize  int   // page size when the request gives none
	MaxJSONDepth     int   // deepest nesting of objects and arrays in a body
	MaxScopes        int   // scopes per pull or connect
	MaxIdentifierLen int   // client_id, mutation_id, batch_id, scope, table, cursor lengths
}

// DefaultLimits are the limits synchrod uses unless configured otherwise.
var DefaultLimits = Limits{
	MaxBodyBytes: 4 << 20, MaxMutations: 500, MaxPageSize: 1000, DefaultPageSize: 500,
	MaxJSONDepth: 32, MaxScopes: 1000, MaxIdentifierLen: 256,
}

// readBody reads a request body as one JSON object within the limits, into v
// (typed: a wrong type is invalid_request). It rejects bodies over the cap (413),
// invalid UTF-8, NUL characters (PostgreSQL text cannot hold them), nesting
// deeper than the limit, trailing data, and a member named like a request field
// but in other case ("Mutations", "BASE_VERSION"): field names are matched
// exactly. Other unknown members are ignored.
func readBody(w http.ResponseWriter, r *http.Request, l Limits, v any) *apiError {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, l.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "request_too_large",
				Message: fmt.Sprintf("request body is larger than %d bytes", l.MaxBodyBytes)}
		}
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			w.Header().Set("Connection", "close")
			return &apiError{Status: http.StatusRequestTimeout, Code: "request_timeout",
				Message: "the request body did not arrive in time; retry"}
		}
		return badRequest("could not read the request body")
	}
	if !utf8.Valid(body) {
		return badRequest("request body is not valid UTF-8")
	}
	if err := checkJSON(body, l.MaxJSONDepth, l.MaxBodyBytes); err != nil {
		return badRequest(err.Error())
	}
	if err := exactFields(body, reflect.TypeOf(v), ""); err != nil {
		return badRequest(err.Error())
	}
	if err := json.Unmarshal(body, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return badRequest(fmt.Sprintf("field %q has the wrong type", typeErr.Field))
		}
		return badRequest("request body does not match the request schema")
	}
	return nil
}

// exactFields fails when an object of body that decodes into a struct of type t
// (or into a struct within it: a slice element, a map value) has a member whose
// name differs from one of the struct's JSON field names only in case.
// encoding/json matches names case-insensitively (with Unicode simple folding:
// "ſcope" is scope) and would take such a member for the field, silently: a
// "Base_Version" would turn a checked update into an unchecked one. A member
// that is no field in any case is left alone (encoding/json ignores it); a
// value of the wrong shape is left to the typed decoding, which reports it.
// path names the object in the message (the real field's name, never what
// the client sent).
func exactFields(body []byte, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if !hasFields(t) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) != nil {
			return nil
		}
		fields := jsonFields(t)
		for _, name := range slices.Sorted(maps.Keys(obj)) {
			if ft, ok := fields[name]; ok {
				if err := exactFields(obj[name], ft, join(path, name)); err != nil {
					return err
				}
				continue
			}
			for _, field := range slices.Sorted(maps.Keys(fields)) {
				if strings.EqualFold(name, field) {
					return fmt.Errorf("a member's name differs from the field %s only in case; field names are case-sensitive", join(path, field))
				}
			}
		}
	case reflect.Slice, reflect.Array:
		var items []json.RawMessage
		if json.Unmarshal(body, &items) != nil {
			return nil
		}
		for i, item := range items {
			if err := exactFields(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			return nil
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if err := exactFields(m[k], t.Elem(), path+"[*]"); err != nil {
				return err
			}
		}
	}
	return nil
}

// hasFields reports whether a value of type t holds a struct somewhere (itself,
// its elements), i.e. whether exactFields has names to check in it.
func hasFields(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		return true
	case reflect.Slice, reflect.Array, reflect.Map:
		return hasFields(t.Elem())
	}
	return false
}

// jsonFields maps the JSON names of a struct's exported fields to their types.
// The request types have no embedded structs.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// checkJSON verifies that body is exactly one JSON object, no deeper than
// maxDepth, with no NUL character in any string, no object naming one member
// twice (JSON leaves the meaning open: encoding/json and jsonb take the last
// value, other parsers the first, so a proxy in front may have checked another
// value than the one applied), and only what PostgreSQL's
// jsonb can hold (values of pk and columns reach it as sent): no lone UTF-16
// surrogate escape, no number beyond the range of numeric. Its numbers written
// out in full (as PostgreSQL renders numeric) must fit in maxDigits: a few
// bytes such as 1e131071 would otherwise cost the database 131,072 digits
// wherever the value is rendered as text.
func checkJSON(body []byte, maxDepth int, maxDigits int64) error {
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
			return errors.New("request body is not valid JSON")
		}
		if first && tok != json.Delim('{') {
			return errors.New("request body must be a JSON object")
		}
		first = false
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(open) == maxDepth {
					return fmt.Errorf("request body is nested deeper than %d levels", maxDepth)
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
				return errors.New("request body contains a NUL character")
			}
			if in := &open[len(open)-1]; in.wantName {
				if in.names[t] {
					return errors.New("request body has an object that names one member twice")
				}
				in.names[t], in.wantName = true, false
			} else {
				valueDone()
			}
		case json.Number:
			n, ok := writtenOut(string(t))
			if !ok {
				return errors.New("request body has a number out of range")
			}
			if digits += n; digits > maxDigits {
				return fmt.Errorf("request body has numbers of more than %d digits in all when written out without exponents", maxDigits)
			}
			valueDone()
		default: // true, false, null
			valueDone()
		}
		if len(open) == 0 && dec.More() {
			return errors.New("request body has data after the JSON object")
		}
	}
	if first {
		return errors.New("request body is empty")
	}
	if loneSurrogate(body) {
		return errors.New("request body has an unpaired UTF-16 surrogate escape")
	}
	return nil
}

// jsonLevel is an object or array that checkJSON is in.
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

// identifier checks a required (or optional) identifier field.
func (l Limits) identifier(name, v string, required bool) *apiError {
	switch {
	case v == "" && required:
		return badRequest(fmt.Sprintf("%s is required", name))
	case len(v) > l.MaxIdentifierLen:
		return badRequest(fmt.Sprintf("%s is longer than %d bytes", name, l.MaxIdentifierLen))
	}
	return nil
}

// pageSize is the page size a request gets: the default when it gives none,
// capped at the server's maximum.
func (l Limits) pageSize(limit *int) (int, *apiError) {
	switch {
	case limit == nil:
		return l.DefaultPageSize, nil
	case *limit < 1:
		return 0, badRequest("limit must be at least 1")
	case *limit > l.MaxPageSize:
		return l.MaxPageSize, nil
	}
	return *limit, nil
}
