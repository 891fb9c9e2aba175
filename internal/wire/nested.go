package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
)

// encoding/json refuses JSON nested more than 10,000 deep (json.Valid,
// json.Unmarshal, and json.Marshal of a json.RawMessage), while PostgreSQL
// stores json and jsonb values nested as deep as its stack allows (beyond
// 10,000 levels with the default max_stack_depth). A row holding one is a valid
// row: capture renders, completes and passes on its image, and push answers it
// as server_row, with the functions below, which have no nesting limit. They
// try encoding/json first and walk tokens (json.Decoder.Token has no nesting
// limit) only when it refuses.

// Member is one member of a JSON object, its value as written.
type Member struct {
	Name  string
	Value json.RawMessage
}

var errNotObject = errors.New("not a JSON object")

// Valid reports whether b is one valid JSON value, however deeply nested.
func Valid(b []byte) bool {
	if json.Valid(b) {
		return true
	}
	dec := tokens(b)
	if _, _, err := skipValue(dec); err != nil {
		return false
	}
	_, err := dec.Token()
	return err == io.EOF
}

// Members returns the members of the JSON object b in name order, however
// deeply their values are nested.
func Members(b []byte) ([]Member, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err == nil {
		if m == nil {
			return nil, errNotObject
		}
		return SortedMembers(m), nil
	}
	dec := tokens(b)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errNotObject
	}
	byName := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		v, err := rawValue(dec, b)
		if err != nil {
			return nil, err
		}
		byName[name] = v // the last one, as encoding/json and jsonb take it
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errNotObject
	}
	return SortedMembers(byName), nil
}

// SortedMembers returns the members of m in name order (as json.Marshal
// writes a map).
func SortedMembers(m map[string]json.RawMessage) []Member {
	out := make([]Member, 0, len(m))
	for name, v := range m {
		out = append(out, Member{name, v})
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Elements returns the elements of the JSON array b, however deeply nested.
func Elements(b []byte) ([]json.RawMessage, error) {
	var out []json.RawMessage
	if err := json.Unmarshal(b, &out); err == nil && out != nil {
		return out, nil
	}
	dec := tokens(b)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, errors.New("not a JSON array")
	}
	out = []json.RawMessage{}
	for dec.More() {
		v, err := rawValue(dec, b)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("not a JSON array")
	}
	return out, nil
}

// AppendObject appends the object of members to b, names escaped as
// encoding/json escapes them, values as they are (they must be valid JSON).
func AppendObject(b []byte, members []Member) []byte {
	b = append(b, '{')
	for i, m := range members {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(AppendString(b, m.Name), ':')
		b = append(b, m.Value...)
	}
	return append(b, '}')
}

// rawValue reads the next value of dec, which reads b, and returns its text.
func rawValue(dec *json.Decoder, b []byte) (json.RawMessage, error) {
	// The offset is past the previous token: a name's separator, or an
	// element's comma, may still come before the value.
	from := dec.InputOffset()
	_, to, err := skipValue(dec)
	if err != nil {
		return nil, err
	}
	v := bytes.TrimLeft(b[from:to], " \t\r\n:,")
	return json.RawMessage(v), nil
}

// skipValue reads the next value of dec and returns where it starts and ends.
func skipValue(dec *json.Decoder) (from, to int64, err error) {
	from = dec.InputOffset()
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, 0, err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
		if depth == 0 {
			return from, dec.InputOffset(), nil
		}
	}
}

// tokens is a decoder of b that reads numbers as they are written (a float64
// would refuse 1e400).
func tokens(b []byte) *json.Decoder {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec
}
