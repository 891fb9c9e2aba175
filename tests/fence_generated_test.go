package tests

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/migrate"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// generatedSources returns, for registered relation rel, the source of its
// generated fence and key guard as installed and as the generators make them
// from the registry now.
func generatedSources(t *testing.T, d *testdb.DB, rel string) (fence, wantFence, guard, wantGuard string) {
	t.Helper()
	err := d.Pool.QueryRow(context.Background(), `
		SELECT f.prosrc, synchro.fence_source(r.relation_id), g.prosrc, synchro.key_guard_source(r.relation_id)
		FROM synchro.relation r
		JOIN pg_proc f ON f.oid = to_regprocedure(format('synchro_capture.%I()', 'fence_' || r.relation_id))
		JOIN pg_proc g ON g.oid = to_regprocedure(format('synchro_capture.%I()', 'key_guard_' || r.relation_id))
		WHERE r.relation_oid = $1::regclass`, rel).Scan(&fence, &wantFence, &guard, &wantGuard)
	if err != nil {
		t.Fatalf("generated capture functions of %s: %v", rel, err)
	}
	return fence, wantFence, guard, wantGuard
}

// triggersReady reports the readiness check of the capture triggers.
func triggersReady(t *testing.T, d *testdb.DB) (bool, string) {
	t.Helper()
	var ok bool
	var reason string
	if err := d.Pool.QueryRow(context.Background(), `SELECT ok, reason FROM synchro.readiness WHERE "check" = 'triggers'`).Scan(&ok, &reason); err != nil {
		t.Fatal(err)
	}
	return ok, reason
}

// fencesOf decodes slot and returns the pairs of every transaction with row
// events or fences, each paired as capture pairs them.
func fencesOf(t *testing.T, d *testdb.DB, slot string) [][]pairView {
	t.Helper()
	var out [][]pairView
	for _, txn := range d.Decode(t, slot) {
		if len(txn.Rows) > 0 || len(txn.Fences) > 0 {
			out = append(out, pairsOf(t, d, txn))
		}
	}
	return out
}

