package capture

import (
	"bytes"
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
// It keeps its row message, in memory or in its transaction's spill file, and
// only its key columns decoded until Txn.Load decodes them all.
type RowEvent struct {
	Ordinal int    // event_ordinal: position among the transaction's row events, before filtering
	Op      string // insert, update, delete or truncate
	*Table         // the relation as its relation message described it; empty for a truncate
	// Old and New are the key or old tuple, when pgoutput sent one, and the new
	// tuple: their key columns until loaded.
	Old, New  []Column
	Truncated []Relation // truncate only: every truncated relation
	msg       []byte     // the row message while it is held in memory and not loaded
	spilled   SpillRef   // where the row message is in the spill file (Len 0: not there, or loaded)
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
	Fences      []Fence
	Activations []ActivationAt
	// Barrier is the reset id a stream reset's barrier message in the
	// transaction names ("" when none): a reset's staged catch-up ends with it.
	Barrier string
	// Malformed holds the first fence or registry message that did not parse;
	// the transaction is then a poison transaction.
	Malformed error
	// Unchanged is set when a row event's new tuple leaves out an unchanged
	// TOASTed value.
	Unchanged bool

	size  int64  // bytes of row data decoded so far
	spill *Spill // row data past the assembler's threshold, nil when none
	block []byte // where row messages held in memory are copied to (Txn.keep)
}

// Assembler turns a stream of pgoutput (protocol 1, messages on) messages into
// whole committed transactions.
type Assembler struct {
	relations map[uint32]*Table
	target    *FenceTarget // of the last fence, which the next one shares when it can
	cur       *Txn
	spillAt   int64  // 0: never spill
	spillDir  string // "": the system's temporary directory
}

// NewAssembler returns an empty assembler.
func NewAssembler() *Assembler {
	return &Assembler{relations: map[uint32]*Table{}}
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
	if op := rowOp(firstByte(data)); op != "" {
		if a.cur == nil {
			return nil, fmt.Errorf("decode: %s outside a transaction", op)
		}
		return nil, a.row(a.cur, data, op)
	}
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
		a.relations[m.RelationID] = newTable(m)
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
	case *pglogrepl.TruncateMessage:
		ev := RowEvent{Ordinal: len(t.Rows), Op: "truncate", Table: &Table{}}
		for _, id := range m.RelationIDs {
			rel, ok := a.relations[id]
			if !ok {
				return nil, fmt.Errorf("decode: truncate of relation %d without a relation message", id)
			}
			ev.Truncated = append(ev.Truncated, rel.Relation)
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
		f, err := parseFence(m.Content, a.target)
		if err != nil && t.Malformed == nil {
			t.Malformed = err
		}
		if err == nil {
			t.Fences = append(t.Fences, f)
			a.target = f.FenceTarget
		}
	case BarrierPrefix:
		t.Barrier = string(m.Content)
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

// firstByte returns a message's type byte, 0 for an empty message.
func firstByte(data []byte) byte {
	if len(data) == 0 {
		return 0
	}
	return data[0]
}

// row decodes a row event: its key columns, and it keeps its message. Once
// the transaction's row data passes the spill threshold, the message goes to
// the spill file instead of memory.
func (a *Assembler) row(t *Txn, data []byte, op string) error {
	m, err := parseRow(data)
	if err != nil {
		return err
	}
	table, ok := a.relations[m.relationID]
	if !ok {
		return fmt.Errorf("decode: %s on relation %d without a relation message", op, m.relationID)
	}
	ev := RowEvent{Ordinal: len(t.Rows), Op: op, Table: table}
	if ev.Old, err = table.decode(m.old, false); err != nil {
		return err
	}
	if ev.New, err = table.decode(m.new, false); err != nil {
		return err
	}
	t.Unchanged = t.Unchanged || m.unchanged
	t.size += int64(len(data))
	if a.spillAt == 0 || t.size <= a.spillAt {
		ev.msg = t.keep(data)
	} else {
		if t.spill == nil {
			if t.spill, err = newSpill(a.spillDir); err != nil {
				return err
			}
		}
		if ev.spilled, err = t.spill.Put(data); err != nil {
			return err
		}
	}
	t.Rows = append(t.Rows, ev)
	return nil
}

// blockSize is the largest block that row messages held in memory are copied
// to; a message larger than a quarter of it gets one of its own.
const blockSize = 64 << 10

// keep returns a copy of a row message that the transaction holds in memory.
// Copies share blocks, so that a narrow row costs its size and no allocation;
// a transaction's first block fits its first message, and each next one is
// twice as large as the one before, up to blockSize.
func (t *Txn) keep(data []byte) []byte {
	if len(data) > blockSize/4 {
		return bytes.Clone(data)
	}
	if len(data) > cap(t.block)-len(t.block) {
		t.block = make([]byte, 0, min(blockSize, max(2*cap(t.block), len(data))))
	}
	t.block = append(t.block, data...)
	return t.block[len(t.block)-len(data) : len(t.block) : len(t.block)]
}
