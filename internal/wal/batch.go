package wal

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/wire"
)

// batchTxn is one source transaction as synchro.materialize_transaction takes it
// (batchJSON); its applicable events are staged apart (eventRows).
type batchTxn struct {
	CommitLSN          pglogrepl.LSN
	EndLSN             pglogrepl.LSN
	Xid                uint32
	CommitTime         time.Time
	EventCount         int
	Applied            int // len(Events)
	RegistryGeneration int64
	Events             []batchEvent
	spill              *capture.Spill // the source transaction's spill file, where its images are when it has one
}

// batchJSON renders txns as synchro.materialize_transaction takes them:
// [{"commit_lsn","end_lsn","xid","commit_time","event_count","applied","registry_generation"}].
func batchJSON(txns []batchTxn) []byte {
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
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendLSN appends lsn in PostgreSQL's text form, as LSN.String has it.
func appendLSN(b []byte, lsn pglogrepl.LSN) []byte {
	return fmt.Appendf(b, "%X/%X", uint32(lsn>>32), uint32(lsn))
}

// batchEvent is one applicable row event; its image is empty for a delete.
type batchEvent struct {
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
	at     capture.SpillRef
}

// get returns the image, reading it back from spill when it was spilled.
func (s storedImage) get(spill *capture.Spill) (json.RawMessage, error) {
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
	txns   []batchTxn
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

// rowImages holds the latest image of each row among the transactions of one
// batch, so that a partial image (unchanged TOAST values left out) completes over
// the row's earlier image in the batch: materialization completes a partial image
// only over the projection as it was before the batch (or segment).
type rowImages map[rowID]rowImage

type rowID struct {
	rel int64
	key string
}

// rowImage is a row's image; partial when it still lacks unchanged TOAST values
// (no earlier image of the row in the batch was complete).
type rowImage struct {
	img     storedImage
	spill   *capture.Spill // where img is when it was spilled
	partial bool
}

// batchImages returns an empty rowImages for a batch that has partial images,
// and nil (nothing to keep: no image needs an earlier one) for any other.
func batchImages(txns []*capture.Txn) rowImages {
	for _, t := range txns {
		if t.Unchanged {
			return rowImages{}
		}
	}
	return nil
}

// overlay returns base with the fields of top set over it, in name order. A
// value may be nested deeper than encoding/json allows (package wire).
func overlay(base, top json.RawMessage) (json.RawMessage, error) {
	fields, err := wire.Members(base)
	if err != nil {
		return nil, err
	}
	over, err := wire.Members(top)
	if err != nil {
		return nil, err
	}
	for _, m := range over {
		if i, found := slices.BinarySearchFunc(fields, m.Name, func(f wire.Member, name string) int { return strings.Compare(f.Name, name) }); found {
			fields[i].Value = m.Value
		} else {
			fields = slices.Insert(fields, i, m)
		}
	}
	return wire.AppendObject(nil, fields), nil
}

// prepare selects the registry generation of every row event, reconciles events
// with fences and renders the applicable events, completing partial images over
// last (the batch's rows so far, updated here; nil when the batch has no
// partial image). A spilled transaction's images are written back to its
// spill file. A prepared transaction lets go of its row events and fences: only
// its images and positions are needed while it is materialized. A transaction
// that cannot be prepared is a poison transaction: the error is a
// *capture.Failure (any other error is the worker's own).
func prepare(txn *capture.Txn, reg *registry, active int64, last rowImages) (batchTxn, error) {
	out := batchTxn{
		CommitLSN: txn.CommitLSN, EndLSN: txn.EndLSN, Xid: txn.Xid,
		CommitTime: txn.CommitTime, EventCount: len(txn.Rows), RegistryGeneration: active,
		spill: txn.Spill(),
	}
	for _, a := range txn.Activations {
		if a.Generation > reg.latest {
			return out, &capture.Failure{Class: capture.ClassRegistry, Detail: fmt.Sprintf("registry generation %d is not durable", a.Generation)}
		}
		out.RegistryGeneration = max(out.RegistryGeneration, a.Generation)
	}
	pairs, err := capture.Pair(txn, reg.resolver(active, txn))
	if err != nil {
		return out, err
	}
	out.Events = make([]batchEvent, 0, len(pairs))
	for i := range pairs {
		ev, err := prepareEvent(txn, reg, &pairs[i], last)
		if err != nil {
			return out, err
		}
		out.Events = append(out.Events, ev)
	}
	out.Applied = len(out.Events)
	txn.ForgetEvents()
	return out, nil
}

// prepareEvent renders one paired row event. Its decoded values are let go
// once they are in its image, so that a large transaction is not held twice
// (its quarantine needs only positions).
func prepareEvent(txn *capture.Txn, reg *registry, p *capture.Paired, last rowImages) (batchEvent, error) {
	r, _ := reg.byID(p.Reg.RelationID)
	ev := batchEvent{Ordinal: p.Event.Ordinal, RelationID: p.Reg.RelationID, Key: p.Key, Op: p.Event.Op,
		Version: p.Fence.Version}
	var ok bool
	if ev.FenceID, ok = fenceUUID(p.Fence.FenceID); !ok {
		return ev, &capture.Failure{Class: capture.ClassFenceMalformed, RelationID: p.Reg.RelationID, Detail: "fence_id is not a UUID"}
	}
	if err := txn.Load(p.Event); err != nil {
		return ev, err
	}
	defer func() { p.Event.Old, p.Event.New = nil, nil }()
	if err := checkColumns(p.Event, r); err != nil {
		return ev, err
	}
	id := rowID{p.Reg.RelationID, p.Key}
	if p.Event.Op == "delete" {
		delete(last, id)
		return ev, nil
	}
	img, partial, err := image(p.Event.New, r.Columns)
	if err != nil {
		return ev, &capture.Failure{Class: capture.ClassDecode, RelationID: p.Reg.RelationID, Detail: err.Error()}
	}
	// The merged image stays partial when the earlier one was partial too.
	if prev, ok := last[id]; ok && partial {
		base, err := prev.img.get(prev.spill)
		if err != nil {
			return ev, err
		}
		if img, err = overlay(base, img); err != nil {
			return ev, &capture.Failure{Class: capture.ClassDecode, RelationID: p.Reg.RelationID, Detail: "image is not an object"}
		}
		partial = prev.partial
	}
	ev.Image, ev.Partial = storedImage{inline: img}, partial
	if sp := txn.Spill(); sp != nil {
		if ev.Image.at, err = sp.Put(img); err != nil {
			return ev, err
		}
		ev.Image.inline = nil
	}
	if last != nil {
		last[id] = rowImage{ev.Image, txn.Spill(), partial}
	}
	return ev, nil
}

// checkColumns reports relation drift: a registered column renamed or dropped
// would silently leave every later image, and one of another type would
// change its values' type on the wire. A delete decodes the key alone.
func checkColumns(ev *capture.RowEvent, r registration) error {
	for col, typ := range r.Columns {
		c, ok := ev.Value(col)
		if !ok && ev.Op != "delete" {
			return &capture.Failure{Class: capture.ClassRelationDrift, RelationID: r.RelationID,
				Detail: "a registered column is missing from the decoded relation"}
		}
		if ok && c.TypeOID != typ {
			return &capture.Failure{Class: capture.ClassRelationDrift, RelationID: r.RelationID,
				Detail: "a registered column has another type in the decoded relation"}
		}
	}
	return nil
}

// fenceUUID decodes a fence ID, which ParseFence checked is a UUID in
// canonical text form.
func fenceUUID(id string) (pgtype.UUID, bool) {
	u := pgtype.UUID{Valid: true}
	n := 0
	for i := 0; i < len(id); i++ {
		if id[i] == '-' {
			continue
		}
		d, ok := hexDigit(id[i])
		if !ok || n == 32 {
			return u, false
		}
		u.Bytes[n/2] |= d << (4 * (1 - n%2))
		n++
	}
	return u, n == 32
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