// TestGeneratedCaptureFunctionsAreTheRelations: registration installs a
// fence and a key guard of the relation's own, generated from the registry
// with its identity compiled in: executable by nobody but their owner, the
// fence a security definer (as the generic fence was) and the key guard not,
// both with a pinned search_path. A relation and key column whose names need
// quoting (the names are the user's) compile and fence. Unregistering drops
// them.
func TestGeneratedCaptureFunctionsAreTheRelations(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA "App ""x""";
		CREATE TABLE "App ""x"""."Docs; DROP TABLE y" ("Key @RID@ ""k""" text PRIMARY KEY, owner_id text);
		SELECT synchro.register_table('"App ""x"""."Docs; DROP TABLE y"', '{"kind":"column","template":"user:{owner_id}"}', '{"name":"docs"}')`)
	rel := `"App ""x"""."Docs; DROP TABLE y"`
	fence, wantFence, guard, wantGuard := generatedSources(t, d, rel)
	if fence != wantFence || guard != wantGuard {
		t.Fatalf("installed capture functions differ from the generators' output")
	}
	got := rowsOf(t, d, `SELECT p.proname || ' definer=' || p.prosecdef || ' config=' || array_to_string(p.proconfig, ';')
			|| ' acl=' || coalesce(array_to_string(p.proacl, ';'), 'default')
		FROM pg_proc p WHERE p.pronamespace = 'synchro_capture'::regnamespace ORDER BY p.proname`)
	owner := queryText(t, d, `SELECT pg_get_userbyid(proowner) FROM pg_proc WHERE pronamespace = 'synchro_capture'::regnamespace LIMIT 1`)
	rid := queryText(t, d, `SELECT relation_id::text FROM synchro.relation`)
	want := []string{
		"fence_" + rid + " definer=true config=search_path=pg_catalog, pg_temp acl=" + owner + "=X/" + owner,
		"key_guard_" + rid + " definer=false config=search_path=pg_catalog, pg_temp acl=" + owner + "=X/" + owner,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("generated functions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	slot := d.CreateSlot(t)
	d.Exec(t, `INSERT INTO `+rel+` VALUES ('a', 'u1');
		UPDATE `+rel+` SET owner_id = 'u2' WHERE "Key @RID@ ""k""" = 'a';
		DELETE FROM `+rel+` WHERE "Key @RID@ ""k""" = 'a'`)
	txns := fencesOf(t, d, slot)
	if len(txns) != 1 {
		t.Fatalf("want 1 transaction, got %d", len(txns))
	}
	equalPairs(t, txns[0], []pairView{{"insert", "a", 1}, {"update", "a", 2}, {"delete", "a", 3}})
	requireState(t, d.ExecErr(`INSERT INTO `+rel+` VALUES ('b', 'u1'); UPDATE `+rel+` SET "Key @RID@ ""k""" = 'c'`), "0A000", "primary key change")
	if ok, reason := triggersReady(t, d); !ok {
		t.Fatalf("readiness of the triggers: %s", reason)
	}

	d.Exec(t, `SELECT synchro.unregister_table('`+strings.ReplaceAll(rel, `'`, `''`)+`')`)
	if n := queryInt(t, d, `SELECT count(*) FROM pg_proc WHERE pronamespace = 'synchro_capture'::regnamespace`); n != 0 {
		t.Fatalf("%d generated functions left after unregistering", n)
	}
}

// TestGeneratedFenceAfterColumnChanges: a relation's generated fence and key
// guard depend on the registry alone, so adding, dropping or renaming a column
// other than the key leaves them as generated, and they go on fencing every
// write, also in a session that ran them before the change (PL/pgSQL keeps a
// compiled function per session). Renaming the key column makes the key
// unreadable by its registered name: every write fails 55000, as with the
// generic fence, and renaming it back restores them. A retyped key is read by
// name, with its new type.
func TestGeneratedFenceAfterColumnChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.docs (id int PRIMARY KEY, title text, owner_id text);
		SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner_id}"}')`)
	fence, _, guard, _ := generatedSources(t, d, "app.docs")
	slot := d.CreateSlot(t)
	// One session throughout: it compiles the functions at its first write.
	conn, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exec := func(sql string) error {
		_, err := conn.Exec(ctx, sql)
		return err
	}
	write := func(key string) {
		t.Helper()
		if err := exec(`BEGIN; INSERT INTO app.docs (id, owner_id) VALUES (` + key + `, 'u1');
			UPDATE app.docs SET owner_id = 'u2' WHERE id = ` + key + `; COMMIT`); err != nil {
			t.Fatalf("writing row %s: %v", key, err)
		}
	}
	write("1")
	for _, ddl := range []string{
		`ALTER TABLE app.docs ADD COLUMN extra text`,
		`ALTER TABLE app.docs RENAME COLUMN title TO heading`,
		`ALTER TABLE app.docs DROP COLUMN heading`,
	} {
		if err := exec(ddl); err != nil {
			t.Fatal(err)
		}
	}
	write("2")
	if err := exec(`DELETE FROM app.docs WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	f, wantF, g, wantG := generatedSources(t, d, "app.docs")
	if f != fence || g != guard || f != wantF || g != wantG {
		t.Fatalf("a column change altered the generated functions, or the generators' output")
	}
	if ok, reason := triggersReady(t, d); !ok {
		t.Fatalf("readiness of the triggers after the column changes: %s", reason)
	}

	if err := exec(`ALTER TABLE app.docs RENAME COLUMN id TO ident`); err != nil {
		t.Fatal(err)
	}
	requireState(t, exec(`INSERT INTO app.docs (ident, owner_id) VALUES (3, 'u1')`), "55000", `registered key column "id" of app.docs is missing`)
	requireState(t, exec(`UPDATE app.docs SET owner_id = 'u3' WHERE ident = 2`), "55000", `registered key column "id" of app.docs is missing`)
	requireState(t, exec(`DELETE FROM app.docs WHERE ident = 2`), "55000", `registered key column "id" of app.docs is missing`)
	if err := exec(`ALTER TABLE app.docs RENAME COLUMN ident TO id`); err != nil {
		t.Fatal(err)
	}
	write("3")
	// A key retyped in place (a rewrite, in a transaction of its own).
	if err := exec(`ALTER TABLE app.docs ALTER COLUMN id TYPE bigint`); err != nil {
		t.Fatal(err)
	}
	write("4000000000")
	requireState(t, exec(`UPDATE app.docs SET id = 5 WHERE id = 4000000000`), "0A000", "primary key change")

	txns := fencesOf(t, d, slot)
	want := [][]pairView{
		{{"insert", "1", 1}, {"update", "1", 2}},
		{{"insert", "2", 1}, {"update", "2", 2}},
		{{"delete", "1", 1}},
		{{"insert", "3", 1}, {"update", "3", 2}},
		{{"insert", "4000000000", 1}, {"update", "4000000000", 2}},
	}
	if len(txns) != len(want) {
		t.Fatalf("%d transactions with row events, want %d: %v", len(txns), len(want), txns)
	}
	for i := range want {
		equalPairs(t, txns[i], want[i])
	}
}

// TestGeneratedCaptureFunctionsRegenerated: a generated function that is not
// what the bundle's generators make of the registry now (an earlier bundle's,
// or one replaced by hand) fails readiness; installing the function bundle
// generates every registered relation's functions again, and a
// reconfiguration generates the relation's own again.
func TestGeneratedCaptureFunctionsRegenerated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.docs (id text PRIMARY KEY, owner_id text);
		CREATE TABLE app.members (id bigint PRIMARY KEY, user_id text);
		SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner_id}"}');
		SELECT synchro.register_dependency('app.members')`)
	stale := func(kind, rel string) {
		t.Helper()
		fn := kind + "_" + queryText(t, d, `SELECT relation_id::text FROM synchro.relation WHERE relation_oid = $1::regclass`, rel)
		d.Exec(t, `CREATE OR REPLACE FUNCTION synchro_capture.`+fn+`() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
			SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN NULL; END $$`)
		if ok, reason := triggersReady(t, d); ok || !strings.Contains(reason, "synchro_fence") && !strings.Contains(reason, "synchro_key_guard") {
			t.Fatalf("readiness of the triggers with synchro_capture.%s replaced: %v %q", fn, ok, reason)
		}
	}
	stale("fence", "app.docs")
	stale("key_guard", "app.members")
	// The bundle installed again (as migrate does when its digest changes).
	d.Exec(t, `DELETE FROM synchro.function_bundle`)
	if _, err := migrate.Apply(ctx, d.URL, "synchro", slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"app.docs", "app.members"} {
		if f, wantF, g, wantG := generatedSources(t, d, rel); f != wantF || g != wantG {
			t.Fatalf("the bundle install left a stale capture function of %s", rel)
		}
	}
	if ok, reason := triggersReady(t, d); !ok {
		t.Fatalf("readiness of the triggers after the bundle install: %s", reason)
	}

	stale("fence", "app.docs")
	d.Exec(t, `SELECT synchro.reconfigure_table('app.docs', '{"kind":"shared","scope":"all"}')`)
	if f, wantF, _, _ := generatedSources(t, d, "app.docs"); f != wantF {
		t.Fatalf("the reconfiguration left a stale fence")
	}
	if ok, reason := triggersReady(t, d); !ok {
		t.Fatalf("readiness of the triggers after the reconfiguration: %s", reason)
	}
	slot := d.CreateSlot(t)
	d.Exec(t, `INSERT INTO app.docs VALUES ('d1', 'u1'); INSERT INTO app.members VALUES (7, 'u1')`)
	var fences []capture.Fence
	for _, txn := range d.Decode(t, slot) {
		pairsOf(t, d, txn)
		fences = append(fences, txn.Fences...)
	}
	if len(fences) != 2 || fences[0].TableID == nil || fences[1].TableID != nil {
		t.Fatalf("fences after regeneration: %+v", fences)
	}
}

