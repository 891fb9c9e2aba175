package capture

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// Row messages (pgoutput protocol 1: Insert 'I', Update 'U', Delete 'D') are
// read here rather than by pglogrepl.Parse, which allocates several objects
// per column. A transaction keeps each row message as it came and decodes its
// key columns when it arrives and every column when the event is loaded
// (Txn.Load).

// rowOp returns the operation of a row message type, or "" for another message.
func rowOp(msgType byte) string {
	switch msgType {
	case 'I':
		return "insert"
	case 'U':
		return "update"
	case 'D':
		return "delete"
	}
	return ""
}

// Table is a relation as the relation message a row event was decoded under
// describes it.
type Table struct {
	Relation Relation
	// ReplicaIdentity and KeyColumns are what the relation message said:
	// registered relations must have 'd' (DEFAULT) and exactly their key column.
	ReplicaIdentity byte
	KeyColumns      []string
	columns         []*pglogrepl.RelationMessageColumn
	key             []bool // which columns are key columns
}

func newTable(m *pglogrepl.RelationMessage) *Table {
	t := &Table{Relation: relationOf(m), ReplicaIdentity: m.ReplicaIdentity, columns: m.Columns, key: make([]bool, len(m.Columns))}
	for i, c := range m.Columns {
		if c.Flags&1 != 0 {
			t.KeyColumns = append(t.KeyColumns, c.Name)
			t.key[i] = true
		}
	}
	return t
}

func relationOf(rel *pglogrepl.RelationMessage) Relation {
	return Relation{Schema: rel.Namespace, Name: rel.RelationName, OID: rel.RelationID}
}

// rowMessage is a row message split into its parts; the tuples are still
// encoded (TupleData).
type rowMessage struct {
	relationID uint32
	old        []byte // key or old row; nil when none was sent
	new        []byte // nil for a delete
	unchanged  bool   // new leaves out an unchanged TOASTed value
}

var errTruncated = errors.New("decode pgoutput message: row message truncated")

// parseRow splits a row message and checks that its tuples are well formed.
func parseRow(data []byte) (rowMessage, error) {
	var m rowMessage
	if len(data) < 6 {
		return m, errTruncated
	}
	m.relationID = binary.BigEndian.Uint32(data[1:])
	rest := data[5:]
	hasOld := rest[0] == 'K' || rest[0] == 'O'
	var err error
	switch {
	case data[0] == 'D' && !hasOld:
		return m, fmt.Errorf("decode pgoutput message: delete without a key or old tuple")
	case hasOld && data[0] != 'I':
		if m.old, rest, _, err = splitTuple(rest[1:]); err != nil {
			return m, err
		}
	}
	if data[0] != 'D' {
		if len(rest) == 0 || rest[0] != 'N' {
			return m, fmt.Errorf("decode pgoutput message: row message without a new tuple")
		}
		if m.new, _, m.unchanged, err = splitTuple(rest[1:]); err != nil {
			return m, err
		}
	}
	return m, nil
}

// splitTuple returns the TupleData at the start of b, what follows it, and
// whether it holds an unchanged TOASTed value.
func splitTuple(b []byte) (tuple, rest []byte, unchanged bool, err error) {
	if len(b) < 2 {
		return nil, nil, false, errTruncated
	}
	p := 2
	for range binary.BigEndian.Uint16(b) {
		if p >= len(b) {
			return nil, nil, false, errTruncated
		}
		kind := b[p]
		p++
		switch kind {
		case 'n':
		case 'u':
			unchanged = true
		case 't':
			if len(b)-p < 4 || len(b)-p-4 < int(binary.BigEndian.Uint32(b[p:])) {
				return nil, nil, false, errTruncated
			}
			p += 4 + int(binary.BigEndian.Uint32(b[p:]))
		default:
			return nil, nil, false, fmt.Errorf("decode: unsupported tuple data kind %q", kind)
		}
	}
	return b[:p], b[p:], unchanged, nil
}

// decode decodes a tuple that splitTuple accepted (so every kind is n, u or
// t): its key columns, or with all every column.
func (t *Table) decode(tuple []byte, all bool) ([]Column, error) {
	if tuple == nil {
		return nil, nil
	}
	if n := int(binary.BigEndian.Uint16(tuple)); n != len(t.columns) {
		return nil, fmt.Errorf("decode: tuple of %s.%s has %d columns, relation message %d",
			t.Relation.Schema, t.Relation.Name, n, len(t.columns))
	}
	size := len(t.KeyColumns)
	if all {
		size = len(t.columns)
	}
	out := make([]Column, 0, size)
	p := 2
	for i, rc := range t.columns {
		kind := tuple[p]
		p++
		var text []byte
		if kind == 't' {
			n := int(binary.BigEndian.Uint32(tuple[p:]))
			text = tuple[p+4 : p+4+n]
			p += 4 + n
		}
		if all || t.key[i] {
			out = append(out, Column{Name: rc.Name, TypeOID: rc.DataType, Null: kind == 'n', Unchanged: kind == 'u', Text: string(text)})
		}
	}
	return out, nil
}
