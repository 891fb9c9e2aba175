package wal

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/wire"
)

// image renders the registered columns of a decoded tuple as a JSON object of
// wire values (package wire). partial is true when an unchanged TOAST value was left out.
// The replication session runs with DateStyle ISO and TimeZone UTC.
func image(cols []capture.Column, registered map[string]uint32) (img json.RawMessage, partial bool, err error) {
	var b strings.Builder
	b.WriteByte('{')
	first := true
	for _, c := range cols {
		if _, ok := registered[c.Name]; !ok {
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
	return wire.Value(c.TypeOID, c.Text)
}