// TestMigrationConvertsRegistrationsToGeneratedCaptureFunctions: relations
// registered before migration 00033 have key guards and fences (and their
// clones on partitions) running the generic synchro.key_guard() and
// synchro.fence(). The migration points each at a copy of the generic
// function under the relation's generated name, with the same arguments and
// firing state, so writes are fenced between the migration and the bundle
// install; the bundle then replaces the copies with the generated functions,
// drops the generic ones, and readiness passes. Down returns the triggers to
// the generic functions.
func TestMigrationConvertsRegistrationsToGeneratedCaptureFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.New(t)
	d.Exec(t, partitionedAndPlain)
	d.Exec(t, `ALTER TABLE app.t DISABLE TRIGGER synchro_key_guard`)
	triggers := `SELECT format('%s %s %s %s.%s() %s', t.tgrelid::regclass, t.tgname, t.tgenabled, n.nspname, p.proname,
			encode(t.tgargs, 'escape'))
		FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE t.tgname IN ('synchro_key_guard', 'synchro_fence') ORDER BY 1`
	generated := rowsOf(t, d, triggers)
	later := migrateDownTo(t, d, 32)
	generic := rowsOf(t, d, triggers)
	if later[0] != 33 { // and every later migration
		t.Fatalf("rolled back migrations %v, want 33 and those after it", later)
	}
	toGeneric := regexp.MustCompile(`synchro_capture\.(fence|key_guard)_[0-9]+\(\)`)
	for i, g := range generic {
		if want := toGeneric.ReplaceAllString(generated[i], "synchro.$1()"); g != want {
			t.Fatalf("after the Down section trigger %q, want %q", g, want)
		}
	}
	if n := queryInt(t, d, `SELECT count(*) FROM pg_namespace WHERE nspname = 'synchro_capture'`); n != 0 {
		t.Fatal("the Down section left schema synchro_capture")
	}

	// goose alone: the triggers run copies of the generic functions.
	if _, err := gooseProvider(t, d).Up(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rowsOf(t, d, triggers); strings.Join(got, "\n") != strings.Join(generated, "\n") {
		t.Fatalf("after the migration the triggers are\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(generated, "\n"))
	}
	slot := d.CreateSlot(t)
	write := func(key string) string {
		return `INSERT INTO app.p VALUES (` + key + `, 'a'); UPDATE app.p SET v = 'b' WHERE id = ` + key + `;
			INSERT INTO app.t VALUES (` + key + `, 'a'); DELETE FROM app.t WHERE id = ` + key
	}
	d.Exec(t, write("1"))
	requireState(t, d.ExecErr(`UPDATE app.p SET id = 2 WHERE id = 1`), "0A000", "primary key change")
	if ok, _ := triggersReady(t, d); ok {
		t.Fatal("readiness of the triggers passes while they run copies of the generic functions")
	}

	migrateUpAgain(t, d, nil)
	if got := rowsOf(t, d, triggers); strings.Join(got, "\n") != strings.Join(generated, "\n") {
		t.Fatalf("after the bundle install the triggers are\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(generated, "\n"))
	}
	for _, rel := range []string{"app.p", "app.t"} {
		if f, wantF, g, wantG := generatedSources(t, d, rel); f != wantF || g != wantG {
			t.Fatalf("after the bundle install %s runs functions the generators did not make", rel)
		}
	}
	if n := queryInt(t, d, `SELECT count(*) FROM pg_proc WHERE oid IN (to_regprocedure('synchro.fence()'),
			to_regprocedure('synchro.key_guard()'), to_regprocedure('synchro.row_written_frozen(oid, tid)'))`); n != 0 {
		t.Fatalf("%d generic capture functions left after the bundle install", n)
	}
	if ok, reason := triggersReady(t, d); ok || !strings.Contains(reason, "synchro_key_guard") {
		t.Fatalf("readiness of the triggers with app.t's key guard disabled: %v %q", ok, reason)
	}
	d.Exec(t, `ALTER TABLE app.t ENABLE ALWAYS TRIGGER synchro_key_guard`)
	if ok, reason := triggersReady(t, d); !ok {
		t.Fatalf("readiness of the triggers: %s", reason)
	}
	d.Exec(t, write("2"))
	txns := fencesOf(t, d, slot)
	if len(txns) != 2 {
		t.Fatalf("%d transactions with row events, want 2", len(txns))
	}
	for i, key := range []string{"1", "2"} {
		equalPairs(t, txns[i], []pairView{{"insert", key, 1}, {"update", key, 2}, {"insert", key, 3}, {"delete", key, 4}})
	}
}

// TestGeneratedFenceRefusesJSONWithNULInEveryShape: a registered column that
// can hold json (a json array, a domain over json, a composite with a json
// attribute: a capture dependency captures columns of any type) is rendered as jsonb by the generated fence, so a json value
// holding the escape \u0000, which no projection image can hold, fails the
// write with 22P05 as the generic fence's whole-row rendering made it fail;
// the same text escaped is accepted. After the column is renamed (relation
// drift) the fence renders the whole row and still refuses it.
func TestGeneratedFenceRefusesJSONWithNULInEveryShape(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE DOMAIN app.doc AS json;
		CREATE TYPE app.pair AS (n int, js json);
		CREATE TABLE app.t (id int PRIMARY KEY, arr json[], dom app.doc, comp app.pair, other text);
		SELECT synchro.register_dependency('app.t')`)
	for _, tc := range []struct{ name, set string }{
		{"array", `arr = ARRAY['{"a": "x\u0000y"}'::json]`},
		{"domain", `dom = '["\u0000"]'`},
		{"composite", `comp = ROW(1, '"\u0000"')::app.pair`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireState(t, d.ExecErr(`INSERT INTO app.t (id) VALUES (1); UPDATE app.t SET `+tc.set+` WHERE id = 1`), "22P05", "Unicode escape")
			d.Exec(t, `INSERT INTO app.t (id) VALUES (1); UPDATE app.t SET `+strings.ReplaceAll(tc.set, `\u`, `\\u`)+` WHERE id = 1; DELETE FROM app.t`)
		})
	}
	d.Exec(t, `ALTER TABLE app.t RENAME COLUMN dom TO dom2`)
	requireState(t, d.ExecErr(`INSERT INTO app.t (id, dom2) VALUES (2, '["\u0000"]')`), "22P05", "Unicode escape")
	d.Exec(t, `INSERT INTO app.t (id, other) VALUES (2, 'x\u0000y')`)
}
