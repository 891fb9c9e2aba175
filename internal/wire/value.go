package wire

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// PostgreSQL type OIDs with a typed JSON rendering.
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidOID         = 26
	oidJSON        = 114
	oidFloat4      = 700
	oidFloat8      = 701
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidNumeric     = 1700
	oidJSONB       = 3802
)

// Value renders the text output of a non-NULL value of type typeOID, produced
// under DateStyle ISO and TimeZone UTC.
func Value(typeOID uint32, s string) ([]byte, error) {
	return AppendValue(nil, typeOID, s)
}

// AppendValue appends what Value renders to b.
func AppendValue(b []byte, typeOID uint32, s string) ([]byte, error) {
	switch typeOID {
	case oidBool:
		switch s {
		case "t":
			return append(b, "true"...), nil
		case "f":
			return append(b, "false"...), nil
		}
		return nil, fmt.Errorf("malformed boolean")
	case oidInt2, oidInt4, oidInt8, oidOID, oidFloat4, oidFloat8, oidNumeric:
		if s == "-0" {
			// A float's negative zero: images are jsonb, whose numbers are
			// numerics, which have none (pull delivers 0; push stores 0).
			return append(b, '0'), nil
		}
		if isNumber(s) {
			return append(b, s...), nil
		}
		return AppendString(b, s), nil // NaN, Infinity
	case oidJSON, oidJSONB:
		if !Valid([]byte(s)) {
			return nil, fmt.Errorf("malformed json")
		}
		return append(b, s...), nil
	case oidTimestamptz, oidTimestamp:
		for _, layout := range []string{"2006-01-02 15:04:05.999999999-07", "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999"} {
			if t, err := time.Parse(layout, s); err == nil {
				return AppendString(b, t.UTC().Format(time.RFC3339Nano)), nil
			}
		}
		return AppendString(b, s), nil // infinity, BC dates
	case oidBytea:
		raw, err := hex.DecodeString(strings.TrimPrefix(s, `\x`))
		if err != nil {
			return nil, fmt.Errorf("malformed bytea")
		}
		return AppendString(b, base64.StdEncoding.EncodeToString(raw)), nil
	}
	return AppendString(b, s), nil
}

// isNumber reports whether s is a JSON number.
func isNumber(s string) bool {
	if PlainInteger(s) {
		return true
	}
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil
}

// PlainInteger reports whether s is an integer in JSON's form (a JSON number
// without fraction or exponent): digits, with no leading zero, after an
// optional minus sign.
func PlainInteger(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" || s[0] == '0' && len(s) > 1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// AppendString appends s as a JSON string, as encoding/json renders it.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // escapes, HTML characters, non-ASCII
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Row renders a row given as [[column, type oid, text or null], ...] (what
// synchro.row_text returns) as a JSON object in that column order.
func Row(cols []json.RawMessage) (json.RawMessage, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, raw := range cols {
		var parts [3]json.RawMessage
		var c struct {
			name string
			oid  uint32
			text *string
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return nil, fmt.Errorf("malformed row text: %w", err)
		}
		if err := errors.Join(json.Unmarshal(parts[0], &c.name), json.Unmarshal(parts[1], &c.oid), json.Unmarshal(parts[2], &c.text)); err != nil {
			return nil, fmt.Errorf("malformed row text: %w", err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(c.name)
		b.Write(name)
		b.WriteByte(':')
		if c.text == nil {
			b.WriteString("null")
			continue
		}
		v, err := Value(c.oid, *c.text)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c.name, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return json.RawMessage(b.String()), nil
}
