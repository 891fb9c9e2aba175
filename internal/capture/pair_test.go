package capture

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// Two registered relations (a synced table and a dependency) and one that is
// not registered, as Pair's tests see them.
var (
	pairDocs   = &Table{Relation: Relation{Schema: "app", Name: "docs", OID: 100}, ReplicaIdentity: 'd', KeyColumns: []string{"id"}}
	pairOrgs   = &Table{Relation: Relation{Schema: "app", Name: "orgs", OID: 200}, ReplicaIdentity: 'd', KeyColumns: []string{"id"}}
	pairPlain  = &Table{Relation: Relation{Schema: "app", Name: "plain", OID: 300}, ReplicaIdentity: 'd', KeyColumns: []string{"id"}}
	pairDocsID = int32(1)
	pairRegs   = map[uint32]Registered{
		100: {RelationID: 10, Kind: KindSynced, Relation: pairDocs.Relation, KeyColumn: "id", TableID: &pairDocsID},
		200: {RelationID: 20, Kind: KindDependency, Relation: pairOrgs.Relation, KeyColumn: "id"},
	}
)

func pairResolve(_ int, oid uint32) (Registered, bool) {
	r, ok := pairRegs[oid]
	return r, ok
}

// row is a row event of t with key id (old key too for updates and deletes).
func row(t *Table, op, id string) RowEvent {
	ev := RowEvent{Op: op, Table: t}
	key := []Column{{Name: "id", Text: id}}
	if op != "insert" {
		ev.Old = key
	}
	if op != "delete" {
		ev.New = key
	}
	return ev
}

// fenceOf is the fence of a row event of t with key id, DML ordinal ord and a
// fence id unique to (t, id, ord) unless given.
func fenceOf(t *Table, op, id string, ord int64, fenceID ...string) Fence {
	r := pairRegs[t.Relation.OID]
	if r.RelationID == 0 { // a fence naming an unregistered relation
		r = Registered{RelationID: 30, Kind: KindDependency, Relation: t.Relation}
	}
	f := Fence{
		FenceTarget: &FenceTarget{RegistrationKind: r.Kind, RelationID: r.RelationID, Relation: r.Relation, TableID: r.TableID},
		Op:          op, Version: "v", Ordinal: ord,
		FenceID: fmt.Sprintf("%s-%s-%d", t.Relation.Name, id, ord),
	}
	if len(fenceID) > 0 {
		f.FenceID = fenceID[0]
	}
	key := []byte(`"` + id + `"`)
	if op != "insert" {
		f.OldKey = key
	}
	if op != "delete" {
		f.NewKey = key
	}
	return f
}

func txnOf(rows []RowEvent, fences ...Fence) *Txn {
	for i := range rows {
		rows[i].Ordinal = i
	}
	return &Txn{Rows: rows, Fences: fences}
}

// pairsOf renders Pair's result as event ordinal → fence id.
func pairsOf(t *testing.T, txn *Txn) []string {
	t.Helper()
	pairs, err := Pair(txn, pairResolve)
	if err != nil {
		t.Fatalf("Pair: %v", err)
	}
	var out []string
	for _, p := range pairs {
		out = append(out, fmt.Sprintf("%d:%s:%s=%s", p.Event.Ordinal, p.Reg.Relation.Name, p.Key, p.Fence.FenceID))
	}
	return out
}

