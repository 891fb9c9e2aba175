package tests

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synchro-sync/synchro/internal/capture"
	"github.com/synchro-sync/synchro/internal/testdb"
)

// sqlState returns the SQLSTATE of a PostgreSQL error, or "" for nil / other errors.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func requireState(t *testing.T, err error, state, contains string) {
	t.Helper()
	if got := sqlState(err); got != state {
		t.Fatalf("want SQLSTATE %s, got %q (%v)", state, got, err)
	}
	if !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %q does not mention %q", err.Error(), contains)
	}
}

type pairView struct {
	op, key string
	ordinal int64
}

func pairsOf(t *testing.T, d *testdb.DB, txn *capture.Txn) []pairView {
	t.Helper()
	pairs, err := capture.Pair(txn, d.Resolver(t))
	if err != nil {
		t.Fatalf("pairing failed: %v", err)
	}
	var out []pairView
	for _, p := range pairs {
		out = append(out, pairView{p.Event.Op, p.Key, p.Fence.Ordinal})
	}
	return out
}

func equalPairs(t *testing.T, got, want []pairView) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("pairs: got %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("pair %d: got %v, want %v (all: %v)", i, got[i], want[i], got)
		}
	}
}

func TestFenceMessagesPairWithRowEvents(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.docs (id text PRIMARY KEY, title text, owner_id text);
		SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner_id}"}')`)
	slot := d.CreateSlot(t)

	d.Exec(t, `INSERT INTO app.docs VALUES ('d1', 'one', 'u1')`)
	d.Exec(t, `INSERT INTO app.docs VALUES ('d2', 'two', 'u1'), ('d3', 'three', 'u2'), ('d4', 'four', 'u2')`)
	d.Exec(t, `BEGIN;
		UPDATE app.docs SET title = 'uno' WHERE id = 'd1';
		DELETE FROM app.docs WHERE id = 'd2';
		UPDATE app.docs SET title = 'eins' WHERE id = 'd1';
		COMMIT`)
	d.Exec(t, `INSERT INTO app.docs VALUES ('d3', 'x', 'u9') ON CONFLICT (id) DO UPDATE SET title = 'drei'`)
	d.Exec(t, `INSERT INTO app.docs VALUES ('d3', 'x', 'u9') ON CONFLICT (id) DO NOTHING`)
	d.Exec(t, `UPDATE app.docs SET title = title WHERE id = 'nope'`)

	txns := d.Decode(t, slot)
	var withRows []*capture.Txn
	for _, txn := range txns {
		if len(txn.Rows) > 0 || len(txn.Fences) > 0 {
			withRows = append(withRows, txn)
		}
	}
	if len(withRows) != 4 {
		t.Fatalf("want 4 transactions with row events (ON CONFLICT DO NOTHING emits none), got %d", len(withRows))
	}
	equalPairs(t, pairsOf(t, d, withRows[0]), []pairView{{"insert", "d1", 1}})
	equalPairs(t, pairsOf(t, d, withRows[1]), []pairView{{"insert", "d2", 1}, {"insert", "d3", 2}, {"insert", "d4", 3}})
	equalPairs(t, pairsOf(t, d, withRows[2]), []pairView{{"update", "d1", 1}, {"delete", "d2", 2}, {"update", "d1", 3}})
	// ON CONFLICT DO UPDATE emits only the final update fence.
	equalPairs(t, pairsOf(t, d, withRows[3]), []pairView{{"update", "d3", 1}})

	// Every fence message carries the full identity and is recorded in synchro.fence.
	seenVersion := map[string]bool{}
	for _, txn := range withRows {
		for _, f := range txn.Fences {
			if f.RegistrationKind != capture.KindSynced || f.TableID == nil || *f.TableID != 1 {
				t.Fatalf("fence %+v of %+v: want a synced fence of table 1", f, *f.FenceTarget)
			}
			if f.Relation.Schema != "app" || f.Relation.Name != "docs" || f.Relation.OID == 0 {
				t.Fatalf("fence relation identity %+v", f.Relation)
			}
			if seenVersion[f.Version] {
				t.Fatalf("version %s allocated twice", f.Version)
			}
			seenVersion[f.Version] = true
			var op, key, version string
			var ordinal int64
			err := d.Pool.QueryRow(context.Background(),
				`SELECT op, key, version, dml_ordinal FROM synchro.fence WHERE fence_id = $1`, f.FenceID).
				Scan(&op, &key, &version, &ordinal)
			if err != nil {
				t.Fatalf("fence %s not recorded: %v", f.FenceID, err)
			}
			if op != f.Op || key != f.Key() || version != f.Version || ordinal != f.Ordinal {
				t.Fatalf("recorded fence (%s %s %s %d) differs from message %+v", op, key, version, ordinal, f)
			}
		}
	}
	// The identity reservation holds the version of the row's last fence.
	last := withRows[2].Fences[2]
	var head string
	if err := d.Pool.QueryRow(context.Background(),
		`SELECT version FROM synchro.row_head WHERE relation_id = $1 AND key = 'd1'`, last.RelationID).Scan(&head); err != nil {
		t.Fatal(err)
	}
	if head != last.Version {
		t.Fatalf("row_head version %s, want last fence version %s", head, last.Version)
	}
}

