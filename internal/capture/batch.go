package capture

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"
)

// The Go side of the materialization contract (sql/functions
// materialize_transaction.sql and materialize_scratch.sql): the batch JSON that
// synchro.materialize_transaction reads with jsonb_to_recordset (batchJSON) and
// the columns of the scratch table synchro_seg_event that the events are
// copied into (eventColumns). TestMaterializeContract compares both with the
// installed functions.

// Prepared is one source transaction as synchro.materialize_transaction takes it
// (batchJSON); its applicable events are staged apart (eventRows).
type Prepared struct {
	CommitLSN          pglogrepl.LSN
	EndLSN             pglogrepl.LSN
	Xid                uint32
	CommitTime         time.Time
	EventCount         int
	Applied            int // len(Events)
	RegistryGeneration int64
	// Bootstrap is the bootstrap activated right after this transaction (its
	// barrier; "" for none).
	Bootstrap string
	Events    []stagedEvent
	spill     *Spill // the source transaction's spill file, where its images are when it has one
}

// batchJSON renders txns as synchro.materialize_transaction takes them:
// [{"commit_lsn","end_lsn","xid","commit_time","event_count","applied","registry_generation","bootstrap"}].
func batchJSON(txns []Prepared) []byte {
	b := append(make([]byte, 0, 200*len(txns)), '[')
	for i, t := range txns {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendLSN(append(b, `{"commit_lsn":"`...), t.CommitLSN)
		b = appendLSN(append(b, `","end_lsn":"`...), t.EndLSN)
		b = strconv.AppendUint(append(b, `","xid":`...), uint64(t.Xid), 10)
		b = t.CommitTime.AppendFormat(append(b, `,"commit_time":"`...), time.RFC3339Nano)
		b = strconv.AppendInt(append(b, `","event_count":`...), int64(t.EventCount), 10)
		b = strconv.AppendInt(append(b, `,"applied":`...), int64(t.Applied), 10)
		b = strconv.AppendInt(append(b, `,"registry_generation":`...), t.RegistryGeneration, 10)
		if t.Bootstrap == "" {
			b = append(b, `,"bootstrap":null}`...)
		} else {
			b = append(append(append(b, `,"bootstrap":"`...), t.Bootstrap...), `"}`...)
		}
	}
	return append(b, ']')
}

// appendLSN appends lsn in PostgreSQL's text form, as LSN.String has it.
func appendLSN(b []byte, lsn pglogrepl.LSN) []byte {
	return fmt.Appendf(b, "%X/%X", uint32(lsn>>32), uint32(lsn))
}

// stagedEvent is one applicable row event; its image is empty for a delete.
type stagedEvent struct {
	Ordinal    int
	RelationID int64
	Key        string
	Op         string
	Image      storedImage
	Partial    bool
	FenceID    pgtype.UUID
	Version    string
}

// storedImage is an image held in memory, or (an event of a spilled
// transaction) written to its transaction's spill file.
type storedImage struct {
	inline json.RawMessage
	at     SpillRef
}

// get returns the image, reading it back from spill when it was spilled.
func (s storedImage) get(spill *Spill) (json.RawMessage, error) {
	if s.at.Len == 0 {
		return s.inline, nil
	}
	return spill.Get(s.at)
}

// eventColumns are the columns of the scratch table synchro_seg_event that a
// batch's events are copied into, in the order of eventRows.Values.
var eventColumns = []string{"seq", "commit_lsn", "o", "r", "k", "op", "img", "partial", "f", "v"}

// eventRows is the pgx.CopyFromSource of a batch's events: seq is the
// transaction's place in the batch from 1.
type eventRows struct {
	txns   []Prepared
	t, e   int     // the current row is txns[t].Events[e-1]
	values [10]any // the current row's, reused: pgx encodes a row before it asks for the next
}

func (r *eventRows) Next() bool {
	for r.t < len(r.txns) {
		if r.e < len(r.txns[r.t].Events) {
			r.e++
			return true
		}
		r.t, r.e = r.t+1, 0
	}
	return false
}

func (r *eventRows) Values() ([]any, error) {
	t := &r.txns[r.t]
	ev := &t.Events[r.e-1]
	img, err := ev.Image.get(t.spill)
	if err != nil {
		return nil, err
	}
	// pgx has no pg_lsn type, and an int8 is sent as pg_lsn's binary form.
	r.values = [10]any{r.t + 1, int64(t.CommitLSN), ev.Ordinal, ev.RelationID, ev.Key, ev.Op, img, ev.Partial, ev.FenceID, ev.Version}
	return r.values[:], nil
}

func (r *eventRows) Err() error { return nil }
