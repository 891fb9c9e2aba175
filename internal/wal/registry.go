package wal

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/capture"
)

// registration is one registered relation as the worker needs it.
type registration struct {
	capture.Registered
	Generation int64
	KeyType    string
	Columns    map[string]uint32 // projected columns and their registered type OIDs
}

// registry is the durable registry: every registration with the generation
// that introduced it. Registrations are never changed in place, so the
// registry of generation g is every registration with Generation <= g.
type registry struct {
	byOID  map[uint32]registration
	byRel  map[int64]registration
	byName map[[2]string]registration
	latest int64 // highest durable generation loaded
}

func loadRegistry(ctx context.Context, pool *pgxpool.Pool) (*registry, error) {
	r := &registry{byOID: map[uint32]registration{}, byRel: map[int64]registration{}, byName: map[[2]string]registration{}}
	if err := pool.QueryRow(ctx, `SELECT max(generation) FROM synchro.registry_generation`).Scan(&r.latest); err != nil {
		return nil, fmt.Errorf("load registry: %w", err)
	}
	rows, err := pool.Query(ctx, `
		SELECT r.relation_id, r.registration_kind, r.schema_name, r.relation_name, r.relation_oid::bigint,
		       r.key_column, r.key_type, r.columns::text[], r.column_types, r.generation, t.table_id
		FROM synchro.relation r LEFT JOIN synchro.synced_table t USING (relation_id)`)
	if err != nil {
		return nil, fmt.Errorf("load registry: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var reg registration
		var oid int64
		var cols []string
		var types []uint32
		if err := rows.Scan(&reg.RelationID, &reg.Kind, &reg.Relation.Schema, &reg.Relation.Name, &oid,
			&reg.KeyColumn, &reg.KeyType, &cols, &types, &reg.Generation, &reg.TableID); err != nil {
			return nil, fmt.Errorf("load registry: %w", err)
		}
		reg.Relation.OID = uint32(oid)
		reg.Columns = make(map[string]uint32, len(cols))
		for i, c := range cols {
			reg.Columns[c] = types[i]
		}
		r.byOID[reg.Relation.OID] = reg
		r.byRel[reg.RelationID] = reg
		r.byName[[2]string{reg.Relation.Schema, reg.Relation.Name}] = reg
	}
	return r, rows.Err()
}

// generationAt is the registry generation selected for the row event with the
// given ordinal: the latest activation that precedes it in source order, from an
// earlier transaction (active) or earlier in this one.
func generationAt(active int64, txn *capture.Txn, ordinal int) int64 {
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
func (r *registry) resolver(active int64, txn *capture.Txn) capture.Resolver {
	var names map[uint32]capture.Relation // built at the first relation not registered by OID
	return func(ordinal int, oid uint32) (capture.Registered, bool) {
		g := generationAt(active, txn, ordinal)
		reg, ok := r.byOID[oid]
		if !ok {
			if names == nil {
				names = decodedRelations(txn)
			}
			rel, known := names[oid]
			if !known {
				return capture.Registered{}, false
			}
			if reg, ok = r.byName[[2]string{rel.Schema, rel.Name}]; !ok {
				return capture.Registered{}, false
			}
		}
		if reg.Generation > g {
			return capture.Registered{}, false
		}
		return reg.Registered, true
	}
}

// decodedRelations returns the relations of a transaction's row events by OID.
func decodedRelations(txn *capture.Txn) map[uint32]capture.Relation {
	names := map[uint32]capture.Relation{}
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