func TestFenceOfDependencyHasNoTableID(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.members (id bigint PRIMARY KEY, user_id text);
		SELECT synchro.register_dependency('app.members')`)
	slot := d.CreateSlot(t)
	d.Exec(t, `INSERT INTO app.members VALUES (7, 'u1'); DELETE FROM app.members WHERE id = 7`)
	var fences []capture.Fence
	for _, txn := range d.Decode(t, slot) {
		pairsOf(t, d, txn)
		fences = append(fences, txn.Fences...)
	}
	if len(fences) != 2 {
		t.Fatalf("want 2 fences, got %d", len(fences))
	}
	for _, f := range fences {
		if f.RegistrationKind != capture.KindDependency || f.TableID != nil || f.Key() != "7" {
			t.Fatalf("dependency fence %+v of %+v", f, *f.FenceTarget)
		}
	}
	if string(fences[0].NewKey) != "7" || string(fences[1].OldKey) != "7" {
		t.Fatalf("int64 keys must be typed JSON numbers: %s %s", fences[0].NewKey, fences[1].OldKey)
	}
}

func TestKeyChangesAreRejected(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.docs (id int PRIMARY KEY, title text);
		SELECT synchro.register_table('app.docs', '{"kind":"shared","scope":"all"}');
		INSERT INTO app.docs VALUES (1, 'a')`)

	requireState(t, d.ExecErr(`UPDATE app.docs SET id = 2 WHERE id = 1`), "0A000", "primary key change")

	// A BEFORE trigger that runs after the guard changes the key: the fence rejects it.
	d.Exec(t, `CREATE FUNCTION app.rekey() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN NEW.id := NEW.id + 100; RETURN NEW; END $$;
		CREATE TRIGGER zz_rekey BEFORE UPDATE ON app.docs FOR EACH ROW EXECUTE FUNCTION app.rekey()`)
	requireState(t, d.ExecErr(`UPDATE app.docs SET title = 'b' WHERE id = 1`), "0A000", "primary key change")

	var title string
	if err := d.Pool.QueryRow(context.Background(), `SELECT title FROM app.docs WHERE id = 1`).Scan(&title); err != nil || title != "a" {
		t.Fatalf("row changed despite rejection: %q %v", title, err)
	}
}

