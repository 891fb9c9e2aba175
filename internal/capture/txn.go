package capture

import (
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

// Column is one value of a decoded tuple, in pgoutput's text format.
type Column struct {
	Name      string
	TypeOID   uint32
	Null      bool
	Unchanged bool // an unchanged TOASTed value: not sent
	Text      string
}

// RowEvent is one decoded row change (or truncate) of a source transaction.
type RowEvent struct {
	Ordinal   int    // event_ordinal: position among the transaction's row events, before filtering
	Op        string // insert, update, delete or truncate
	Relation  Relation
	Old       []Column // key or old tuple, when pgoutput sent one
	New       []Column
	Truncated []Relation // truncate only: every truncated relation
	// ReplicaIdentity and KeyColumns are what the relation message said:
	// registered relations must have 'd' (DEFAULT) and exactly their key column.
	ReplicaIdentity byte
	KeyColumns      []string
	// spilled is set while the event's values are in its transaction's spill
	// file: Old and New then hold its key columns only (Txn.Load).
	spilled *spilledRow
}

// Value returns the named column of the tuple (New, else Old) and whether it exists.
func (e RowEvent) Value(name string) (Column, bool) {
	for _, tuple := range [][]Column{e.New, e.Old} {
		for _, c := range tuple {
			if c.Name == name {
				return c, true
			}
		}
	}
	return Column{}, false
}

// OldValue returns the named column of the old tuple or key.
func (e RowEvent) OldValue(name string) (Column, bool) {
	for _, c := range e.Old {
		if c.Name == name {
			return c, true
		}
	}
	return Column{}, false
}

// FenceAt is a fence message with its place among the row events: Before row
// events were decoded ahead of it.
type FenceAt struct {
	Fence
	Before int
}

// ActivationAt is a registry activation message; row events with an ordinal
// below Before precede it in source order and use the prior generation.
type ActivationAt struct {
	RegistryActivation
	Before int
}

// Txn is one committed source transaction, buffered whole.
type Txn struct {
	Xid         uint32
	CommitLSN   pglogrepl.LSN
	EndLSN      pglogrepl.LSN
	CommitTime  time.Time
	Rows        []RowEvent
	Fences      []FenceAt
	Activations []ActivationAt
	// Malformed holds the first fence or registry message that did not parse;
	// the transaction is then a poison transaction.
	Malformed error

	size  int64  // bytes of row data decoded so far
	spill *Spill // row data past the assembler's threshold, nil when none
}

// Assembler turns a stream of pgoutput (protocol 1, messages on) messages into
// whole committed transactions.
type Assembler struct {
	relations map[uint32]*pglogrepl.RelationMessage
	cur       *Txn
	spillAt   int64  // 0: never spill
	spillDir  string // "": the system's temporary directory
}

// NewAssembler returns an empty assembler.
func NewAssembler() *Assembler {
	return &Assembler{relations: map[uint32]*pglogrepl.RelationMessage{}}
}

// SpillAbove makes every transaction keep the values of its row events in a
// file in dir ("": the system's temporary directory) once its decoded row data
// passes n bytes (Txn.Spill); 0 never spills.
func (a *Assembler) SpillAbove(n int64, dir string) { a.spillAt, a.spillDir = n, dir }

// Open returns the transaction being assembled (BEGIN seen, COMMIT not yet), or nil.
func (a *Assembler) Open() *Txn { return a.cur }

// Reset drops a partly assembled transaction (the stream restarts before it).
func (a *Assembler) Reset() {
	if a.cur != nil {
		a.cur.Release()
	}
	a.cur = nil
}

// Feed decodes one pgoutput message. It returns the transaction when the
// message is its COMMIT, else nil. A decode error is a blocking failure.
func (a *Assembler) Feed(data []byte) (*Txn, error) {
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("decode pgoutput message: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		if a.cur != nil {
			return nil, fmt.Errorf("decode: BEGIN inside an open transaction")
		}
		a.cur = &Txn{Xid: m.Xid, CommitLSN: m.FinalLSN, CommitTime: m.CommitTime}
		return nil, nil
	case *pglogrepl.RelationMessage:
		a.relations[m.RelationID] = m
		return nil, nil
	case *pglogrepl.TypeMessage, *pglogrepl.OriginMessage:
		return nil, nil
	}
	if a.cur == nil {
		if lm, ok := msg.(*pglogrepl.LogicalDecodingMessage); ok && !lm.Transactional {
			return nil, nil // non-transactional messages carry nothing Synchro emits
		}
		return nil, fmt.Errorf("decode: %T outside a transaction", msg)
	}
	t := a.cur
	switch m := msg.(type) {
	case *pglogrepl.CommitMessage:
		if m.CommitLSN != t.CommitLSN {
			return nil, fmt.Errorf("decode: COMMIT LSN %s differs from BEGIN final LSN %s", m.CommitLSN, t.CommitLSN)
		}
		t.EndLSN = m.TransactionEndLSN
		a.cur = nil
		return t, nil
	case *pglogrepl.InsertMessage:
		return nil, a.row(t, data, "insert", m.RelationID, nil, m.Tuple)
	case *pglogrepl.UpdateMessage:
		return nil, a.row(t, data, "update", m.RelationID, m.OldTuple, m.NewTuple)
	case *pglogrepl.DeleteMessage:
		return nil, a.row(t, data, "delete", m.RelationID, m.OldTuple, nil)
	case *pglogrepl.TruncateMessage:
		ev := RowEvent{Ordinal: len(t.Rows), Op: "truncate"}
		for _, id := range m.RelationIDs {
			rel, ok := a.relations[id]
			if !ok {
				return nil, fmt.Errorf("decode: truncate of relation %d without a relation message", id)
			}
			ev.Truncated = append(ev.Truncated, relationOf(rel))
		}
		t.Rows = append(t.Rows, ev)
		return nil, nil
	case *pglogrepl.LogicalDecodingMessage:
		a.message(t, m)
		return nil, nil
	default:
		return nil, fmt.Errorf("decode: unexpected message %T", msg)
	}
}

