package wal

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/synchro-sync/synchro/internal/capture"
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

// image renders the registered columns of a decoded tuple as a JSON object with
// typed values (numbers, booleans, JSON, RFC 3339 UTC timestamps, base64 bytes,
// else strings). partial is true when an unchanged TOAST value was left out.
// The replication session runs with DateStyle ISO and TimeZone UTC.
func image(cols []capture.Column, registered map[string]bool) (img json.RawMessage, partial bool, err error) {
	var b strings.Builder
	b.WriteByte('{')
	first := true
	for _, c := range cols {
		if !registered[c.Name] {
			continue
		}
		if c.Unchanged {
			partial = true
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		name, _ := json.Marshal(c.Name)
		b.Write(name)
		b.WriteByte(':')
		v, err := value(c)
		if err != nil {
			return nil, false, fmt.Errorf("column %q: %w", c.Name, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return json.RawMessage(b.String()), partial, nil
}

func value(c capture.Column) ([]byte, error) {
	if c.Null {
		return []byte("null"), nil
	}
	s := c.Text
	switch c.TypeOID {
	case oidBool:
		switch s {
		case "t":
			return []byte("true"), nil
		case "f":
			return []byte("false"), nil
		}
		return nil, fmt.Errorf("malformed boolean")
	case oidInt2, oidInt4, oidInt8, oidOID, oidFloat4, oidFloat8, oidNumeric:
		var n json.Number
		if err := json.Unmarshal([]byte(s), &n); err == nil {
			return []byte(s), nil
		}
		return json.Marshal(s) // NaN, Infinity
	case oidJSON, oidJSONB:
		if !json.Valid([]byte(s)) {
			return nil, fmt.Errorf("malformed json")
		}
		return []byte(s), nil
	case oidTimestamptz, oidTimestamp:
		for _, layout := range []string{"2006-01-02 15:04:05.999999999-07", "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999"} {
			if t, err := time.Parse(layout, s); err == nil {
				return json.Marshal(t.UTC().Format(time.RFC3339Nano))
			}
		}
		return json.Marshal(s) // infinity, BC dates
	case oidBytea:
		raw, err := hex.DecodeString(strings.TrimPrefix(s, `\x`))
		if err != nil {
			return nil, fmt.Errorf("malformed bytea")
		}
		return json.Marshal(base64.StdEncoding.EncodeToString(raw))
	}
	return json.Marshal(s)
}
