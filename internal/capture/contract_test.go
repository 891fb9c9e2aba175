package capture_test

import (
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestMaterializeContract: the batch JSON the worker sends has exactly the
// fields synchro.materialize_transaction reads with jsonb_to_recordset, and the
// events it copies fill exactly the columns of the scratch table
// synchro_seg_event that synchro.materialize_scratch creates, in order: a
// field or column added or dropped on one side only fails here.
func TestMaterializeContract(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := context.Background()

	var def string
	if err := d.Pool.QueryRow(ctx, `SELECT pg_get_functiondef('synchro.materialize_transaction(jsonb, uuid)'::regprocedure)`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`jsonb_to_recordset\(batch\) AS \(([^)]*)\)`).FindStringSubmatch(def)
	if m == nil {
		t.Fatal("synchro.materialize_transaction reads no jsonb_to_recordset(batch) AS (...)")
	}
	var sqlFields []string
	for _, col := range strings.Split(m[1], ",") {
		sqlFields = append(sqlFields, strings.Fields(col)[0])
	}
	var batch []map[string]json.RawMessage
	if err := json.Unmarshal(capture.BatchJSON([]capture.Prepared{{CommitTime: time.Now()}}), &batch); err != nil || len(batch) != 1 {
		t.Fatalf("batch JSON: %v", err)
	}
	var goFields []string
	for k := range batch[0] {
		goFields = append(goFields, k)
	}
	slices.Sort(goFields)
	slices.Sort(sqlFields)
	if !slices.Equal(goFields, sqlFields) {
		t.Errorf("batch JSON fields %v, synchro.materialize_transaction reads %v", goFields, sqlFields)
	}

	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var columns []string
	if _, err := conn.Exec(ctx, `SELECT synchro.materialize_scratch()`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = 'pg_temp.synchro_seg_event'::regclass AND attnum > 0 AND NOT attisdropped`).Scan(&columns); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(columns, capture.EventColumns) {
		t.Errorf("events are copied into %v, synchro_seg_event has %v", capture.EventColumns, columns)
	}
	values, err := capture.EventValues()
	if err != nil || len(values) != len(capture.EventColumns) {
		t.Errorf("an event copies %d values (%v), for %d columns", len(values), err, len(capture.EventColumns))
	}
}

// TestFenceContract: the message the fence trigger emits for an update of a
// synced table (every member present) has exactly the members of capture.Fence
// (with its target and relation), in the layout parseLayout reads without
// falling back to encoding/json: a member added or dropped on one side only,
// or a change of the trigger's layout, fails here.
func TestFenceContract(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.docs (id text PRIMARY KEY, owner_id text);
		SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner_id}"}');
		INSERT INTO app.docs VALUES ('d1', 'u1')`)
	slot := d.CreateSlot(t)
	d.Exec(t, `UPDATE app.docs SET owner_id = 'u2' WHERE id = 'd1'`)
	rows, err := d.Pool.Query(context.Background(), `SELECT data FROM pg_logical_slot_get_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', 'synchro', 'messages', 'true')`, slot)
	if err != nil {
		t.Fatal(err)
	}
	var fences [][]byte
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			t.Fatal(err)
		}
		if data[0] != 'M' {
			continue
		}
		msg, err := pglogrepl.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		if m, ok := msg.(*pglogrepl.LogicalDecodingMessage); ok && m.Prefix == capture.FencePrefix {
			fences = append(fences, m.Content)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(fences) != 1 {
		t.Fatalf("%d fence messages for one update, want 1", len(fences))
	}
	if !capture.ParseLayout(fences[0]) {
		t.Errorf("the trigger's fence message does not take parseLayout's layout: %s", fences[0])
	}
	var sqlMembers map[string]json.RawMessage
	if err := json.Unmarshal(fences[0], &sqlMembers); err != nil {
		t.Fatal(err)
	}
	var relation map[string]json.RawMessage
	if err := json.Unmarshal(sqlMembers["relation"], &relation); err != nil {
		t.Fatal(err)
	}
	got := keysOf(sqlMembers)
	for k := range relation {
		got = append(got, "relation."+k)
	}
	slices.Sort(got)
	want := jsonMembers(reflect.TypeFor[capture.Fence](), "")
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("fence message members %v, capture.Fence has %v", got, want)
	}
}

func keysOf(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// jsonMembers lists the JSON members of struct type t as encoding/json reads
// them (embedded structs inlined, nested structs as prefix.member, and the
// nested struct's own member too).
func jsonMembers(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous {
			out = append(out, jsonMembers(ft, prefix)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, prefix+name)
		if ft.Kind() == reflect.Struct {
			out = append(out, jsonMembers(ft, prefix+name+".")...)
		}
	}
	return out
}
