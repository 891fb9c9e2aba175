package tests

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/synchro-sync/synchro/internal/migrate"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestMigrateUpgradeFromPreviousLayout: a database that the build before the
// function bundle's folders (sql/functions/load_order.txt) migrated, with a
// registered table whose row that build's synchrod captured, upgrades to this
// build. synchroctl migrate installs this build's bundle (its digest, which
// differs from the old one), leaving the same functions, views and privileges
// as a fresh install; registration still works, and a worker of this build
// resumes the old stream: rows written before and after the upgrade are
// materialized and readiness passes.
//
// The old build comes from git history (git archive of the parent of the
// commit that added load_order.txt); the test fails without git or history.
func TestMigrateUpgradeFromPreviousLayout(t *testing.T) {
	ctx := context.Background()
	bin := buildPreviousLayout(t)
	d := testdb.Empty(t)
	runOK(t, filepath.Join(bin, "synchroctl"), "migrate", "--database-url", d.URL)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.docs (id text PRIMARY KEY, owner_id text NOT NULL, title text);
		SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner_id}"}')`)
	addr, slot := freeAddr(t), synchrodSlot()
	stopOld := startSynchrod(t, d, filepath.Join(bin, "synchrod"), addr, slot, "--database-url", d.URL, "--listen", addr, "--slot", slot)
	waitStream(t, d) // a write before the stream's start would never be decoded
	d.Exec(t, `INSERT INTO app.docs VALUES ('d1', 'u1', 'before the upgrade')`)
	waitMaterialized(t, d)
	stopOld()

	if old := queryText(t, d, `SELECT digest FROM synchro.function_bundle`); old == migrate.BundleDigest() {
		t.Fatalf("the previous layout installed digest %s, this build's: the bundle's digest did not change", old)
	}
	if err := migrate.Check(ctx, d.Pool); !errors.Is(err, migrate.ErrStale) {
		t.Fatalf("Check of the previous layout's bundle: %v, want ErrStale", err)
	}
	res, err := migrate.Apply(ctx, d.URL, "synchro", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("upgrading: %v", err)
	}
	if !res.BundleChanged || res.BundleDigest != migrate.BundleDigest() {
		t.Fatalf("upgrade: %+v; want this build's bundle (%s) installed", res, migrate.BundleDigest())
	}
	if err := migrate.Check(ctx, d.Pool); err != nil {
		t.Fatalf("Check after the upgrade: %v", err)
	}
	if got, want := bundleObjects(t, d), bundleObjects(t, testdb.New(t)); !slices.Equal(got, want) {
		t.Fatalf("schema synchro after the upgrade and after a fresh install differ:\nonly upgraded: %q\nonly fresh: %q",
			missingFrom(want, got), missingFrom(got, want))
	}

	d.Exec(t, `CREATE TABLE app.notes (id text PRIMARY KEY, owner_id text NOT NULL);
		SELECT synchro.register_table('app.notes', '{"kind":"column","template":"user:{owner_id}"}')`)
	requireCaptured(t, d, "app.docs")
	requireCaptured(t, d, "app.notes")
	cfg := workerConfig(d, "upgraded")
	cfg.Slot = slot
	startWorker(t, d, cfg)
	waitState(t, d, "upgraded", "streaming")
	d.Exec(t, `UPDATE app.docs SET title = 'after the upgrade' WHERE id = 'd1';
		INSERT INTO app.docs VALUES ('d2', 'u1', 'after the upgrade');
		INSERT INTO app.notes VALUES ('n1', 'u1')`)
	waitMaterialized(t, d)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.synced_row`); n != 3 {
		t.Fatalf("%d synced rows after the upgrade, want d1, d2 and n1", n)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.row_version v
		JOIN synchro.synced_table s USING (table_id) WHERE s.name = 'docs' AND v.key = 'd1'`); n != 2 {
		t.Fatalf("d1 has %d versions, want the one captured before the upgrade and the one after", n)
	}
	configureReadiness(t, d, `'10 seconds'`, `1073741824`, `'60 seconds'`)
	waitCaptureReady(t, d)
}

// buildPreviousLayout builds synchroctl and synchrod of the commit before the
// function bundle's folders into a temporary directory and returns it.
func buildPreviousLayout(t *testing.T) string {
	t.Helper()
	git := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = ".." // the repository root, relative to this package
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v: %s(the upgrade test builds the previous layout from the repository's history: it needs git and a full clone)",
				strings.Join(args, " "), err, stderr.String())
		}
		return out
	}
	added := strings.Fields(string(git("log", "--diff-filter=A", "--format=%H", "--", "sql/functions/load_order.txt")))
	if len(added) == 0 {
		t.Fatal("no commit in the history adds sql/functions/load_order.txt: a shallow clone, or the file is not committed yet")
	}
	base := strings.TrimSpace(string(git("rev-parse", "--verify", added[len(added)-1]+"^")))
	src := t.TempDir()
	extract := exec.Command("tar", "-x", "-C", src)
	extract.Stdin = bytes.NewReader(git("archive", "--format=tar", base))
	if out, err := extract.CombinedOutput(); err != nil {
		t.Fatalf("extracting %s: %v\n%s", base, err, out)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./cmd/synchrod", "./cmd/synchroctl")
	build.Dir = src
	build.Env = append(build.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of %s: %v\n%s", base, err, out)
	}
	return bin
}

// bundleObjects lists the functions and views of schema synchro with their
// privileges.
func bundleObjects(t *testing.T, d *testdb.DB) []string {
	t.Helper()
	return queryStrings(t, d, `SELECT coalesce(array_agg(o ORDER BY o), '{}') FROM (
		SELECT p.oid::regprocedure::text || ' ' || coalesce(p.proacl::text, '-') AS o
		FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'synchro'::regnamespace
		UNION ALL
		SELECT c.oid::regclass::text || ' ' || coalesce(c.relacl::text, '-')
		FROM pg_catalog.pg_class c WHERE c.relnamespace = 'synchro'::regnamespace AND c.relkind = 'v') s`)
}
