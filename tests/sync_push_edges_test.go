package tests

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// pushEdgesSetup adds tables with a varchar(5) key, a uuid key, an identity
// column and an identity key (GENERATED ALWAYS, one row), an index on docs.title, and a write policy that lets any user update
// any doc (as a registered policy may).
const pushEdgesSetup = `CREATE TABLE app.codes (id varchar(5) PRIMARY KEY, owner_id text NOT NULL);
	CREATE TABLE app.things (id uuid PRIMARY KEY, owner_id text NOT NULL);
	CREATE TABLE app.items (id text PRIMARY KEY, owner_id text NOT NULL, seq bigint GENERATED ALWAYS AS IDENTITY);
	CREATE TABLE app.gen (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, owner_id text NOT NULL);
	SELECT synchro.register_table('app.codes', '{"kind":"column","template":"user:{owner_id}"}');
	SELECT synchro.register_table('app.things', '{"kind":"column","template":"user:{owner_id}"}');
	SELECT synchro.register_table('app.items', '{"kind":"column","template":"user:{owner_id}"}');
	SELECT synchro.register_table('app.gen', '{"kind":"column","template":"user:{owner_id}"}');
	INSERT INTO app.gen (owner_id) VALUES ('u1');
	CREATE INDEX docs_title ON app.docs (title);
	CREATE FUNCTION app.open_updates(user_id text, op text, table_name text, before jsonb, after jsonb)
		RETURNS boolean LANGUAGE sql AS $$
			SELECT op = 'update' OR coalesce(after ->> 'owner_id', before ->> 'owner_id') = user_id $$;
	SELECT synchro.set_write_policy('app.docs', 'app.open_updates(text,text,text,jsonb,jsonb)');
	INSERT INTO app.docs (id, owner_id, title, n) VALUES ('d1', 'u1', 'SECRET-title', 7);
	INSERT INTO app.codes VALUES ('abcde', 'u1')`

// TestSyncPushEdgeInputs: pushes at the edges of what the tables accept get a
// clear outcome, and never another user's row or a 500:
//   - a registered policy that lets u2 update u1's doc: applied, but the
//     answer carries neither the row nor its version (not in u2's scopes);
//   - an upsert of an existing row naming its key only: applied, changing
//     nothing;
//   - a value too large for an index, a write to an identity column, an
//     insert into a table whose key is GENERATED ALWAYS (the push must name
//     the key): validation_failed, the rest of the batch applied (an update
//     of such a row too);
//   - a varchar(5) key given longer: never cut to another row's key;
//   - a uuid key in upper case or without hyphens: the row's version comes
//     back.
func TestSyncPushEdgeInputs(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, pushEdgesSetup)
	e.connect(t, "u1", "c1")
	e.connect(t, "u2", "c2")

	resp := e.push(t, "u2", "c2", mut("m1", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"n": 8}))
	if list, o := outcome(t, resp, "m1"); list != "accepted" || o["server_row"] != nil || o["server_version"] != nil {
		t.Fatalf("u2's update of u1's doc: %s %v, want applied without row or version", list, o)
	}
	if raw, _ := json.Marshal(resp); strings.Contains(string(raw), "SECRET") {
		t.Fatalf("the answer to u2 holds u1's row: %v", resp)
	}
	if n := queryInt(t, e.d, `SELECT n FROM app.docs WHERE id = 'd1'`); n != 8 {
		t.Fatalf("the update was not applied: n = %d", n)
	}

	big := make([]byte, 12000)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	version := queryText(t, e.d, `SELECT version FROM synchro.row_head WHERE key = 'd1'`)
	resp = e.push(t, "u1", "c1",
		mut("m2", "docs", "upsert", map[string]any{"id": "d1"}, map[string]any{}),
		mut("m3", "docs", "upsert", map[string]any{"id": "d1"}, map[string]any{"id": "d1"}),
		mut("m4", "docs", "update", map[string]any{"id": "d1"}, map[string]any{"title": base64.StdEncoding.EncodeToString(big)}),
		mut("m5", "items", "insert", map[string]any{"id": "i1"}, map[string]any{"owner_id": "u1", "seq": 5}),
		mut("m6", "codes", "delete", map[string]any{"id": "abcdeZZZ"}, nil),
		mut("m7", "codes", "update", map[string]any{"id": "abcdeZZZ"}, map[string]any{"owner_id": "u1"}),
		mut("m8", "codes", "insert", map[string]any{"id": "abcdeZZZ"}, map[string]any{"owner_id": "u1"}),
		mut("m9", "things", "insert", map[string]any{"id": "0A0B0C0D-0000-4000-8000-00000000000F"}, map[string]any{"owner_id": "u1"}),
		mut("m10", "items", "insert", map[string]any{"id": "i2"}, map[string]any{"owner_id": "u1"}),
		mut("m11", "things", "update", map[string]any{"id": "0a0b0c0d00004000800000000000000F"}, map[string]any{"owner_id": "u1"}),
		mut("m12", "gen", "insert", map[string]any{"id": 100}, map[string]any{"owner_id": "u1"}),
		mut("m13", "gen", "upsert", map[string]any{"id": 101}, map[string]any{"owner_id": "u1"}),
		mut("m14", "gen", "update", map[string]any{"id": 1}, map[string]any{"owner_id": "u1"}),
	)
	for _, id := range []string{"m2", "m3"} {
		if list, o := outcome(t, resp, id); list != "accepted" || o["server_version"] != version || o["server_row"] == nil {
			t.Fatalf("%s (upsert naming the key only): %s %v, want applied with version %s", id, list, o, version)
		}
	}
	for id, msg := range map[string]string{"m4": "too large", "m5": "generated by the database", "m8": "id",
		"m12": "generated by the database", "m13": "generated by the database"} {
		if list, o := outcome(t, resp, id); list != "rejected" || o["code"] != "validation_failed" || !strings.Contains(o["message"].(string), msg) {
			t.Fatalf("%s: %s %v, want validation_failed naming %q", id, list, o, msg)
		}
	}
	for _, id := range []string{"m6", "m7"} {
		if list, o := outcome(t, resp, id); list != "rejected" || o["code"] != "version_conflict" || o["message"] != "the row does not exist" {
			t.Fatalf("%s (a key longer than varchar(5)): %s %v, want the row does not exist", id, list, o)
		}
	}
	if got := rowsOf(t, e.d, `SELECT id FROM app.codes`); len(got) != 1 || got[0] != "abcde" {
		t.Fatalf("codes after the longer keys: %v, want abcde untouched", got)
	}
	if list, o := outcome(t, resp, "m9"); list != "accepted" || o["server_version"] == nil {
		t.Fatalf("m9 (an upper-case uuid key): %s %v, want applied with its version", list, o)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM app.gen`); n != 1 {
		t.Fatalf("app.gen holds %d rows after the refused inserts, want 1", n)
	}
	for _, id := range []string{"m10", "m11", "m14"} {
		if list, o := outcome(t, resp, id); list != "accepted" || o["server_version"] == nil {
			t.Fatalf("%s: %s %v, want applied with its version", id, list, o)
		}
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM app.docs WHERE title <> 'SECRET-title'`); n != 0 {
		t.Fatalf("the refused title was written")
	}
	waitMaterialized(t, e.d)
}

