package tests

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/synchro-sync/synchro/internal/migrate"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestMigrateRollbackStepByStep: goose rolls a database in use (a registered
// table, a pushed and captured row, the worker's slot) back one migration at a
// time, from the latest version to 0. Every step succeeds and leaves in schema
// synchro what the migrations up to the version it reached leave (compared with
// a database migrated up one migration at a time), and synchrod would refuse the
// database after each (migrate.Check). At 0 nothing of Synchro is left but
// goose's version table (and the cluster-wide roles); the application's tables
// keep their rows. Migrating again brings it all back: Check passes, and a push
// is captured and pulled.
func TestMigrateRollbackStepByStep(t *testing.T) {
	ctx := context.Background()

	// What the migrations leave at each version.
	ref := testdb.Empty(t)
	ref.Exec(t, `CREATE SCHEMA synchro`)
	refMigrations := gooseProvider(t, ref)
	if _, err := refMigrations.GetDBVersion(ctx); err != nil { // creates goose's version table
		t.Fatal(err)
	}
	want := map[int64][]string{0: migrationObjects(t, ref)}
	for {
		r, err := refMigrations.UpByOne(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		want[r.Source.Version] = migrationObjects(t, ref)
	}

	e := newSyncEnv(t, "")
	e.connect(t, "u1", "c1")
	pushed := e.push(t, "u1", "c1", mut("m1", "docs", "insert", map[string]any{"id": "d1"}, map[string]any{"owner_id": "u1", "title": "before"}))
	if list, o := outcome(t, pushed, "m1"); list != "accepted" {
		t.Fatalf("push before the rollback: %v", o)
	}
	waitMaterialized(t, e.d)
	// Rolling back is for a stopped synchrod: the migration that created the
	// stream's progress drops the worker's slot, which must not be in use.
	if err := e.w.stop(t); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the worker's slot released", 30*time.Second, func() (bool, error) {
		return queryInt(t, e.d, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, e.cfg.Slot) == 0, nil
	})

	migrations := gooseProvider(t, e.d)
	version, err := migrations.GetDBVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var all []int64
	for version > 0 {
		r, err := migrations.Down(ctx)
		if err != nil {
			t.Fatalf("rolling back from version %d: %v", version, err)
		}
		all = append([]int64{r.Source.Version}, all...)
		if version, err = migrations.GetDBVersion(ctx); err != nil {
			t.Fatal(err)
		}
		if got := migrationObjects(t, e.d); !slices.Equal(got, want[version]) {
			t.Fatalf("rolled back %s to version %d:\nmissing %q\nleft over %q", r.Source.Path, version,
				missingFrom(got, want[version]), missingFrom(want[version], got))
		}
		if err := migrate.Check(ctx, e.d.Pool); !errors.Is(err, migrate.ErrStale) {
			t.Fatalf("Check after rolling back %s: %v, want ErrStale", r.Source.Path, err)
		}
		if version > 0 {
			if n := queryInt(t, e.d, `SELECT count(*) FROM synchro.function_bundle`); n != 0 {
				t.Fatalf("after rolling back %s the function bundle is still recorded as installed", r.Source.Path)
			}
		}
	}

	got := rowsOf(t, e.d, `
		SELECT 'relation ' || relname FROM pg_class WHERE relnamespace = 'synchro'::regnamespace
		UNION ALL SELECT 'function ' || oid::regprocedure FROM pg_proc WHERE pronamespace = 'synchro'::regnamespace
		UNION ALL SELECT 'type ' || typname FROM pg_type t WHERE typnamespace = 'synchro'::regnamespace
			AND NOT EXISTS (SELECT FROM pg_class c WHERE c.reltype IN (t.oid, t.typelem))
		UNION ALL SELECT 'extension ' || extname FROM pg_extension WHERE extnamespace = 'synchro'::regnamespace
		UNION ALL SELECT 'publication ' || pubname FROM pg_publication
		UNION ALL SELECT 'slot ' || slot_name FROM pg_replication_slots WHERE database = current_database()
		UNION ALL SELECT format('trigger %s on %s', tgname, tgrelid::regclass) FROM pg_trigger WHERE NOT tgisinternal
		UNION ALL SELECT 'role ' || rolname FROM pg_roles WHERE rolname LIKE 'synchro\_%'
		ORDER BY 1`)
	if !slices.Equal(got, []string{"relation goose_db_version", "relation goose_db_version_id_seq", "relation goose_db_version_pkey",
		"role synchro_operator", "role synchro_service"}) {
		t.Fatalf("left at version 0: %q", got)
	}
	if n := queryInt(t, e.d, `SELECT count(*) FROM app.docs`); n != 1 {
		t.Fatalf("app.docs holds %d rows after the rollback, want 1", n)
	}

	res, err := migrate.Apply(ctx, e.d.URL, "synchro", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Applied, all) || !res.BundleChanged {
		t.Fatalf("migrating again: %+v; want migrations %v applied and the bundle installed", res, all)
	}
	if err := migrate.Check(ctx, e.d.Pool); err != nil {
		t.Fatalf("Check after migrating again: %v", err)
	}
	e.d.Exec(t, `DELETE FROM app.docs;
		SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner_id}"}')`)
	e.w = startStreaming(t, e.d, e.cfg)
	configureReadiness(t, e.d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	waitCaptureReady(t, e.d)
	e.connect(t, "u1", "c1")
	pushed = e.push(t, "u1", "c1", mut("m2", "docs", "insert", map[string]any{"id": "d2"}, map[string]any{"owner_id": "u1", "title": "after"}))
	list, o := outcome(t, pushed, "m2")
	if list != "accepted" {
		t.Fatalf("push after migrating again: %v", o)
	}
	waitMaterialized(t, e.d)
	r := newReplica()
	e.rebuildScope(t, "u1", "c1", "user:u1", 10, r)
	e.requireConverged(t, r, "user:u1")
	if got := r.rows["user:u1"][rowKey("docs", map[string]any{"id": "d2"})]; got.Version != o["server_version"] {
		t.Fatalf("pulled %+v, want the pushed version %v", got, o["server_version"])
	}
}

