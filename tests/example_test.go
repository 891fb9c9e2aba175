package tests

import (
	"context"
	"maps"
	"os"
	"testing"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestExampleNotesSchema applies examples/notes/schema.sql (what `make run
// EXAMPLE=notes` applies) twice to a fresh database: the second application
// changes nothing, and the registry holds one table per documented rule kind.
// Applied again after the walkthrough deleted seed rows (a membership, say),
// it leaves them deleted: `make run EXAMPLE=notes` applies it at every start.
func TestExampleNotesSchema(t *testing.T) {
	t.Parallel()
	schema, err := os.ReadFile("../examples/notes/schema.sql")
	if err != nil {
		t.Fatalf("read the example schema: %v", err)
	}
	d := testdb.New(t)
	d.Exec(t, string(schema))
	gens := generationCount(t, d)
	d.Exec(t, string(schema))
	if got := generationCount(t, d); got != gens {
		t.Fatalf("registry generations: %d after applying the example again, %d before", got, gens)
	}

	rows, err := d.Pool.Query(context.Background(),
		`SELECT name, scope_rule ->> 'kind', push_policy FROM synchro.synced_table ORDER BY name`)
	if err != nil {
		t.Fatalf("query synced tables: %v", err)
	}
	type reg struct{ kind, policy string }
	got := map[string]reg{}
	for rows.Next() {
		var name string
		var r reg
		if err := rows.Scan(&name, &r.kind, &r.policy); err != nil {
			t.Fatalf("scan synced table: %v", err)
		}
		got[name] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("query synced tables: %v", err)
	}
	want := map[string]reg{
		"templates":    {"shared", "read_only"},
		"notebooks":    {"column", "enabled"},
		"pages":        {"path", "enabled"},
		"shared_notes": {"members", "enabled"},
	}
	if !maps.Equal(got, want) {
		t.Fatalf("synced tables %v, want %v", got, want)
	}

	// The rules reference what the example README says they do.
	if s := queryText(t, d, `SELECT scope_rule ->> 'scope' FROM synchro.synced_table WHERE name = 'templates'`); s != "templates_public" {
		t.Fatalf("templates scope %q, want templates_public", s)
	}
	if s := queryText(t, d, `SELECT scope_rule -> 'path' -> 0 ->> 'relation' FROM synchro.synced_table WHERE name = 'pages'`); s != "notes_app.notebooks" {
		t.Fatalf("pages path leads to %q, want notes_app.notebooks", s)
	}
	if s := queryText(t, d, `SELECT scope_rule ->> 'relation' FROM synchro.synced_table WHERE name = 'shared_notes'`); s != "notes_app.note_members" {
		t.Fatalf("shared_notes members relation %q, want notes_app.note_members", s)
	}
	if s := queryText(t, d, `SELECT registration_kind FROM synchro.relation WHERE relation_oid = 'notes_app.note_members'::regclass`); s != "capture_dependency" {
		t.Fatalf("note_members registration %q, want capture_dependency", s)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.shared_scope WHERE scope = 'templates_public'`); n != 1 {
		t.Fatalf("shared scope templates_public registered %d times, want 1", n)
	}
	if s := queryStrings(t, d, `SELECT synchro.assigned_scopes('u1')`); len(s) != 2 || s[0] != "templates_public" || s[1] != "user:u1" {
		t.Fatalf("assigned scopes of u1 %v, want [templates_public user:u1]", s)
	}

	// Seed rows are inserted once.
	for table, want := range map[string]int64{"templates": 3, "shared_notes": 1, "note_members": 2} {
		if n := queryInt(t, d, `SELECT count(*) FROM notes_app.`+table); n != want {
			t.Fatalf("notes_app.%s has %d rows, want %d", table, n, want)
		}
	}

	// Seed rows deleted since stay deleted when the example is applied again.
	d.Exec(t, `DELETE FROM notes_app.note_members WHERE note_id = 'sn-welcome' AND user_id = 'u1'`)
	d.Exec(t, `DELETE FROM notes_app.templates WHERE id = 't-todo'`)
	d.Exec(t, string(schema))
	for table, want := range map[string]int64{"templates": 2, "shared_notes": 1, "note_members": 1} {
		if n := queryInt(t, d, `SELECT count(*) FROM notes_app.`+table); n != want {
			t.Fatalf("applied again after deletes: notes_app.%s has %d rows, want %d", table, n, want)
		}
	}
}
