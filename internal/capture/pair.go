package capture

import (
	"fmt"
	"sort"
)

// Failure classes: the bounded vocabulary of a poison record.
const (
	ClassDecode         = "decode_error"
	ClassFenceMalformed = "fence_malformed"
	ClassFenceUnmatched = "fence_unmatched"
	ClassFenceDuplicate = "fence_duplicate"
	ClassFenceReordered = "fence_reordered"
	ClassFenceMismatch  = "fence_mismatch"
	ClassTruncate       = "truncate"
	ClassRelationDrift  = "relation_drift"
	ClassKeyChange      = "key_change"
	ClassMaterialize    = "materialize_error"
	ClassRegistry       = "registry_unknown"
)

// Failure is a blocking capture failure of one source transaction. Its text
// never holds row values.
type Failure struct {
	Class      string
	RelationID int64 // 0 when no registered relation applies
	Detail     string
}

func (f *Failure) Error() string {
	if f.RelationID != 0 {
		return fmt.Sprintf("%s (relation %d): %s", f.Class, f.RelationID, f.Detail)
	}
	return fmt.Sprintf("%s: %s", f.Class, f.Detail)
}

// Registered is a registration as it applies to one row event.
type Registered struct {
	RelationID int64
	Kind       string
	Relation   Relation
	KeyColumn  string
	TableID    *int32
}

// Resolver returns the registration of relation oid under the registry
// generation selected for the row event with the given ordinal, or false when
// the relation is not registered there.
type Resolver func(ordinal int, oid uint32) (Registered, bool)

// Paired is a registered row event with the fence it was reconciled with.
type Paired struct {
	Event RowEvent
	Reg   Registered
	Key   string
	Fence Fence
}

type identity struct {
	relationID int64
	key        string
}

// Pair reconciles a transaction's registered row events with its fences by the
// ADR rule: per row identity (relation, key), the k-th row event in source order
// pairs with the fence of the k-th lowest registered-DML ordinal, and each pair
// must agree on registration kind, relation identity, operation and key. Fence
// IDs are unique. Anything else (a missing or extra fence, a duplicate, fences of
// one identity out of order, a truncate of a registered relation, a relation
// whose identity drifted, a key change) is a *Failure. Pairs come back in row
// event order.
func Pair(t *Txn, resolve Resolver) ([]Paired, error) {
	if t.Malformed != nil {
		return nil, &Failure{Class: ClassFenceMalformed, Detail: t.Malformed.Error()}
	}
	fences := map[identity][]Fence{}
	seen := map[string]bool{}
	for _, f := range t.Fences {
		if seen[f.FenceID] {
			return nil, &Failure{Class: ClassFenceDuplicate, RelationID: f.RelationID, Detail: "fence id repeated in one transaction"}
		}
		seen[f.FenceID] = true
		id := identity{f.RelationID, f.Key()}
		if prev := fences[id]; len(prev) > 0 && prev[len(prev)-1].Ordinal >= f.Ordinal {
			return nil, &Failure{Class: ClassFenceReordered, RelationID: f.RelationID, Detail: "fences of one row identity out of ordinal order"}
		}
		fences[id] = append(fences[id], f.Fence)
	}
	for _, list := range fences {
		sort.Slice(list, func(i, j int) bool { return list[i].Ordinal < list[j].Ordinal })
	}

	var out []Paired
	used := map[identity]int{}
	for _, ev := range t.Rows {
		if ev.Op == "truncate" {
			for _, rel := range ev.Truncated {
				if reg, ok := resolve(ev.Ordinal, rel.OID); ok {
					return nil, &Failure{Class: ClassTruncate, RelationID: reg.RelationID, Detail: "TRUNCATE of a registered relation"}
				}
			}
			continue
		}
		reg, ok := resolve(ev.Ordinal, ev.Relation.OID)
		if !ok {
			continue
		}
		if ev.Relation != reg.Relation {
			return nil, &Failure{Class: ClassRelationDrift, RelationID: reg.RelationID, Detail: "decoded relation identity differs from the registered one"}
		}
		if ev.ReplicaIdentity != 'd' || len(ev.KeyColumns) != 1 || ev.KeyColumns[0] != reg.KeyColumn {
			return nil, &Failure{Class: ClassRelationDrift, RelationID: reg.RelationID, Detail: "replica identity or key of the decoded relation differs from the registration"}
		}
		key, ok := ev.Value(reg.KeyColumn)
		if !ok || key.Null || key.Unchanged {
			return nil, &Failure{Class: ClassRelationDrift, RelationID: reg.RelationID, Detail: "registered key column missing from the decoded row"}
		}
		if ev.Op == "update" {
			if old, ok := ev.OldValue(reg.KeyColumn); ok && (old.Null || old.Text != key.Text) {
				return nil, &Failure{Class: ClassKeyChange, RelationID: reg.RelationID, Detail: "update changed the registered key"}
			}
		}
		id := identity{reg.RelationID, key.Text}
		k := used[id]
		if k >= len(fences[id]) {
			return nil, &Failure{Class: ClassFenceUnmatched, RelationID: reg.RelationID, Detail: "row event without a matching fence"}
		}
		f := fences[id][k]
		used[id] = k + 1
		if f.RegistrationKind != reg.Kind || f.Relation != reg.Relation || f.Op != ev.Op || !sameTable(f.TableID, reg.TableID) {
			return nil, &Failure{Class: ClassFenceMismatch, RelationID: reg.RelationID, Detail: "fence disagrees with its row event"}
		}
		out = append(out, Paired{Event: ev, Reg: reg, Key: key.Text, Fence: f})
	}
	for id, list := range fences {
		if used[id] != len(list) {
			return nil, &Failure{Class: ClassFenceUnmatched, RelationID: id.relationID, Detail: "fence without a matching row event"}
		}
	}
	return out, nil
}

func sameTable(a, b *int32) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}
