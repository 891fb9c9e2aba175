package capture

import "fmt"

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
// Event and Fence point into the transaction's Rows and Fences.
type Paired struct {
	Event *RowEvent
	Reg   *Registered
	Key   string
	Fence *Fence
}

type identity struct {
	relationID int64
	key        string
}

// Pair reconciles a transaction's registered row events with its fences by the
// contract's rule (docs/change-stream.md): per row identity (relation, key), the
// k-th row event in source order pairs with the fence of the k-th lowest
// registered-DML ordinal, and each pair must agree on registration kind,
// relation identity, operation and key. Fence IDs are unique. Anything else (a missing or extra fence, a duplicate, fences of
// one identity out of order, a truncate of a registered relation, a relation
// whose identity drifted, a key change) is a *Failure. Pairs come back in row
// event order.
func Pair(t *Txn, resolve Resolver) ([]Paired, error) {
	if t.Malformed != nil {
		return nil, &Failure{Class: ClassFenceMalformed, Detail: t.Malformed.Error()}
	}
	q, err := queueFences(t.Fences)
	if err != nil {
		return nil, err
	}
	out := make([]Paired, 0, len(t.Fences)) // every fence pairs, or Pair fails
	var reg *Registered                     // shared by the pairs of one registration in a row
	for i := range t.Rows {
		ev := &t.Rows[i]
		if ev.Op == "truncate" {
			for _, rel := range ev.Truncated {
				if r, ok := resolve(ev.Ordinal, rel.OID); ok {
					return nil, &Failure{Class: ClassTruncate, RelationID: r.RelationID, Detail: "TRUNCATE of a registered relation"}
				}
			}
			continue
		}
		r, ok := resolve(ev.Ordinal, ev.Relation.OID)
		if !ok {
			continue
		}
		if reg == nil || *reg != r {
			reg = new(Registered)
			*reg = r
		}
		key, err := pairKey(ev, reg)
		if err != nil {
			return nil, err
		}
		f := q.take(identity{reg.RelationID, key})
		if f < 0 {
			return nil, &Failure{Class: ClassFenceUnmatched, RelationID: reg.RelationID, Detail: "row event without a matching fence"}
		}
		fence := &t.Fences[f]
		if fence.RegistrationKind != reg.Kind || fence.Relation != reg.Relation || fence.Op != ev.Op || !sameTable(fence.TableID, reg.TableID) {
			return nil, &Failure{Class: ClassFenceMismatch, RelationID: reg.RelationID, Detail: "fence disagrees with its row event"}
		}
		out = append(out, Paired{Event: ev, Reg: reg, Key: key, Fence: fence})
	}
	if f := q.firstUnpaired(); f >= 0 {
		return nil, &Failure{Class: ClassFenceUnmatched, RelationID: t.Fences[f].RelationID, Detail: "fence without a matching row event"}
	}
	return out, nil
}

// pairKey checks a registered row event's relation against its registration
// and returns the event's key.
func pairKey(ev *RowEvent, reg *Registered) (string, error) {
	if ev.Relation != reg.Relation {
		return "", &Failure{Class: ClassRelationDrift, RelationID: reg.RelationID, Detail: "decoded relation identity differs from the registered one"}
	}
	if ev.ReplicaIdentity != 'd' || len(ev.KeyColumns) != 1 || ev.KeyColumns[0] != reg.KeyColumn {
		return "", &Failure{Class: ClassRelationDrift, RelationID: reg.RelationID, Detail: "replica identity or key of the decoded relation differs from the registration"}
	}
	key, ok := ev.Value(reg.KeyColumn)
	if ok && key.Unchanged && ev.Op == "update" {
		// A key stored out of line that the update left alone is not in the new
		// tuple; PostgreSQL then logs the old key in full.
		key, ok = ev.OldValue(reg.KeyColumn)
	}
	if !ok || key.Null || key.Unchanged {
		return "", &Failure{Class: ClassRelationDrift, RelationID: reg.RelationID, Detail: "registered key column missing from the decoded row"}
	}
	if ev.Op == "update" {
		if old, ok := ev.OldValue(reg.KeyColumn); ok && (old.Null || old.Text != key.Text) {
			return "", &Failure{Class: ClassKeyChange, RelationID: reg.RelationID, Detail: "update changed the registered key"}
		}
	}
	return key.Text, nil
}

// fenceQueues holds a transaction's fences as one queue per row identity, in
// the order they fired, which must be their ordinal order: linked lists over
// the transaction's fences by index.
type fenceQueues struct {
	ends   map[identity]queueEnds
	next   []int32 // the next fence of the same identity, -1 none
	paired []bool
}

// queueEnds are the first unpaired fence of an identity (-1 when none is
// left) and its last fence.
type queueEnds struct{ first, last int32 }

// queueFences queues fences by identity. Fence IDs must be unique, and the
// fences of one identity must come in increasing ordinal order.
func queueFences(fences []Fence) (*fenceQueues, error) {
	q := &fenceQueues{ends: make(map[identity]queueEnds, len(fences)), next: make([]int32, len(fences)), paired: make([]bool, len(fences))}
	seen := make(map[string]struct{}, len(fences))
	for i := range fences {
		f := &fences[i]
		if _, dup := seen[f.FenceID]; dup {
			return nil, &Failure{Class: ClassFenceDuplicate, RelationID: f.RelationID, Detail: "fence id repeated in one transaction"}
		}
		seen[f.FenceID] = struct{}{}
		id := identity{f.RelationID, f.Key()}
		q.next[i] = -1
		e, ok := q.ends[id]
		switch {
		case !ok:
			e.first = int32(i)
		case fences[e.last].Ordinal >= f.Ordinal:
			return nil, &Failure{Class: ClassFenceReordered, RelationID: f.RelationID, Detail: "fences of one row identity out of ordinal order"}
		default:
			q.next[e.last] = int32(i)
		}
		e.last = int32(i)
		q.ends[id] = e
	}
	return q, nil
}

// take pairs and returns the first unpaired fence of id, or -1 when none is left.
func (q *fenceQueues) take(id identity) int {
	e, ok := q.ends[id]
	if !ok || e.first < 0 {
		return -1
	}
	f := e.first
	e.first = q.next[f]
	q.ends[id] = e
	q.paired[f] = true
	return int(f)
}

// firstUnpaired returns the first fence that no row event took, or -1.
func (q *fenceQueues) firstUnpaired() int {
	for i, p := range q.paired {
		if !p {
			return i
		}
	}
	return -1
}

func sameTable(a, b *int32) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}