// TestLongKeysAreRefused: a key longer than synchro.max_key_bytes could not be
// stored beside a scope in the membership index and would block the stream
// when materialized; the fence refuses the write (54000) and nothing is written.
func TestLongKeysAreRefused(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.docs (id text PRIMARY KEY, title text);
		SELECT synchro.register_table('app.docs', '{"kind":"shared","scope":"all"}');
		INSERT INTO app.docs VALUES (repeat('k', 1024), 'longest')`)
	requireState(t, d.ExecErr(`INSERT INTO app.docs VALUES (repeat('k', 1023) || 'é', 'too long')`), "54000", "limited to 1024 bytes")
	if n := queryInt(t, d, `SELECT count(*) FROM app.docs`); n != 1 {
		t.Fatalf("%d rows, want only the 1024-byte key", n)
	}
}

func TestPartitionRowMoveIsRejected(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.events (id bigint PRIMARY KEY, body text) PARTITION BY RANGE (id);
		CREATE TABLE app.events_low PARTITION OF app.events FOR VALUES FROM (0) TO (1000);
		CREATE TABLE app.events_high PARTITION OF app.events FOR VALUES FROM (1000) TO (2000);
		SELECT synchro.register_table('app.events', '{"kind":"shared","scope":"all"}')`)
	slot := d.CreateSlot(t)
	d.Exec(t, `INSERT INTO app.events VALUES (5, 'low'), (1500, 'high')`)
	requireState(t, d.ExecErr(`UPDATE app.events SET id = 1005 WHERE id = 5`), "0A000", "primary key change")

	// A later BEFORE UPDATE trigger that moves the row to another partition: the
	// move runs as a delete and an insert, and the guard refuses the delete.
	d.Exec(t, `CREATE FUNCTION app.rekey() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.body = 'move' THEN NEW.id := NEW.id + 1000; END IF; RETURN NEW; END $$;
		CREATE TRIGGER zz_rekey BEFORE UPDATE ON app.events FOR EACH ROW EXECUTE FUNCTION app.rekey()`)
	requireState(t, d.ExecErr(`UPDATE app.events SET body = 'move' WHERE id = 5`), "0A000", "another partition")
	// Ordinary updates and deletes of partitioned rows still work.
	d.Exec(t, `UPDATE app.events SET body = 'still low' WHERE id = 5`)
	d.Exec(t, `BEGIN; UPDATE app.events SET body = 'x' WHERE id = 1500; DELETE FROM app.events WHERE id = 1500; COMMIT`)

	txns := d.Decode(t, slot)
	if len(txns) != 3 {
		t.Fatalf("want 3 transactions, got %d", len(txns))
	}
	// Partitions are published as their registered root.
	for _, ev := range txns[0].Rows {
		if ev.Relation.Name != "events" {
			t.Fatalf("row event on %s, want the root relation", ev.Relation.Name)
		}
	}
	equalPairs(t, pairsOf(t, d, txns[0]), []pairView{{"insert", "5", 1}, {"insert", "1500", 2}})
}

func TestNestedStatementFenceOrderViolationFails27000(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.items (id text PRIMARY KEY, n int NOT NULL DEFAULT 0);
		SELECT synchro.register_table('app.items', '{"kind":"shared","scope":"all"}');
		-- Fires before synchro_fence for each row (triggers fire in name order).
		CREATE FUNCTION app.touch_b() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.id = 'a' THEN UPDATE app.items SET n = n + 1 WHERE id = 'b'; END IF;
			RETURN NULL;
		END $$;
		CREATE TRIGGER aa_touch AFTER INSERT ON app.items FOR EACH ROW EXECUTE FUNCTION app.touch_b()`)

	// Row b is inserted, then (in the AFTER trigger of row a, which fires first) updated
	// by a nested statement whose fence fires before the fence of b's insert.
	requireState(t, d.ExecErr(`INSERT INTO app.items (id) VALUES ('a'), ('b')`), "27000", "nested statement")
	// With b first, b's insert fence fires before the nested update: operation order.
	d.Exec(t, `INSERT INTO app.items (id) VALUES ('b'), ('a')`)

	// A nested DELETE of a row inserted earlier in the same statement, and a nested
	// UPDATE of a row updated earlier in it, fail the same way.
	d.Exec(t, `CREATE FUNCTION app.drop_d() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.id = 'c' THEN DELETE FROM app.items WHERE id = 'd'; END IF;
			IF NEW.id = 'e' AND NEW.n = 5 THEN UPDATE app.items SET n = 6 WHERE id = 'f'; END IF;
			RETURN NULL;
		END $$;
		CREATE TRIGGER ab_drop AFTER INSERT OR UPDATE ON app.items FOR EACH ROW EXECUTE FUNCTION app.drop_d()`)
	requireState(t, d.ExecErr(`INSERT INTO app.items (id) VALUES ('c'), ('d')`), "27000", "nested statement")
	d.Exec(t, `INSERT INTO app.items (id) VALUES ('e'), ('f')`)
	err := d.ExecErr(`UPDATE app.items SET n = 5 WHERE id IN ('e', 'f')`)
	requireState(t, err, "27000", "nested statement")
	if hint := pgHint(err); hint != "" {
		t.Fatalf("a nested statement's order violation hints at a table rewrite: %q", hint)
	}
	var n int
	if err := d.Pool.QueryRow(context.Background(), `SELECT n FROM app.items WHERE id = 'b'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("n = %d, %v", n, err)
	}
}

