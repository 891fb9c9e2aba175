package wal

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/synchro-sync/synchro/internal/capture"
)

// batchTxn is one source transaction as synchro.materialize_transaction takes it.
type batchTxn struct {
	CommitLSN          string       `json:"commit_lsn"`
	EndLSN             string       `json:"end_lsn"`
	Xid                uint32       `json:"xid"`
	CommitTime         time.Time    `json:"commit_time"`
	EventCount         int          `json:"event_count"`
	RegistryGeneration int64        `json:"registry_generation"`
	Events             []batchEvent `json:"events"`
}

type batchEvent struct {
	Ordinal    int             `json:"o"`
	RelationID int64           `json:"r"`
	Key        string          `json:"k"`
	Op         string          `json:"op"`
	Image      json.RawMessage `json:"img"`
	Partial    bool            `json:"partial"`
	FenceID    string          `json:"f"`
	Version    string          `json:"v"`
}

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
	img     json.RawMessage
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
// images (the batch's rows so far, updated here). A transaction that cannot be
// prepared is a poison transaction: the error is a *capture.Failure.
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
	for _, p := range pairs {
		r, _ := reg.byID(p.Reg.RelationID)
		ev := batchEvent{Ordinal: p.Event.Ordinal, RelationID: p.Reg.RelationID, Key: p.Key, Op: p.Event.Op,
			FenceID: p.Fence.FenceID, Version: p.Fence.Version, Image: json.RawMessage("null")}
		id := rowID{p.Reg.RelationID, p.Key}
		if p.Event.Op == "delete" {
			delete(last, id)
		} else {
			// A registered column renamed or dropped would silently leave every
			// later image: relation drift.
			for col := range r.Columns {
				if _, ok := p.Event.Value(col); !ok {
					return out, &capture.Failure{Class: capture.ClassRelationDrift, RelationID: p.Reg.RelationID,
						Detail: "a registered column is missing from the decoded relation"}
				}
			}
			img, partial, err := image(p.Event.New, r.Columns)
			if err != nil {
				return out, &capture.Failure{Class: capture.ClassDecode, RelationID: p.Reg.RelationID, Detail: err.Error()}
			}
			// The merged image stays partial when the earlier one was partial too.
			if prev, ok := last[id]; ok && partial {
				if img, err = overlay(prev.img, img); err != nil {
					return out, &capture.Failure{Class: capture.ClassDecode, RelationID: p.Reg.RelationID, Detail: "image is not an object"}
				}
				partial = prev.partial
			}
			last[id] = rowImage{img, partial}
			ev.Image, ev.Partial = img, partial
		}
		out.Events = append(out.Events, ev)
	}
	return out, nil
}
