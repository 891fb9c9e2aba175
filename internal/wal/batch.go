package wal

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/synchro-sync/synchro/internal/capture"
)

// batchTxn is one source transaction as synchro.materialize_transaction takes it;
// its applicable events are staged apart (eventRows).
type batchTxn struct {
	CommitLSN          string       `json:"commit_lsn"`
	EndLSN             string       `json:"end_lsn"`
	Xid                uint32       `json:"xid"`
	CommitTime         time.Time    `json:"commit_time"`
	EventCount         int          `json:"event_count"`
	Applied            int          `json:"applied"` // len(Events)
	RegistryGeneration int64        `json:"registry_generation"`
	Events             []batchEvent `json:"-"`
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
	spill  *capture.Spill
	at     capture.SpillRef
}

// get returns the image, reading it back when it was spilled.
func (s storedImage) get() (json.RawMessage, error) {
	if s.spill == nil {
		return s.inline, nil
	}
	return s.spill.Get(s.at)
}

// eventColumns are the columns of the scratch table synchro_seg_event that a
// batch's events are copied into, in the order of eventRows.Values.
var eventColumns = []string{"seq", "commit_lsn", "o", "r", "k", "op", "img", "partial", "f", "v"}

// eventRows is the pgx.CopyFromSource of a batch's events: seq is the
// transaction's place in the batch from 1.
type eventRows struct {
	txns   []batchTxn
	t, e   int   // the current row is txns[t].Events[e-1]
	commit int64 // txns[t].CommitLSN: pgx has no pg_lsn type, and an int8 is sent as pg_lsn's binary form
	err    error
}

func (r *eventRows) Next() bool {
	for r.t < len(r.txns) {
		if r.e < len(r.txns[r.t].Events) {
			if r.e == 0 {
				lsn, err := pglogrepl.ParseLSN(r.txns[r.t].CommitLSN)
				if err != nil {
					r.err = err
					return false
				}
				r.commit = int64(lsn)
			}
			r.e++
			return true
		}
		r.t, r.e = r.t+1, 0
	}
	return false
}

func (r *eventRows) Values() ([]any, error) {
	ev := &r.txns[r.t].Events[r.e-1]
	img, err := ev.Image.get()
	if err != nil {
		return nil, err
	}
	return []any{r.t + 1, r.commit, ev.Ordinal, ev.RelationID, ev.Key, ev.Op, img, ev.Partial, ev.FenceID, ev.Version}, nil
}

func (r *eventRows) Err() error { return r.err }

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
	partial bool
}

// overlay returns base with the fields of top set over it.
func overlay(base, top json.RawMessage) (json.RawMessage, error) {
	var fields, over map[string]json.RawMessage
	if err := json.Unmarshal(base, &fields); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(top, &over); err != nil {
		return nil, err
	}
	for k, v := range over {
		fields[k] = v
	}
	return json.Marshal(fields)
}

// prepare selects the registry generation of every row event, reconciles events
// with fences and renders the applicable events, completing partial images over
// images (the batch's rows so far, updated here). A spilled transaction's
// events are loaded one at a time and their images written back to its spill
// file. A transaction that cannot be prepared is a poison transaction: the
// error is a *capture.Failure (any other error is the worker's own).
func prepare(txn *capture.Txn, reg *registry, active int64, last rowImages) (batchTxn, error) {
	out := batchTxn{
		CommitLSN: txn.CommitLSN.String(), EndLSN: txn.EndLSN.String(), Xid: txn.Xid,
		CommitTime: txn.CommitTime, EventCount: len(txn.Rows), RegistryGeneration: active,
		Events: []batchEvent{},
	}
	for _, a := range txn.Activations {
		if a.Generation > reg.latest {
			return out, &capture.Failure{Class: capture.ClassRegistry, Detail: fmt.Sprintf("registry generation %d is not durable", a.Generation)}
		}
		out.RegistryGeneration = max(out.RegistryGeneration, a.Generation)
	}
	names := map[uint32]capture.Relation{}
	for _, ev := range txn.Rows {
		names[ev.Relation.OID] = ev.Relation
		for _, rel := range ev.Truncated {
			names[rel.OID] = rel
		}
	}
	pairs, err := capture.Pair(txn, reg.resolver(active, txn, names))
	if err != nil {
		return out, err
	}
	for i := range pairs {
		p := &pairs[i]
		r, _ := reg.byID(p.Reg.RelationID)
		ev := batchEvent{Ordinal: p.Event.Ordinal, RelationID: p.Reg.RelationID, Key: p.Key, Op: p.Event.Op,
			Version: p.Fence.Version}
		if err := ev.FenceID.Scan(p.Fence.FenceID); err != nil {
			return out, &capture.Failure{Class: capture.ClassFenceMalformed, RelationID: p.Reg.RelationID, Detail: "fence_id is not a UUID"}
		}
		if err := txn.Load(p.Event); err != nil {
			return out, err
		}
		// A registered column renamed or dropped would silently leave every later
		// image, and one of another type would change its values' type on the
		// wire: relation drift. A delete decodes the key alone.
		for col, typ := range r.Columns {
			c, ok := p.Event.Value(col)
			if !ok && p.Event.Op != "delete" {
				return out, &capture.Failure{Class: capture.ClassRelationDrift, RelationID: p.Reg.RelationID,
					Detail: "a registered column is missing from the decoded relation"}
			}
			if ok && c.TypeOID != typ {
				return out, &capture.Failure{Class: capture.ClassRelationDrift, RelationID: p.Reg.RelationID,
					Detail: "a registered column has another type in the decoded relation"}
			}
		}
		id := rowID{p.Reg.RelationID, p.Key}
		if p.Event.Op == "delete" {
			delete(last, id)
		} else {
			img, partial, err := image(p.Event.New, r.Columns)
			if err != nil {
				return out, &capture.Failure{Class: capture.ClassDecode, RelationID: p.Reg.RelationID, Detail: err.Error()}
			}
			// The merged image stays partial when the earlier one was partial too.
			if prev, ok := last[id]; ok && partial {
				base, err := prev.img.get()
				if err != nil {
					return out, err
				}
				if img, err = overlay(base, img); err != nil {
					return out, &capture.Failure{Class: capture.ClassDecode, RelationID: p.Reg.RelationID, Detail: "image is not an object"}
				}
				partial = prev.partial
			}
			ev.Image, ev.Partial = storedImage{inline: img}, partial
			if sp := txn.Spill(); sp != nil {
				at, err := sp.Put(img)
				if err != nil {
					return out, err
				}
				ev.Image = storedImage{spill: sp, at: at}
			}
			last[id] = rowImage{ev.Image, partial}
		}
		// The decoded values are in the image now: let them go, so that a large
		// transaction is not held twice (its quarantine needs only positions).
		p.Event.Old, p.Event.New = nil, nil
		out.Events = append(out.Events, ev)
	}
	out.Applied = len(out.Events)
	return out, nil
}