// pgHint returns the HINT of a PostgreSQL error.
func pgHint(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Hint
	}
	return ""
}

// A table rewrite between two writes of one row in one transaction moves the
// row, so the fence cannot check the second write's order: the transaction is
// refused (27000) with a hint that names the rewrite, and changes nothing. The
// same writes with the rewrite committed apart go through.
func TestTableRewriteBetweenWritesOfOneRowIsRefusedWithAHint(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.items (id text PRIMARY KEY, n int NOT NULL DEFAULT 0);
		SELECT synchro.register_table('app.items', '{"kind":"shared","scope":"all"}');
		INSERT INTO app.items (id) VALUES ('a')`)
	fences := queryInt(t, d, `SELECT count(*) FROM synchro.fence`)
	for _, rewrite := range []string{
		`ALTER TABLE app.items ADD COLUMN z integer DEFAULT (random() * 0)::integer`,
		`ALTER TABLE app.items ALTER COLUMN n TYPE bigint`,
		`CLUSTER app.items USING items_pkey`,
	} {
		for _, second := range []string{`UPDATE app.items SET n = 2 WHERE id = 'a'`, `DELETE FROM app.items WHERE id = 'a'`} {
			err := d.ExecErr(`UPDATE app.items SET n = 1 WHERE id = 'a'; ` + rewrite + `; ` + second)
			requireState(t, err, "27000", "fired its fence after a later change")
			if hint := pgHint(err); !strings.Contains(hint, "app.items was altered in this transaction") ||
				!strings.Contains(hint, "in a transaction of its own") {
				t.Fatalf("%s then %s: hint %q does not name the rewrite", rewrite, second, hint)
			}
		}
	}
	if n := queryInt(t, d, `SELECT n FROM app.items WHERE id = 'a'`); n != 0 {
		t.Fatalf("a refused transaction changed the row: n = %d", n)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.fence`); n != fences {
		t.Fatalf("refused transactions left %d fences", n-fences)
	}
	d.Exec(t, `UPDATE app.items SET n = 1 WHERE id = 'a'`)
	d.Exec(t, `CLUSTER app.items USING items_pkey`)
	d.Exec(t, `UPDATE app.items SET n = 2 WHERE id = 'a'`)
	if n := queryInt(t, d, `SELECT n FROM app.items WHERE id = 'a'`); n != 2 {
		t.Fatalf("n = %d after the writes around a committed rewrite", n)
	}
}

