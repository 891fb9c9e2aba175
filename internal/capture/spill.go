package capture

import (
	"errors"
	"fmt"
	"os"
)

// ErrSpill marks a failure to write or read a spill file: the worker's own
// trouble (a full or failing disk), not the transaction's, so it is no reason
// to quarantine the transaction.
var ErrSpill = errors.New("spill file")

// Spill is the temporary file of one large source transaction: the row data
// of its row events past the assembler's threshold, and later the images
// rendered from them, so that the worker's memory holds the metadata and key
// of such an event instead of its values. The file is unlinked as soon as it is
// created, so it disappears when it is closed or the process ends.
type Spill struct {
	f   *os.File
	end int64
}

// SpillRef locates one record in a spill file.
type SpillRef struct {
	Off int64
	Len int
}

func newSpill(dir string) (*Spill, error) {
	f, err := os.CreateTemp(dir, "synchro-txn-*")
	if err != nil {
		return nil, fmt.Errorf("%w: create: %v", ErrSpill, err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: unlink: %v", ErrSpill, err)
	}
	return &Spill{f: f}, nil
}

// Put appends b and returns where it is.
func (s *Spill) Put(b []byte) (SpillRef, error) {
	n, err := s.f.WriteAt(b, s.end)
	if err != nil {
		return SpillRef{}, fmt.Errorf("%w: write: %v", ErrSpill, err)
	}
	r := SpillRef{Off: s.end, Len: n}
	s.end += int64(n)
	return r, nil
}

// Size is how many bytes the file holds.
func (s *Spill) Size() int64 { return s.end }

// Get reads the record at r.
func (s *Spill) Get(r SpillRef) ([]byte, error) {
	b := make([]byte, r.Len)
	if _, err := s.f.ReadAt(b, r.Off); err != nil {
		return nil, fmt.Errorf("%w: read: %v", ErrSpill, err)
	}
	return b, nil
}

// Spill returns the transaction's spill file, or nil when it is held in memory.
func (t *Txn) Spill() *Spill { return t.spill }

// Release closes the transaction's spill file, if any; its spilled events can
// no longer be loaded.
func (t *Txn) Release() {
	if t.spill != nil {
		t.spill.f.Close()
		t.spill = nil
	}
}

// ForgetEvents lets go of the transaction's row events and fences once its
// applicable events are rendered; its positions, activations and spill file
// (where a spilled transaction's rendered images are) stay.
func (t *Txn) ForgetEvents() { t.Rows, t.Fences, t.block = nil, nil, nil }

// Load decodes every column of a row event into its Old and New (only its
// key columns were decoded), reading its message back from the spill file if
// it went there. A loaded event, or a truncate, is left as it is.
func (t *Txn) Load(ev *RowEvent) error {
	data := ev.msg
	if ev.spilled.Len > 0 {
		if t.spill == nil {
			return fmt.Errorf("%w: row event %d of a released transaction", ErrSpill, ev.Ordinal)
		}
		var err error
		if data, err = t.spill.Get(ev.spilled); err != nil {
			return err
		}
	}
	if data == nil {
		return nil
	}
	m, err := parseRow(data)
	if err != nil {
		return fmt.Errorf("decode row message again: %w", err)
	}
	if ev.Old, err = ev.Table.decode(m.old, true); err != nil {
		return err
	}
	if ev.New, err = ev.Table.decode(m.new, true); err != nil {
		return err
	}
	ev.msg, ev.spilled = nil, SpillRef{}
	return nil
}