// TestSyncPushIgnoresShadowingTempTables: in a session of the service role, a
// temporary table named like a system catalog would be found before the
// catalog by an unqualified name (pg_temp is searched first unless the
// search_path lists it); Synchro's functions list it last, so such a table
// changes nothing: the push is applied as usual.
func TestSyncPushIgnoresShadowingTempTables(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	e.connect(t, "u1", "c1")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.d.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET ROLE synchro_service;
		CREATE TEMP TABLE pg_attribute (attrelid oid, attname name, atttypid oid, atttypmod integer, attnum smallint,
			attisdropped boolean, attidentity "char", attgenerated "char");
		CREATE TEMP TABLE pg_class (oid oid, relname name, relnamespace oid, relkind "char")`); err != nil {
		t.Fatal(err)
	}
	var resp string
	if err := conn.QueryRow(ctx, `SELECT synchro.push('u1', $1::jsonb, 8388608)::text`,
		`{"client_id":"c1","mutations":[{"mutation_id":"m1","table":"docs","op":"insert","pk":{"id":"d1"},"columns":{"owner_id":"u1","data":"/w=="}}]}`).Scan(&resp); err != nil {
		t.Fatalf("push in a session with shadowing temporary tables: %v", err)
	}
	if !strings.Contains(resp, `"status": "applied"`) || queryInt(t, e.d, `SELECT count(*) FROM app.docs WHERE id = 'd1' AND data = '\xff'`) != 1 {
		t.Fatalf("push answered %s, want the insert applied", resp)
	}
}

// TestSyncPushRendersUnderAnyOutputSettings: a database whose sessions default
// to other output settings than the wire's (bytea_output escape, DateStyle
// SQL/DMY, another TimeZone) changes nothing: push answers server_row exactly
// as pull delivers the captured row.
func TestSyncPushRendersUnderAnyOutputSettings(t *testing.T) {
	t.Parallel()
	base := newSyncEnv(t, "")
	base.d.Exec(t, `DO $$ BEGIN
		EXECUTE format('ALTER DATABASE %I SET bytea_output = escape', current_database());
		EXECUTE format('ALTER DATABASE %I SET DateStyle = ''SQL, DMY''', current_database());
		EXECUTE format('ALTER DATABASE %I SET TimeZone = ''Asia/Kolkata''', current_database());
	END $$`)
	e := base.epServer(t) // a new pool: its sessions take the database's settings
	e.connect(t, "u1", "c1")
	cols := map[string]any{"owner_id": "u1", "data": "AAEC/w==", "at": "2026-03-20T18:22:11.5Z"}
	resp := e.push(t, "u1", "c1", mut("o1", "docs", "insert", map[string]any{"id": "o1"}, cols))
	list, o := outcome(t, resp, "o1")
	if list != "accepted" || o["status"] != "applied" {
		t.Fatalf("push answered %v, want o1 applied", resp)
	}
	row := o["server_row"].(map[string]any)
	if row["data"] != cols["data"] || row["at"] != cols["at"] {
		t.Fatalf("server_row %s, want data %v and at %v", mustMarshal(t, row), cols["data"], cols["at"])
	}
	waitMaterialized(t, e.d)
	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 3, r)
	if got := r.rows["user:u1"][rowKey("docs", map[string]any{"id": "o1"})].Row; mustMarshal(t, got) != mustMarshal(t, row) {
		t.Fatalf("pulled %s, push answered %s", mustMarshal(t, got), mustMarshal(t, row))
	}
}

// TestSyncPushRefusedWhileTableDrifted: a synced table that no longer matches
// its registration (a synced column, its key or the table renamed, a synced
// column dropped) refuses the whole push with 503 not_ready (retryable), not a
// 500, and writes nothing, not even the mutations before the failing one;
// readiness reports the drift. Put back, the same push applies.
func TestSyncPushRefusedWhileTableDrifted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, ddl, repair string }{
		{"column_renamed", `ALTER TABLE app.docs RENAME COLUMN title TO heading`, `ALTER TABLE app.docs RENAME COLUMN heading TO title`},
		{"key_renamed", `ALTER TABLE app.docs RENAME COLUMN id TO ident`, `ALTER TABLE app.docs RENAME COLUMN ident TO id`},
		{"table_renamed", `ALTER TABLE app.docs RENAME TO documents`, `ALTER TABLE app.documents RENAME TO docs`},
		// Another table took the registered name over: push must not write it.
		{"schema_renamed_and_name_taken", `ALTER TABLE app.docs SET SCHEMA public; ALTER TABLE app.tasks SET SCHEMA public;
			CREATE TABLE app.docs (LIKE public.docs INCLUDING ALL); CREATE TABLE app.tasks (LIKE public.tasks INCLUDING ALL)`,
			`DROP TABLE app.docs, app.tasks; ALTER TABLE public.docs SET SCHEMA app; ALTER TABLE public.tasks SET SCHEMA app`},
		{"column_dropped", `ALTER TABLE app.docs DROP COLUMN title`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newSyncEnv(t, `INSERT INTO app.projects VALUES ('p1', 'u1')`)
			e.connect(t, "u1", "c1")
			e.d.Exec(t, tc.ddl)
			body := map[string]any{"client_id": "c1", "batch_id": "b1", "mutations": []any{
				mut("m1", "tasks", "insert", map[string]any{"id": 1}, map[string]any{"project_id": "p1", "title": "t"}),
				mut("m2", "docs", "insert", map[string]any{"id": "d1"}, map[string]any{"owner_id": "u1", "title": "x"}),
			}}
			r := e.post(t, "u1", "/sync/push", body)
			requireError(t, "push into a drifted table", r, 503, "not_ready")
			// Rows in any table of those names (the registered ones, renamed or
			// not, and any that took a name over), and recorded mutations.
			if n := queryInt(t, e.d, `SELECT (SELECT count(*) FROM synchro.mutation) + (SELECT coalesce(sum((xpath('/row/n/text()',
					query_to_xml(format('SELECT count(*) AS n FROM %s', c.oid::regclass), false, true, '')))[1]::text::int), 0)
				FROM pg_class c WHERE c.relname IN ('docs', 'documents', 'tasks') AND c.relkind = 'r')`); n != 0 {
				t.Fatalf("the refused push wrote %d rows", n)
			}
			if !queryBool(t, e.d, `SELECT NOT ok FROM synchro.readiness WHERE "check" = 'registry'`) {
				t.Fatalf("readiness does not report the drift")
			}
			if tc.repair == "" {
				return
			}
			e.d.Exec(t, tc.repair)
			resp := requireOK(t, "push after the repair", e.post(t, "u1", "/sync/push", body))
			for _, id := range []string{"m1", "m2"} {
				if list, o := outcome(t, resp, id); list != "accepted" {
					t.Fatalf("%s after the repair: %s %v, want applied", id, list, o)
				}
			}
		})
	}
}

// TestSyncPushServerRowEqualsPull: push answers server_row exactly as pull
// delivers the captured row, for every portable type, a column's default and
// NULL: a boolean (whose cast to text differs from its output), character(n)
// padding, floats, dates and times, uuid, json and bytes. It used to answer
// 500 for any row with a boolean, after the write had committed.
func TestSyncPushServerRowEqualsPull(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `CREATE TABLE app.kinds (id text PRIMARY KEY, owner_id text NOT NULL,
			done boolean NOT NULL DEFAULT false, flag boolean, code character(4), f double precision, r real, num numeric,
			d date, tm time, ttz timetz, ts timestamp, u uuid, j json, vc varchar(10), i2 smallint, i8 bigint);
		SELECT synchro.register_table('app.kinds', '{"kind":"column","template":"user:{owner_id}"}')`)
	e.connect(t, "u1", "c1")
	muts := []map[string]any{
		mut("k1", "kinds", "insert", map[string]any{"id": "k1"}, map[string]any{"owner_id": "u1"}),
		mut("k2", "kinds", "insert", map[string]any{"id": "k2"}, map[string]any{"owner_id": "u1", "done": true, "flag": false,
			"code": "ab", "f": 0.1, "r": 1.5, "num": 12.50, "d": "2026-02-03", "tm": "04:05:06.5", "ttz": "04:05:06+02",
			"ts": "2026-02-03T04:05:06.123456", "u": "0a0b0c0d-0000-4000-8000-00000000000f", "j": map[string]any{"a": []any{1, "x"}},
			"vc": "v", "i2": -3, "i8": 9007199254740993}),
		mut("k3", "kinds", "insert", map[string]any{"id": "k3"}, map[string]any{"owner_id": "u1", "code": "abcd"}),
	}
	resp := e.push(t, "u1", "c1", muts...)
	waitMaterialized(t, e.d)
	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 10, r)
	for _, m := range muts {
		id := m["mutation_id"].(string)
		list, o := outcome(t, resp, id)
		if list != "accepted" || o["status"] != "applied" {
			t.Fatalf("%s: %s %v, want applied", id, list, o)
		}
		pulled := r.rows["user:u1"][rowKey("kinds", map[string]any{"id": id})].Row
		if got, want := mustMarshal(t, o["server_row"]), mustMarshal(t, pulled); got != want {
			t.Fatalf("%s: push answered %s, pull delivers %s", id, got, want)
		}
	}
	if _, o := outcome(t, resp, "k2"); mustMarshal(t, o["server_row"].(map[string]any)["code"]) != `"ab  "` {
		t.Fatalf("k2: code %v, want its padding", o["server_row"])
	}
}

// TestSyncPushLeavesInheritedChildRowsAlone: rows of an inheritance child are
// read through its parent but are not the synced table's (never captured;
// readiness reports the child). Push neither updates nor deletes them: for the
// synced table the row does not exist.
func TestSyncPushLeavesInheritedChildRowsAlone(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	e.connect(t, "u1", "c1")
	e.d.Exec(t, `CREATE TABLE app.docs_child () INHERITS (app.docs);
		INSERT INTO app.docs_child (id, owner_id, title) VALUES ('c1', 'u1', 'child')`)
	resp := e.push(t, "u1", "c1",
		mut("m1", "docs", "update", map[string]any{"id": "c1"}, map[string]any{"title": "changed"}),
		mut("m2", "docs", "delete", map[string]any{"id": "c1"}, nil),
		mut("m3", "docs", "upsert", map[string]any{"id": "c1"}, map[string]any{"owner_id": "u1", "title": "parent"}))
	for _, id := range []string{"m1", "m2"} {
		if list, o := outcome(t, resp, id); list != "rejected" || o["code"] != "version_conflict" || o["message"] != "the row does not exist" {
			t.Fatalf("%s on a child's row: %s %v, want version_conflict: the row does not exist", id, list, o)
		}
	}
	if list, o := outcome(t, resp, "m3"); list != "accepted" || o["server_row"].(map[string]any)["title"] != "parent" {
		t.Fatalf("m3 (an upsert of the key): %s %v, want the parent's new row", list, o)
	}
	if got := rowsOf(t, e.d, `SELECT tableoid::regclass::text || ' ' || title FROM app.docs WHERE id = 'c1' ORDER BY 1`); !slices.Equal(got, []string{"app.docs parent", "app.docs_child child"}) {
		t.Fatalf("rows with key c1: %v", got)
	}
	if !queryBool(t, e.d, `SELECT NOT ok FROM synchro.readiness WHERE "check" = 'registry'`) {
		t.Fatalf("readiness does not report the child table")
	}
}