func TestCopyFreezeIntoRegisteredTableFails0A000(t *testing.T) {
	d := testdb.New(t)
	ctx := context.Background()
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The table created in the transaction, or in a subtransaction (whose xid
	// follows its transaction's).
	for _, savepoint := range []string{"", "SAVEPOINT s;"} {
		if _, err := conn.Exec(ctx, `BEGIN;
			CREATE SCHEMA app;
			`+savepoint+`
			CREATE TABLE app.bulk (id int PRIMARY KEY, v text);
			SELECT synchro.register_table('app.bulk', '{"kind":"shared","scope":"all"}')`); err != nil {
			t.Fatal(err)
		}
		_, err = conn.Conn().PgConn().CopyFrom(ctx, strings.NewReader("1\tx\n2\ty\n"), `COPY app.bulk (id, v) FROM STDIN WITH (FREEZE)`)
		requireState(t, err, "0A000", "COPY ... FREEZE")
		if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
			t.Fatal(err)
		}
	}
	// A plain COPY is fenced as usual.
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.bulk (id int PRIMARY KEY, v text);
		SELECT synchro.register_table('app.bulk', '{"kind":"shared","scope":"all"}')`)
	if _, err := conn.Conn().PgConn().CopyFrom(ctx, strings.NewReader("1\tx\n2\ty\n"), `COPY app.bulk (id, v) FROM STDIN`); err != nil {
		t.Fatal(err)
	}
	var fences int
	if err := d.Pool.QueryRow(ctx, `SELECT count(*) FROM synchro.fence`).Scan(&fences); err != nil || fences != 2 {
		t.Fatalf("fences = %d, %v", fences, err)
	}
}

func TestTruncateOfRegisteredTableIsRefused(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.docs (id int PRIMARY KEY);
		SELECT synchro.register_table('app.docs', '{"kind":"shared","scope":"all"}');
		INSERT INTO app.docs VALUES (1)`)
	requireState(t, d.ExecErr(`TRUNCATE app.docs`), "0A000", "TRUNCATE")
}

func TestSameNameInTwoSchemasRegistersSeparately(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA s1; CREATE SCHEMA s2;
		CREATE TABLE s1.items (id int PRIMARY KEY, v text);
		CREATE TABLE s2.items (id int PRIMARY KEY, v text)`)
	var id1, id2 int
	ctx := context.Background()
	if err := d.Pool.QueryRow(ctx, `SELECT synchro.register_table('s1.items', '{"kind":"shared","scope":"all"}')`).Scan(&id1); err != nil {
		t.Fatal(err)
	}
	// The wire name must be unique, so the second one is named explicitly.
	err := d.ExecErr(`SELECT synchro.register_table('s2.items', '{"kind":"shared","scope":"all"}')`)
	requireState(t, err, "42710", "pass options.name")
	if err := d.Pool.QueryRow(ctx, `SELECT synchro.register_table('s2.items', '{"kind":"shared","scope":"all"}', '{"name":"items_s2"}')`).Scan(&id2); err != nil {
		t.Fatal(err)
	}
	if id1 == id2 {
		t.Fatalf("both registrations got table id %d", id1)
	}
	slot := d.CreateSlot(t)
	d.Exec(t, `INSERT INTO s1.items VALUES (1, 'a'); INSERT INTO s2.items VALUES (1, 'b')`)
	txns := d.Decode(t, slot)
	if len(txns) != 1 || len(txns[0].Fences) != 2 {
		t.Fatalf("want one transaction with two fences, got %d", len(txns))
	}
	pairs, err := capture.Pair(txns[0], d.Resolver(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs) != 2 || pairs[0].Reg.RelationID == pairs[1].Reg.RelationID ||
		pairs[0].Fence.Relation.Schema != "s1" || pairs[1].Fence.Relation.Schema != "s2" ||
		*pairs[0].Fence.TableID != int32(id1) || *pairs[1].Fence.TableID != int32(id2) {
		t.Fatalf("pairs do not keep the two identities apart: %+v", pairs)
	}
}

// Fence IDs are canonical version 7 UUIDs whose first 48 bits are the
// millisecond of the write, so that the fence_id index grows at its end.
func TestFenceIDsAreTimeOrderedUUIDs(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, `CREATE SCHEMA app;
		CREATE TABLE app.docs (id text PRIMARY KEY, title text, owner_id text);
		SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner_id}"}')`)
	before := queryInt(t, d, `SELECT floor(date_part('epoch', clock_timestamp()) * 1000)::bigint`)
	d.Exec(t, `INSERT INTO app.docs VALUES ('d1', 'one', 'u1'), ('d2', 'two', 'u1')`)
	d.Exec(t, `UPDATE app.docs SET title = 'uno' WHERE id = 'd1'`)
	after := queryInt(t, d, `SELECT ceil(date_part('epoch', clock_timestamp()) * 1000)::bigint`)
	got := rowsOf(t, d, `SELECT substr(f::text, 15, 1) || ' ' || (substr(f::text, 20, 1) IN ('8', '9', 'a', 'b'))::text || ' '
			|| (('x' || lpad(replace(substr(f::text, 1, 13), '-', ''), 16, '0'))::bit(64)::bigint BETWEEN $1 AND $2)::text
		FROM (SELECT fence_id AS f FROM synchro.fence) x`, before, after)
	if len(got) != 3 {
		t.Fatalf("want 3 fences, got %v", got)
	}
	for _, g := range got {
		if g != "7 true true" {
			t.Fatalf("fence_id (version, RFC 4122 variant, timestamp of the write) = %q, want \"7 true true\"", g)
		}
	}
}

