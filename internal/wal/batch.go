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

// prepare selects the registry generation of every row event, reconciles events
// with fences and renders the applicable events. A transaction that cannot be
// prepared is a poison transaction: the error is a *capture.Failure.
func prepare(txn *capture.Txn, reg *registry, active int64) (batchTxn, error) {
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
	// Images of a row within this transaction, so that a partial image (unchanged
	// TOAST values left out) completes over the row's earlier image here.
	type rowID struct {
		rel int64
		key string
	}
	last := map[rowID]map[string]json.RawMessage{}
	for _, p := range pairs {
		r, _ := reg.byID(p.Reg.RelationID)
		ev := batchEvent{Ordinal: p.Event.Ordinal, RelationID: p.Reg.RelationID, Key: p.Key, Op: p.Event.Op,
			FenceID: p.Fence.FenceID, Version: p.Fence.Version, Image: json.RawMessage("null")}
		id := rowID{p.Reg.RelationID, p.Key}
		if p.Event.Op == "delete" {
			delete(last, id)
		} else {
			img, partial, err := image(p.Event.New, r.Columns)
			if err != nil {
				return out, &capture.Failure{Class: capture.ClassDecode, RelationID: p.Reg.RelationID, Detail: err.Error()}
			}
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(img, &fields); err != nil {
				return out, &capture.Failure{Class: capture.ClassDecode, RelationID: p.Reg.RelationID, Detail: "image is not an object"}
			}
			if prev, ok := last[id]; ok && partial {
				for k, v := range fields {
					prev[k] = v
				}
				fields, partial = prev, false
				if img, err = json.Marshal(fields); err != nil {
					return out, err
				}
			}
			last[id] = fields
			ev.Image, ev.Partial = img, partial
		}
		out.Events = append(out.Events, ev)
	}
	return out, nil
}
