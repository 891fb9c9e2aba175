package capture

import (
	"context"
	"fmt"

	"github.com/synchro-sync/synchro/internal/db"
)

// registration is one registered relation as the worker needs it.
type registration struct {
	Registered
	Generation int64
	KeyType    string
	Columns    map[string]uint32 // projected columns and their registered type OIDs
}

// registry is the durable registry: every registration with the generation
// that introduced it. Registrations are never changed in place, so the
// registry of generation g is every registration with Generation <= g.
type registry struct {
	byOID   map[uint32]registration
	byRel   map[int64]registration
	byName  map[[2]string]registration
	latest  int64          // highest durable generation loaded
	pending map[int64]bool // relations waiting for their projection bootstrap
	// dropped are relations whose unregistration is recorded and not yet
	// activated: their row events and fences are left out unpaired (a
	// drifted relation's would block capture before the unregistration).
	dropped map[int64]bool
}

// loadRegistry loads the durable registry (db.LoadRegistry, the one query of
// the registry's rows).
func loadRegistry(ctx context.Context, q db.DBTX) (*registry, error) {
	r := &registry{byOID: map[uint32]registration{}, byRel: map[int64]registration{}, byName: map[[2]string]registration{},
		pending: map[int64]bool{}, dropped: map[int64]bool{}}
	var err error
	if r.latest, err = db.New(q).LatestRegistryGeneration(ctx); err != nil {
		return nil, fmt.Errorf("load registry: %w", err)
	}
	rows, err := db.New(q).LoadRegistry(ctx)
	if err != nil {
		return nil, fmt.Errorf("load registry: %w", err)
	}
	for _, row := range rows {
		reg := registration{Registered: RegisteredOf(row), Generation: row.Generation, KeyType: row.KeyType,
			Columns: make(map[string]uint32, len(row.Columns))}
		for i, c := range row.Columns {
			reg.Columns[c] = row.ColumnTypes[i].Uint32
		}
		r.byOID[reg.Relation.OID] = reg
		r.byRel[reg.RelationID] = reg
		r.byName[[2]string{reg.Relation.Schema, reg.Relation.Name}] = reg
		if row.BootstrapPending {
			r.pending[reg.RelationID] = true
		}
		if row.Unregistering {
			r.dropped[reg.RelationID] = true
		}
	}
	return r, nil
}

// RegisteredOf is the registration of a row of db.LoadRegistry as pairing
// takes it.
func RegisteredOf(row db.LoadRegistryRow) Registered {
	r := Registered{RelationID: row.RelationID, Kind: row.RegistrationKind, KeyColumn: row.KeyColumn,
		Relation: Relation{Schema: row.SchemaName, Name: row.RelationName, OID: uint32(row.RelationOid)}}
	if row.TableID.Valid {
		r.TableID = &row.TableID.Int32
	}
	return r
}

// generationAt is the registry generation selected for the row event with the
// given ordinal: the latest activation that precedes it in source order, from an
// earlier transaction (active) or earlier in this one.
func generationAt(active int64, txn *Txn, ordinal int) int64 {
	g := active
	for _, a := range txn.Activations {
		if a.Before <= ordinal && a.Generation > g {
			g = a.Generation
		}
	}
	return g
}

// resolver resolves a transaction's row events under the generations selected for
// them. A decoded relation that is not registered by OID but carries a registered
// qualified name resolves to that registration, so that pairing reports the drift
// (drop and recreate) instead of ignoring the relation.
func (r *registry) resolver(active int64, txn *Txn) Resolver {
	var names map[uint32]Relation // built at the first relation not registered by OID
	return func(ordinal int, oid uint32) (Registered, bool) {
		g := generationAt(active, txn, ordinal)
		reg, ok := r.byOID[oid]
		if !ok {
			if names == nil {
				names = decodedRelations(txn)
			}
			rel, known := names[oid]
			if !known {
				return Registered{}, false
			}
			if reg, ok = r.byName[[2]string{rel.Schema, rel.Name}]; !ok {
				return Registered{}, false
			}
		}
		if reg.Generation > g || r.dropped[reg.RelationID] {
			return Registered{}, false
		}
		return reg.Registered, true
	}
}

// decodedRelations returns the relations of a transaction's row events by OID.
func decodedRelations(txn *Txn) map[uint32]Relation {
	names := map[uint32]Relation{}
	for _, ev := range txn.Rows {
		names[ev.Relation.OID] = ev.Relation
		for _, rel := range ev.Truncated {
			names[rel.OID] = rel
		}
	}
	return names
}

// byID returns the registration of a relation id.
func (r *registry) byID(id int64) (registration, bool) {
	reg, ok := r.byRel[id]
	return reg, ok
}