// TestMigrateRollbackThenMigrate: after goose rolls back one migration, or
// several past the ones the function bundle's views and functions depend on
// and then applies them again by itself (goose up), synchrod refuses the
// database until synchroctl migrate has run, which installs the bundle again.
func TestMigrateRollbackThenMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d := testdb.New(t)
	migrations := gooseProvider(t, d)
	latest, err := migrations.GetDBVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := migrations.Down(ctx); err != nil {
		t.Fatalf("rolling back one migration: %v", err)
	}
	if err := migrate.Check(ctx, d.Pool); !errors.Is(err, migrate.ErrStale) {
		t.Fatalf("Check after rolling back one migration: %v, want ErrStale", err)
	}
	res, err := migrate.Apply(ctx, d.URL, "synchro", log)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Applied, []int64{latest}) || !res.BundleChanged {
		t.Fatalf("migrate after rolling back one migration: %+v; want %d applied and the bundle installed", res, latest)
	}
	if err := migrate.Check(ctx, d.Pool); err != nil {
		t.Fatalf("Check after migrating again: %v", err)
	}

	// Back to version 1 (the bundle's views over the capture tables and its
	// functions over client rows go), then forward with goose alone.
	if _, err := migrations.DownTo(ctx, 1); err != nil {
		t.Fatalf("rolling back to version 1: %v", err)
	}
	if _, err := migrations.Up(ctx); err != nil {
		t.Fatalf("goose up: %v", err)
	}
	if err := migrate.Check(ctx, d.Pool); !errors.Is(err, migrate.ErrStale) {
		t.Fatalf("Check after goose up without synchroctl migrate: %v, want ErrStale", err)
	}
	res, err = migrate.Apply(ctx, d.URL, "synchro", log)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 0 || !res.BundleChanged {
		t.Fatalf("migrate after goose up: %+v; want only the bundle installed", res)
	}
	if err := migrate.Check(ctx, d.Pool); err != nil {
		t.Fatalf("Check after migrating: %v", err)
	}
	if n := queryInt(t, d, `SELECT (SELECT count(*) FROM synchro.poison) + (SELECT count(*) FROM synchro.synced_row)
		+ (SELECT count(*) FROM synchro.rule_read)`); n != 0 {
		t.Fatalf("the bundle's views hold %d rows in an empty database", n)
	}
	if got := queryText(t, d, `SELECT ok || ' ' || reason FROM synchro.readiness WHERE "check" = 'database'`); got != "true reachable; function bundle installed" {
		t.Fatalf("readiness of the database: %q", got)
	}
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.t (id text PRIMARY KEY);
		SELECT synchro.register_table('app.t', '{"kind":"shared","scope":"all"}')`)
	if got := queryText(t, d, `SELECT name FROM synchro.synced_table`); got != "t" {
		t.Fatalf("registered %q", got)
	}
}

// gooseProvider is the goose provider synchroctl migrate uses, over d, as a
// DBA's goose command runs the migrations.
func gooseProvider(t *testing.T, d *testdb.DB) *goose.Provider {
	t.Helper()
	sqlDB, err := sql.Open("pgx", d.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	p, err := migrate.NewProvider(sqlDB)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// migrationObjects lists what the schema migrations make in schema synchro:
// its tables, sequences and indexes, their columns and constraints, and its
// extensions; not the function bundle's functions and views, nor the
// projection indexes that registration creates.
func migrationObjects(t *testing.T, d *testdb.DB) []string {
	t.Helper()
	return rowsOf(t, d, `
		SELECT format('%s %s', c.relkind, c.relname) FROM pg_class c
		WHERE c.relnamespace = 'synchro'::regnamespace AND c.relkind <> 'v' AND c.relname NOT LIKE 'projection\_r%'
		UNION ALL
		SELECT format('column %s.%s %s%s%s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
		              CASE WHEN a.attnotnull THEN ' not null' END, ' default ' || pg_get_expr(ad.adbin, ad.adrelid))
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
		WHERE c.relnamespace = 'synchro'::regnamespace AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
		UNION ALL
		SELECT format('constraint %s on %s: %s', conname, conrelid::regclass, pg_get_constraintdef(oid)) FROM pg_constraint
		WHERE connamespace = 'synchro'::regnamespace
		UNION ALL
		SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE c.relnamespace = 'synchro'::regnamespace AND c.relname NOT LIKE 'projection\_r%'
		UNION ALL
		SELECT 'extension ' || extname FROM pg_extension WHERE extnamespace = 'synchro'::regnamespace
		ORDER BY 1`)
}

// missingFrom lists the lines of want that got lacks.
func missingFrom(got, want []string) []string {
	var missing []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	return missing
}