func (a *Assembler) message(t *Txn, m *pglogrepl.LogicalDecodingMessage) {
	switch m.Prefix {
	case FencePrefix:
		f, err := ParseFence(m.Content)
		if err != nil && t.Malformed == nil {
			t.Malformed = err
		}
		if err == nil {
			t.Fences = append(t.Fences, FenceAt{Fence: f, Before: len(t.Rows)})
		}
	case RegistryPrefix:
		act, err := ParseRegistryActivation(m.Content)
		if err != nil && t.Malformed == nil {
			t.Malformed = err
		}
		if err == nil {
			t.Activations = append(t.Activations, ActivationAt{RegistryActivation: act, Before: len(t.Rows)})
		}
	}
}

// row decodes a row event. Once the transaction's row data passes the spill
// threshold, the event's message goes to the spill file and only its key
// columns (what pairing needs) stay in memory.
func (a *Assembler) row(t *Txn, data []byte, op string, relID uint32, old, new *pglogrepl.TupleData) error {
	rel, ok := a.relations[relID]
	if !ok {
		return fmt.Errorf("decode: %s on relation %d without a relation message", op, relID)
	}
	ev := RowEvent{Ordinal: len(t.Rows), Op: op, Relation: relationOf(rel), ReplicaIdentity: rel.ReplicaIdentity}
	for _, c := range rel.Columns {
		if c.Flags&1 != 0 {
			ev.KeyColumns = append(ev.KeyColumns, c.Name)
		}
	}
	var err error
	if ev.Old, err = columns(rel, old); err != nil {
		return err
	}
	if ev.New, err = columns(rel, new); err != nil {
		return err
	}
	t.size += int64(len(data))
	if a.spillAt > 0 && t.size > a.spillAt {
		if t.spill == nil {
			if t.spill, err = newSpill(a.spillDir); err != nil {
				return err
			}
		}
		at, err := t.spill.Put(data)
		if err != nil {
			return err
		}
		ev.spilled = &spilledRow{rel: rel, at: at}
		ev.Old, ev.New = keyOnly(ev.Old, ev.KeyColumns), keyOnly(ev.New, ev.KeyColumns)
	}
	t.Rows = append(t.Rows, ev)
	return nil
}

func relationOf(rel *pglogrepl.RelationMessage) Relation {
	return Relation{Schema: rel.Namespace, Name: rel.RelationName, OID: rel.RelationID}
}

func columns(rel *pglogrepl.RelationMessage, tuple *pglogrepl.TupleData) ([]Column, error) {
	if tuple == nil {
		return nil, nil
	}
	if len(tuple.Columns) != len(rel.Columns) {
		return nil, fmt.Errorf("decode: tuple of %s.%s has %d columns, relation message %d",
			rel.Namespace, rel.RelationName, len(tuple.Columns), len(rel.Columns))
	}
	out := make([]Column, 0, len(tuple.Columns))
	for i, c := range tuple.Columns {
		rc := rel.Columns[i]
		col := Column{Name: rc.Name, TypeOID: rc.DataType}
		switch c.DataType {
		case 'n':
			col.Null = true
		case 'u':
			col.Unchanged = true
		case 't':
			col.Text = string(c.Data)
		default:
			return nil, fmt.Errorf("decode: unsupported tuple data kind %q", c.DataType)
		}
		out = append(out, col)
	}
	return out, nil
}