// TestPairAccepts: per row identity, the k-th row event takes the fence of the
// k-th lowest DML ordinal, whatever order the fences of different rows came
// in; unregistered relations' events are skipped; pairs come back in row
// event order.
func TestPairAccepts(t *testing.T) {
	cases := []struct {
		name string
		txn  *Txn
		want []string
	}{
		{
			name: "repeated changes of one row",
			txn: txnOf([]RowEvent{row(pairDocs, "insert", "a"), row(pairDocs, "update", "a"), row(pairDocs, "delete", "a"), row(pairDocs, "insert", "a")},
				fenceOf(pairDocs, "insert", "a", 1), fenceOf(pairDocs, "update", "a", 2), fenceOf(pairDocs, "delete", "a", 3), fenceOf(pairDocs, "insert", "a", 4)),
			want: []string{"0:docs:a=docs-a-1", "1:docs:a=docs-a-2", "2:docs:a=docs-a-3", "3:docs:a=docs-a-4"},
		},
		{
			name: "interleaved across rows and relations",
			txn: txnOf([]RowEvent{row(pairDocs, "insert", "a"), row(pairOrgs, "insert", "a"), row(pairDocs, "insert", "b"), row(pairDocs, "update", "a"), row(pairOrgs, "delete", "a")},
				// The fences of different rows in another order than their row events.
				fenceOf(pairDocs, "insert", "b", 3), fenceOf(pairOrgs, "insert", "a", 2), fenceOf(pairDocs, "insert", "a", 1),
				fenceOf(pairOrgs, "delete", "a", 9), fenceOf(pairDocs, "update", "a", 5)),
			want: []string{"0:docs:a=docs-a-1", "1:orgs:a=orgs-a-2", "2:docs:b=docs-b-3", "3:docs:a=docs-a-5", "4:orgs:a=orgs-a-9"},
		},
		{
			name: "unregistered relation's row events are skipped",
			txn: txnOf([]RowEvent{row(pairPlain, "insert", "a"), row(pairDocs, "insert", "a"), row(pairPlain, "delete", "a")},
				fenceOf(pairDocs, "insert", "a", 1)),
			want: []string{"1:docs:a=docs-a-1"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := pairsOf(t, tc.txn); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("pairs %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPairRefuses: every way a transaction's row events and fences fail to
// pair is a *Failure of its class, naming the registered relation.
func TestPairRefuses(t *testing.T) {
	cases := []struct {
		name     string
		txn      *Txn
		class    string
		relation int64
	}{
		{
			name:  "missing fence",
			txn:   txnOf([]RowEvent{row(pairDocs, "insert", "a"), row(pairDocs, "insert", "b")}, fenceOf(pairDocs, "insert", "a", 1)),
			class: ClassFenceUnmatched, relation: 10,
		},
		{
			name:  "missing fence for a repeated change",
			txn:   txnOf([]RowEvent{row(pairDocs, "insert", "a"), row(pairDocs, "update", "a")}, fenceOf(pairDocs, "insert", "a", 1)),
			class: ClassFenceUnmatched, relation: 10,
		},
		{
			name:  "fence without its row event",
			txn:   txnOf([]RowEvent{row(pairDocs, "insert", "a")}, fenceOf(pairDocs, "insert", "a", 1), fenceOf(pairDocs, "update", "a", 2)),
			class: ClassFenceUnmatched, relation: 10,
		},
		{
			name: "duplicate fence id",
			txn: txnOf([]RowEvent{row(pairDocs, "insert", "a"), row(pairDocs, "insert", "b")},
				fenceOf(pairDocs, "insert", "a", 1, "same"), fenceOf(pairDocs, "insert", "b", 2, "same")),
			class: ClassFenceDuplicate, relation: 10,
		},
		{
			name: "fences of one row out of ordinal order",
			txn: txnOf([]RowEvent{row(pairDocs, "insert", "a"), row(pairDocs, "update", "a")},
				fenceOf(pairDocs, "update", "a", 2), fenceOf(pairDocs, "insert", "a", 1)),
			class: ClassFenceReordered, relation: 10,
		},
		{
			name: "fences of one row with one ordinal",
			txn: txnOf([]RowEvent{row(pairDocs, "insert", "a"), row(pairDocs, "update", "a")},
				fenceOf(pairDocs, "insert", "a", 1), fenceOf(pairDocs, "update", "a", 1, "other")),
			class: ClassFenceReordered, relation: 10,
		},
		{
			name: "row events of one row in another order than their fences",
			txn: txnOf([]RowEvent{row(pairDocs, "update", "a"), row(pairDocs, "insert", "a")},
				fenceOf(pairDocs, "insert", "a", 1), fenceOf(pairDocs, "update", "a", 2)),
			class: ClassFenceMismatch, relation: 10,
		},
		{
			name:  "fence for an unregistered relation",
			txn:   txnOf([]RowEvent{row(pairPlain, "insert", "a")}, fenceOf(pairPlain, "insert", "a", 1)),
			class: ClassFenceUnmatched, relation: 30,
		},
		{
			name:  "fence of another registration kind",
			txn:   txnOf([]RowEvent{row(pairOrgs, "insert", "a")}, func() Fence { f := fenceOf(pairDocs, "insert", "a", 1); f.RelationID = 20; return f }()),
			class: ClassFenceMismatch, relation: 20,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pairs, err := Pair(tc.txn, pairResolve)
			var f *Failure
			if !errors.As(err, &f) {
				t.Fatalf("Pair returned %v, %v; want a %s failure", pairs, err, tc.class)
			}
			if f.Class != tc.class || f.RelationID != tc.relation {
				t.Fatalf("failure %v, want class %s of relation %d", f, tc.class, tc.relation)
			}
		})
	}
}