// TestFenceRefusesTamperedOrdinal: the registered-DML ordinal is counted in the
// transaction-local setting synchro.dml_ordinal, which any writer of a
// registered table can set. Capture pairs a row's events with its fences by
// ordinal, so a setting moved back between two changes of one row would block
// capture (fence_reordered). The fence refuses such a write instead (22023),
// and a value that is not a count; the transaction rolls back and capture goes
// on. A setting moved forward, or back between changes of different rows,
// keeps every row's fences in order and is accepted.
func TestFenceRefusesTamperedOrdinal(t *testing.T) {
	d := testdb.New(t)
	d.Exec(t, poisonSetup)
	startStreaming(t, d, workerConfig(d, "w1"))
	set := func(v string) string { return `SELECT set_config('synchro.dml_ordinal', '` + v + `', true);` }
	for _, tc := range []struct{ name, sql, contains string }{
		{"set_back", set("10") + `INSERT INTO app.t VALUES ('k1', 'a', 'u1');` + set("0") +
			`UPDATE app.t SET v = 'b' WHERE id = 'k1'`, "set back"},
		{"set_back_to_the_same_ordinal", `INSERT INTO app.t VALUES ('k1', 'a', 'u1');` + set("0") +
			`DELETE FROM app.t WHERE id = 'k1'`, "set back"},
		{"set_back_by_a_session_setting", `INSERT INTO app.t VALUES ('k1', 'a', 'u1'); SET synchro.dml_ordinal = '0';` +
			`UPDATE app.t SET v = 'b' WHERE id = 'k1'`, "set back"},
		{"negative", set("-5") + `INSERT INTO app.t VALUES ('k1', 'a', 'u1')`, "not a registered-DML ordinal"},
		{"not_a_number", set("x") + `INSERT INTO app.t VALUES ('k1', 'a', 'u1')`, "not a registered-DML ordinal"},
		{"no_next_ordinal", set("2147483647") + `INSERT INTO app.t VALUES ('k1', 'a', 'u1')`, "not a registered-DML ordinal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireState(t, d.ExecErr(tc.sql), "22023", tc.contains)
			if n := queryInt(t, d, `SELECT count(*) FROM app.t WHERE id = 'k1'`); n != 0 {
				t.Fatalf("the refused transaction left %d rows", n)
			}
		})
	}

	forward := commitTxn(t, d, `INSERT INTO app.t VALUES ('k2', 'a', 'u1');`+set("100")+
		`UPDATE app.t SET v = 'b' WHERE id = 'k2'`)
	otherRow := commitTxn(t, d, `INSERT INTO app.t VALUES ('k3', 'a', 'u1');`+set("0")+
		`INSERT INTO app.t VALUES ('k4', 'a', 'u1'); UPDATE app.t SET v = 'b' WHERE id = 'k4'`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 2, forward)
	requireMaterializedOnce(t, d, 3, otherRow)
	if got := rowsOf(t, d, `SELECT key || '=' || (image ->> 'v') FROM synchro.projection WHERE key IN ('k2', 'k3', 'k4') ORDER BY key`); strings.Join(got, " ") != "k2=b k3=a k4=b" {
		t.Fatalf("synced rows %v, want k2=b k3=a k4=b", got)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("%d poison records", n)
	}
}
