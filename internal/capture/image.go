package capture

import (
	"encoding/json"
	"fmt"

	"github.com/synchro-sync/synchro/internal/wire"
)

// image renders the registered columns of a decoded tuple as a JSON object of
// wire values (package wire). partial is true when an unchanged TOAST value was left out.
// The replication session runs with DateStyle ISO and TimeZone UTC.
func image(cols []Column, registered map[string]uint32) (img json.RawMessage, partial bool, err error) {
	size := 2
	for _, c := range cols {
		if _, ok := registered[c.Name]; ok {
			size += len(c.Name) + len(c.Text) + 8
		}
	}
	// Sized for values without escapes, so that a large value is not copied
	// again as the buffer grows; the buffer is the image.
	b := make([]byte, 0, size)
	b = append(b, '{')
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
			b = append(b, ',')
		}
		first = false
		b = append(wire.AppendString(b, c.Name), ':')
		if b, err = appendValue(b, c); err != nil {
			return nil, false, fmt.Errorf("column %q: %w", c.Name, err)
		}
	}
	b = append(b, '}')
	return json.RawMessage(b), partial, nil
}

// Image renders the registered columns of a whole row (text values in the
// walsender's output settings, none left out) as a decoded tuple's image: a
// stream reset's baseline renders the rows it copies with it, so that one row
// state has one image whichever path produced it.
func Image(cols []Column, registered map[string]uint32) (json.RawMessage, error) {
	img, _, err := image(cols, registered)
	return img, err
}

func appendValue(b []byte, c Column) ([]byte, error) {
	if c.Null {
		return append(b, "null"...), nil
	}
	return wire.AppendValue(b, c.TypeOID, c.Text)
}
