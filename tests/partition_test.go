package tests

// Partition retirement and partition drift of registered
// partitioned relations (docs/change-stream.md, "Registry activation and relation drift";
// docs/decisions.md, "Relation drift the stream cannot show"; docs/registration.md, "Partitions": synchro.guard_partitions,
// synchro.detach_partition, synchro.forget_lost_partition). The promise under
// test: no row change of a registered relation is silently lost or published
// wrongly, and capture never blocks for good on a legitimate, documented
// operation. Each case checks the published projections against the live rows
// (requirePartsLive) where the case keeps the relation consistent,
// that synchro.catalog_drift() and readiness agree, and that no row value
// (SECRET) reaches an error message, a poison record or the worker log.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// newPartitionEnv is newDriftEnv with a second, empty partition app.parts_2
// (ids 1000..1999), guarded and recorded; readiness is ready.
func newPartitionEnv(t *testing.T) *driftEnv {
	t.Helper()
	e := newDriftEnv(t)
	e.d.Exec(t, `CREATE TABLE app.parts_2 PARTITION OF app.parts FOR VALUES FROM (1000) TO (2000);
		SELECT synchro.guard_partitions()`)
	requireRecorded(t, e.d, "app.parts_1", "app.parts_2")
	waitReadiness(t, e.d)
	return e
}

// ownConn opens a connection of its own (not from the pool the worker uses),
// closed at the end of the test.
func ownConn(t *testing.T, d *testdb.DB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), d.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// connExec runs sql on conn and fails the test on error.
func connExec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

// connAsync runs sql on conn in the background; the channel yields its error.
func connAsync(conn *pgx.Conn, sql string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), sql)
		done <- err
	}()
	return done
}

// asyncResult waits for a background statement's error.
func asyncResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("background statement did not finish within 30s")
		return nil
	}
}

// waitLockWait waits until the backend pid waits for a heavyweight lock.
func waitLockWait(t *testing.T, d *testdb.DB, pid uint32) {
	t.Helper()
	waitFor(t, "backend waiting for a lock", 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`, int64(pid)).Scan(&ok)
		return ok, err
	})
}

// requirePartsLive asserts that the materialized projections of
// app.parts are exactly its live rows: every live row with its current values,
// and no row that is not live.
func requirePartsLive(t *testing.T, d *testdb.DB) {
	t.Helper()
	bad := rowsOf(t, d, `
		WITH live AS (SELECT x.id::text AS key, to_jsonb(x) AS image FROM app.parts x),
		     proj AS (SELECT p.key, p.image FROM synchro.projection p
		              WHERE p.relation_id = (SELECT relation_id FROM synchro.relation WHERE relation_oid = 'app.parts'::regclass))
		SELECT coalesce(l.key, p.key), coalesce(l.image::text, 'no live row'), coalesce(p.image::text, 'no projection')
		FROM live l FULL JOIN proj p USING (key)
		WHERE l.image IS DISTINCT FROM p.image
		ORDER BY 1`)
	if len(bad) > 0 {
		t.Fatalf("projections of app.parts differ from its live rows (key|live|projection): %v", bad)
	}
}

// requireOneDrift asserts that synchro.catalog_drift() reports exactly one
// drifted relation whose "relation problem" contains want, and that readiness
// reports the same drift in its registry check.
func requireOneDrift(t *testing.T, d *testdb.DB, want string) {
	t.Helper()
	got := rowsOf(t, d, `SELECT relation || ' ' || problem FROM synchro.catalog_drift()`)
	if len(got) != 1 || !strings.Contains(got[0], want) {
		t.Fatalf("catalog drift %q, want one containing %q", got, want)
	}
	reason := queryText(t, d, `SELECT coalesce(reason, '') FROM synchro.readiness WHERE "check" = 'registry'`)
	if !strings.Contains(reason, got[0]) {
		t.Fatalf("readiness registry check %q does not report the catalog drift %q", reason, got[0])
	}
}

// requireNoDrift asserts that synchro.catalog_drift() reports nothing.
func requireNoDrift(t *testing.T, d *testdb.DB) {
	t.Helper()
	if got := rowsOf(t, d, `SELECT relation || ' ' || problem FROM synchro.catalog_drift()`); len(got) != 0 {
		t.Fatalf("catalog drift %q, want none", got)
	}
}

// requireUnblocked asserts that the stream is unblocked and consistent:
// everything materialized, projections equal to the live rows, digests and
// effect versions consistent, no catalog drift, no poison record, nothing
// secret in the worker log, and readiness ready.
func requireUnblocked(t *testing.T, e *driftEnv) {
	t.Helper()
	d := e.d
	waitMaterialized(t, d)
	requirePartsLive(t, d)
	requireEffectVersions(t, d)
	requireDigests(t, d)
	requireNoDrift(t, d)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("%d poison records, want none", n)
	}
	requireRedacted(t, d, e.log)
	waitReadiness(t, d)
}

// requireCaptureGoesOn commits a later write to app.parts and asserts that it,
// and each of txns with events applicable events, is materialized once.
func requireCaptureGoesOn(t *testing.T, d *testdb.DB, events int, txns ...committed) {
	t.Helper()
	later := commitTxn(t, d, `INSERT INTO app.parts VALUES (2, 'after')`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, events, txns...)
	requireMaterializedOnce(t, d, 1, later)
}

// requireNoSecret asserts that an error shows no row value.
func requireNoSecret(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("the error shows a row value: %v", err)
	}
}

// TestPartitionDetachRacesInsert: synchro.detach_partition racing an
// insert into the partition from another connection (READ COMMITTED, the
// default). An insert that commits while detach_partition waits for its lock
// makes it refuse (55000), and the row is captured; a detach that holds its
// lock first makes a waiting insert through the root fail (no partition for
// the row) and a waiting direct insert land in the released plain table,
// which is no longer part of the registered relation: nothing of either is
// published, and capture goes on.
func TestPartitionDetachRacesInsert(t *testing.T) {
	t.Parallel()
	t.Run("insert_commits_first", func(t *testing.T) {
		t.Parallel()
		e := newPartitionEnv(t)
		d := e.d
		writer, detacher := ownConn(t, d), ownConn(t, d)
		connExec(t, writer, `BEGIN; INSERT INTO app.parts VALUES (1500, 'SECRET-race')`)
		done := connAsync(detacher, `SELECT synchro.detach_partition('app.parts_2')`)
		waitLockWait(t, d, detacher.PgConn().PID())
		connExec(t, writer, `COMMIT`)
		err := asyncResult(t, done)
		requireState(t, err, "55000", "partition app.parts_2 still holds rows")
		requireNoSecret(t, err)
		requireRecorded(t, d, "app.parts_1", "app.parts_2")
		waitMaterialized(t, d)
		requireImage(t, d, "app.parts", "1500", `{"id": 1500, "v": "SECRET-race"}`)
		requireUnblocked(t, e)
	})
	t.Run("detach_holds_lock_first", func(t *testing.T) {
		t.Parallel()
		e := newPartitionEnv(t)
		d := e.d
		detacher, viaRoot, direct := ownConn(t, d), ownConn(t, d), ownConn(t, d)
		connExec(t, detacher, `BEGIN; SELECT synchro.detach_partition('app.parts_2')`)
		rootDone := connAsync(viaRoot, `INSERT INTO app.parts VALUES (1500, 'SECRET-root')`)
		waitLockWait(t, d, viaRoot.PgConn().PID())
		directDone := connAsync(direct, `INSERT INTO app.parts_2 VALUES (1501, 'SECRET-direct')`)
		waitLockWait(t, d, direct.PgConn().PID())
		connExec(t, detacher, `COMMIT`)
		err := asyncResult(t, rootDone)
		requireState(t, err, "23514", "no partition of relation")
		if err := asyncResult(t, directDone); err != nil {
			t.Fatalf("the direct insert into the released table: %v", err)
		}
		if n := queryInt(t, d, `SELECT count(*) FROM synchro.fence WHERE key IN ('1500', '1501')`); n != 0 {
			t.Fatalf("%d fences of rows outside the registered relation", n)
		}
		requireCaptureGoesOn(t, d, 0)
		requireImage(t, d, "app.parts", "1501", "")
		requireUnblocked(t, e)
	})
}

// TestPartitionDetachDeadlocksWithWriter: detach_partition locks the
// partition, then the root; a writer holding the root (an earlier insert in
// its transaction) and then inserting into the partition deadlocks with it.
// PostgreSQL ends one of the two: either way the outcome is consistent (the
// row is in the relation and published, or it never committed and the
// partition is released), and capture goes on.
func TestPartitionDetachDeadlocksWithWriter(t *testing.T) {
	t.Parallel()
	e := newPartitionEnv(t)
	d := e.d
	writer, detacher := ownConn(t, d), ownConn(t, d)
	connExec(t, writer, `BEGIN; INSERT INTO app.parts VALUES (2, 'first')`)
	detached := connAsync(detacher, `SELECT synchro.detach_partition('app.parts_2')`)
	waitLockWait(t, d, detacher.PgConn().PID())
	inserted := connAsync(writer, `INSERT INTO app.parts VALUES (1500, 'SECRET-deadlock')`)
	derr, ierr := asyncResult(t, detached), asyncResult(t, inserted)
	requireNoSecret(t, derr)
	switch {
	case derr == nil && sqlState(ierr) == "40P01":
		connExec(t, writer, `ROLLBACK`)
		requireRecorded(t, d, "app.parts_1")
	case sqlState(derr) == "40P01" && ierr == nil:
		connExec(t, writer, `COMMIT`)
		requireRecorded(t, d, "app.parts_1", "app.parts_2")
		waitMaterialized(t, d)
		requireImage(t, d, "app.parts", "1500", `{"id": 1500, "v": "SECRET-deadlock"}`)
	default:
		t.Fatalf("detach_partition: %v; insert: %v; want one of them to end in a deadlock (40P01)", derr, ierr)
	}
	later := commitTxn(t, d, `INSERT INTO app.parts VALUES (3, 'after')`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, later)
	requireUnblocked(t, e)
}

// TestPartitionDetachInOwnTransaction: detach_partition in a transaction
// that writes the partition. An insert before it makes it refuse (the
// transaction ends, nothing of it commits; or, refused inside a savepoint,
// the insert commits and is captured with the partition still recorded);
// deleting the rows and detaching (and dropping) the partition in one
// transaction, the documented way to retire one, captures each delete once.
func TestPartitionDetachInOwnTransaction(t *testing.T) {
	t.Parallel()
	t.Run("insert_then_detach", func(t *testing.T) {
		t.Parallel()
		e := newPartitionEnv(t)
		d := e.d
		_, err := tryCommit(t, d, sqlStep(`INSERT INTO app.parts VALUES (1500, 'SECRET-own')`),
			sqlStep(`SELECT synchro.detach_partition('app.parts_2')`))
		requireState(t, err, "55000", "partition app.parts_2 still holds rows")
		requireNoSecret(t, err)
		requireRecorded(t, d, "app.parts_1", "app.parts_2")
		requireUnblocked(t, e)
	})
	t.Run("refused_in_savepoint", func(t *testing.T) {
		t.Parallel()
		e := newPartitionEnv(t)
		d := e.d
		c := commitSteps(t, d, sqlStep(`INSERT INTO app.parts VALUES (1500, 'SECRET-own'); SAVEPOINT s`),
			func(ctx context.Context, conn *pgx.Conn) error {
				_, err := conn.Exec(ctx, `SELECT synchro.detach_partition('app.parts_2')`)
				if sqlState(err) != "55000" {
					t.Errorf("detach_partition in the savepoint: %v, want 55000", err)
				}
				_, err = conn.Exec(ctx, `ROLLBACK TO SAVEPOINT s`)
				return err
			})
		waitMaterialized(t, d)
		requireMaterializedOnce(t, d, 1, c)
		requireImage(t, d, "app.parts", "1500", `{"id": 1500, "v": "SECRET-own"}`)
		requireRecorded(t, d, "app.parts_1", "app.parts_2")
		requireUnblocked(t, e)
	})
	for _, tc := range []struct{ name, retire string }{
		{"delete_and_detach", `DELETE FROM app.parts WHERE id >= 1000; SELECT synchro.detach_partition('app.parts_2')`},
		{"delete_detach_and_drop", `DELETE FROM app.parts_2; SELECT synchro.detach_partition('app.parts_2'); DROP TABLE app.parts_2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newPartitionEnv(t)
			d := e.d
			commitTxn(t, d, `INSERT INTO app.parts VALUES (1500, 'SECRET-a'), (1501, 'SECRET-b')`)
			waitMaterialized(t, d)
			retired := commitTxn(t, d, tc.retire)
			requireCaptureGoesOn(t, d, 2, retired)
			requireImage(t, d, "app.parts", "1500", "")
			requireImage(t, d, "app.parts", "1501", "")
			requireRecorded(t, d, "app.parts_1")
			requireUnblocked(t, e)
		})
	}
}

// TestPartitionDetachSubpartitioned: an intermediate partition is empty
// only when all its leaves are; detach_partition refuses it while a leaf holds
// a row, releases an empty leaf below it, and once the last row is deleted
// releases the intermediate with the whole subtree (records and truncate
// guards), after which dropping it is harmless.
func TestPartitionDetachSubpartitioned(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	d := e.d
	ctx := context.Background()
	d.Exec(t, `CREATE TABLE app.parts_2 PARTITION OF app.parts FOR VALUES FROM (1000) TO (2000) PARTITION BY RANGE (id);
		CREATE TABLE app.parts_2a PARTITION OF app.parts_2 FOR VALUES FROM (1000) TO (1500);
		CREATE TABLE app.parts_2b PARTITION OF app.parts_2 FOR VALUES FROM (1500) TO (1800);
		CREATE TABLE app.parts_2c PARTITION OF app.parts_2 FOR VALUES FROM (1800) TO (2000);
		SELECT synchro.guard_partitions()`)
	commitTxn(t, d, `INSERT INTO app.parts VALUES (1200, 'SECRET-leaf')`)
	waitMaterialized(t, d)

	_, err := d.Pool.Exec(ctx, `SELECT synchro.detach_partition('app.parts_2')`)
	requireState(t, err, "55000", "partition app.parts_2 still holds rows")
	requireNoSecret(t, err)
	d.Exec(t, `SELECT synchro.detach_partition('app.parts_2b')`)
	d.Exec(t, `DROP TABLE app.parts_2b`)
	requireRecorded(t, d, "app.parts_1", "app.parts_2", "app.parts_2a", "app.parts_2c")
	requireUnblocked(t, e)

	deleted := commitTxn(t, d, `DELETE FROM app.parts WHERE id = 1200`)
	d.Exec(t, `SELECT synchro.detach_partition('app.parts_2')`)
	if n := queryInt(t, d, `SELECT count(*) FROM pg_trigger WHERE tgrelid IN ('app.parts_2'::regclass, 'app.parts_2a'::regclass, 'app.parts_2c'::regclass)`); n != 0 {
		t.Fatalf("the released subtree keeps %d triggers", n)
	}
	d.Exec(t, `TRUNCATE app.parts_2; DROP TABLE app.parts_2`)
	requireCaptureGoesOn(t, d, 1, deleted)
	requireRecorded(t, d, "app.parts_1")
	requireUnblocked(t, e)
}

// TestPartitionCatalogChecksBesideDetach: the catalog checks that run beside
// DDL (synchro.catalog_drift, which the worker runs before each batch, and
// readiness) neither deadlock with synchro.detach_partition nor report a
// released partition as lost. They used to list the tree with
// pg_partition_tree, which locks each partition after its parent (a check
// holding app.parts_2 while waiting for app.parts_2b deadlocked with
// detach_partition('app.parts_2b'), which locks the child first, and either
// could be the one PostgreSQL ended) and reads pg_inherits under a newer
// snapshot than the records (a detach committing meanwhile read as a lost
// partition, blocking capture until the next check). Here a session runs
// both checks back to back while partitions at both levels are created,
// guarded and released 30 times; nothing may fail or report drift, and the
// worker, which checks too, must never have seen drift.
func TestPartitionCatalogChecksBesideDetach(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	d := e.d
	d.Exec(t, `CREATE TABLE app.parts_2 PARTITION OF app.parts FOR VALUES FROM (1000) TO (2000) PARTITION BY RANGE (id);
		CREATE TABLE app.parts_2a PARTITION OF app.parts_2 FOR VALUES FROM (1000) TO (1500);
		SELECT synchro.guard_partitions()`)
	checker := ownConn(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	checked := make(chan error, 1)
	go func() {
		var found []string
		for ctx.Err() == nil {
			rows, err := checker.Query(ctx, `
				SELECT relation || ' ' || problem FROM synchro.catalog_drift()
				UNION ALL
				SELECT "check" || ': ' || reason FROM synchro.readiness WHERE "check" IN ('registry', 'triggers') AND NOT ok`)
			if err == nil {
				for rows.Next() {
					var s string
					if err = rows.Scan(&s); err != nil {
						break
					}
					found = append(found, s)
				}
				rows.Close()
				if err == nil {
					err = rows.Err()
				}
			}
			if ctx.Err() != nil {
				break
			}
			if err != nil || len(found) > 0 {
				checked <- fmt.Errorf("catalog check beside detach_partition: %v; reported %q", err, found)
				return
			}
		}
		checked <- nil
	}()
	for i := 0; i < 30; i++ {
		d.Exec(t, `CREATE TABLE app.parts_2b PARTITION OF app.parts_2 FOR VALUES FROM (1500) TO (2000);
			CREATE TABLE app.parts_3 PARTITION OF app.parts FOR VALUES FROM (2000) TO (3000);
			SELECT synchro.guard_partitions()`)
		d.Exec(t, `SELECT synchro.detach_partition('app.parts_2b')`)
		d.Exec(t, `SELECT synchro.detach_partition('app.parts_3')`)
		d.Exec(t, `DROP TABLE app.parts_2b, app.parts_3`)
	}
	cancel()
	select {
	case err := <-checked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the catalog checks did not stop within 30s")
	}
	requireRecorded(t, d, "app.parts_1", "app.parts_2", "app.parts_2a")
	requireUnblocked(t, e)
	if strings.Contains(e.log.String(), "drifted") {
		t.Fatalf("the worker saw relation drift:\n%s", e.log)
	}
}

// TestPartitionDetachDefaultPartition: the DEFAULT partition is retired
// like any other: refused while it holds a row, released once empty; rows
// that would have gone to it are then refused by PostgreSQL.
func TestPartitionDetachDefaultPartition(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	d := e.d
	ctx := context.Background()
	d.Exec(t, `CREATE TABLE app.parts_def PARTITION OF app.parts DEFAULT; SELECT synchro.guard_partitions()`)
	commitTxn(t, d, `INSERT INTO app.parts VALUES (5000, 'SECRET-default')`)
	waitMaterialized(t, d)
	requireImage(t, d, "app.parts", "5000", `{"id": 5000, "v": "SECRET-default"}`)
	_, err := d.Pool.Exec(ctx, `SELECT synchro.detach_partition('app.parts_def')`)
	requireState(t, err, "55000", "partition app.parts_def still holds rows")
	requireNoSecret(t, err)
	deleted := commitTxn(t, d, `DELETE FROM app.parts WHERE id = 5000`)
	d.Exec(t, `SELECT synchro.detach_partition('app.parts_def')`)
	d.Exec(t, `DROP TABLE app.parts_def`)
	err = d.ExecErr(`INSERT INTO app.parts VALUES (5001, 'SECRET-nowhere')`)
	requireState(t, err, "23514", "no partition of relation")
	requireCaptureGoesOn(t, d, 1, deleted)
	requireUnblocked(t, e)
}

// TestPartitionDetachRefusals: detach_partition refuses (42809), changing
// nothing, a partition of an unregistered partitioned table, a plain table, a
// partition it already released (a second call), and a recorded partition
// that was already detached directly (drift that it must not hide).
func TestPartitionDetachRefusals(t *testing.T) {
	t.Parallel()
	e := newPartitionEnv(t)
	d := e.d
	ctx := context.Background()
	d.Exec(t, `CREATE TABLE app.loose (id bigint PRIMARY KEY, v text) PARTITION BY RANGE (id);
		CREATE TABLE app.loose_1 PARTITION OF app.loose FOR VALUES FROM (0) TO (1000);
		CREATE TABLE app.plain (id int PRIMARY KEY)`)
	for _, rel := range []string{"app.loose_1", "app.loose", "app.plain"} {
		_, err := d.Pool.Exec(ctx, `SELECT synchro.detach_partition($1)`, rel)
		requireState(t, err, "42809", rel+" is not a recorded partition of a registered relation")
	}
	if !queryBool(t, d, `SELECT EXISTS (SELECT FROM pg_inherits WHERE inhrelid = 'app.loose_1'::regclass)`) {
		t.Fatal("detach_partition detached a partition of an unregistered table")
	}
	d.Exec(t, `SELECT synchro.detach_partition('app.parts_2')`)
	_, err := d.Pool.Exec(ctx, `SELECT synchro.detach_partition('app.parts_2')`)
	requireState(t, err, "42809", "app.parts_2 is not a recorded partition of a registered relation")
	requireUnblocked(t, e)

	// A recorded partition detached directly stays drift.
	d.Exec(t, `ALTER TABLE app.parts DETACH PARTITION app.parts_1`)
	_, err = d.Pool.Exec(ctx, `SELECT synchro.detach_partition('app.parts_1')`)
	requireState(t, err, "42809", "app.parts_1 is not a recorded partition of a registered relation")
	later := commitTxn(t, d, `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`)
	requireBlockedByCatalogDrift(t, d, e.cfg.WorkerID, e.log, later)
	waitReadiness(t, d, "worker", "registry")
	requireOneDrift(t, d, "app.parts lost partition app.parts_1 (detached or dropped")
	d.Exec(t, `ALTER TABLE app.parts ATTACH PARTITION app.parts_1 FOR VALUES FROM (0) TO (1000)`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, later)
	requireUnblocked(t, e)
}

// TestPartitionRenamedPartition: a recorded partition renamed or moved
// to another schema is the same partition (by OID): detach_partition releases
// it under its new name; detached or dropped directly, catalog_drift names it
// by its recorded name, forget_lost_partition takes that name (and refuses the
// new one), and attaching it again under its new name repairs the drift.
func TestPartitionRenamedPartition(t *testing.T) {
	t.Parallel()
	const moved = `CREATE SCHEMA arch; ALTER TABLE app.parts_2 RENAME TO parts_two; ALTER TABLE app.parts_two SET SCHEMA arch`
	t.Run("released_under_new_name", func(t *testing.T) {
		t.Parallel()
		e := newPartitionEnv(t)
		d := e.d
		d.Exec(t, moved)
		commitTxn(t, d, `INSERT INTO app.parts VALUES (1500, 'SECRET-moved')`)
		waitMaterialized(t, d)
		requireImage(t, d, "app.parts", "1500", `{"id": 1500, "v": "SECRET-moved"}`)
		requireUnblocked(t, e)
		_, err := d.Pool.Exec(context.Background(), `SELECT synchro.detach_partition('arch.parts_two')`)
		requireState(t, err, "55000", "partition arch.parts_two still holds rows")
		deleted := commitTxn(t, d, `DELETE FROM arch.parts_two WHERE id = 1500`)
		d.Exec(t, `SELECT synchro.detach_partition('arch.parts_two'); DROP TABLE arch.parts_two`)
		requireCaptureGoesOn(t, d, 1, deleted)
		requireUnblocked(t, e)
	})
	for _, tc := range []struct{ name, lose, repair string }{
		{"dropped", `DROP TABLE arch.parts_two`, `SELECT synchro.forget_lost_partition('app.parts_2')`},
		{"detached_and_attached_again", `ALTER TABLE app.parts DETACH PARTITION arch.parts_two`,
			`ALTER TABLE app.parts ATTACH PARTITION arch.parts_two FOR VALUES FROM (1000) TO (2000)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newPartitionEnv(t)
			d := e.d
			d.Exec(t, moved)
			d.Exec(t, tc.lose)
			held := commitTxn(t, d, `INSERT INTO app.t VALUES ('k2', 'SECRET-123', '7', 'a2')`)
			later := commitTxn(t, d, `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`)
			requireBlockedByCatalogDrift(t, d, e.cfg.WorkerID, e.log, later)
			waitReadiness(t, d, "worker", "registry")
			requireOneDrift(t, d, "app.parts lost partition app.parts_2 (detached or dropped")
			_, err := d.Pool.Exec(context.Background(), `SELECT synchro.forget_lost_partition('arch.parts_two')`)
			requireState(t, err, "42704", "no recorded partition named arch.parts_two")
			d.Exec(t, tc.repair)
			waitMaterialized(t, d)
			requireMaterializedOnce(t, d, 1, held, later)
			requireUnblocked(t, e)
		})
	}
}

// TestPartitionDetachedBeforeGuard: a partition created after registration
// has the cloned fence but no statement guards until guard_partitions()
// records it, and its TRUNCATE would never be decoded, so the fence refuses
// every write into it (55000, through the root or directly) and nothing is
// written. Readiness reports its missing guards. It holds no captured row, so
// detaching it before it was recorded loses nothing (no drift); once
// guard_partitions() records a partition, writes into it are captured.
func TestPartitionDetachedBeforeGuard(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	d := e.d
	d.Exec(t, `CREATE TABLE app.parts_3 PARTITION OF app.parts FOR VALUES FROM (2000) TO (3000);
		CREATE TABLE app.parts_4 PARTITION OF app.parts FOR VALUES FROM (3000) TO (4000)`)
	for _, write := range []string{`INSERT INTO app.parts VALUES (2500, 'SECRET-unguarded')`,
		`INSERT INTO app.parts_4 VALUES (3500, 'SECRET-unguarded')`} {
		requireState(t, d.ExecErr(write), "55000", "is not guarded yet")
	}
	if n := queryInt(t, d, `SELECT count(*) FROM app.parts WHERE id >= 2000`); n != 0 {
		t.Fatalf("%d rows written into the unguarded partitions", n)
	}
	waitReadiness(t, d, "triggers")
	if reason := queryText(t, d, `SELECT reason FROM synchro.readiness WHERE "check" = 'triggers'`); !strings.Contains(reason, "synchro_partition_guard on app.parts_3 is missing") {
		t.Fatalf("triggers check: %q, want the missing partition guard of app.parts_3", reason)
	}
	_, err := d.Pool.Exec(context.Background(), `SELECT synchro.detach_partition('app.parts_3')`)
	requireState(t, err, "42809", "app.parts_3 is not a recorded partition of a registered relation")
	d.Exec(t, `ALTER TABLE app.parts DETACH PARTITION app.parts_3`)
	requireNoDrift(t, d)

	if n := queryInt(t, d, `SELECT synchro.guard_partitions()`); n != 2 {
		t.Fatalf("guard_partitions installed %d guards, want the 2 of app.parts_4", n)
	}
	c := commitTxn(t, d, `INSERT INTO app.parts_4 VALUES (3500, 'SECRET-guarded')`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, c)
	requireImage(t, d, "app.parts", "3500", `{"id": 3500, "v": "SECRET-guarded"}`)
	waitReadiness(t, d)
}

// TestPartitionDetachConcurrentlyPending: DETACH PARTITION CONCURRENTLY
// interrupted in its second phase leaves the partition pending detach: it is
// no longer in the partition tree (its rows are out of the relation), so it is
// drift; detach_partition cannot release it and changes nothing; completing
// the detach (FINALIZE) and attaching it again repairs the drift, with the
// held transactions materialized once each.
func TestPartitionDetachConcurrentlyPending(t *testing.T) {
	t.Parallel()
	e := newPartitionEnv(t)
	d := e.d
	ctx := context.Background()
	commitTxn(t, d, `INSERT INTO app.parts VALUES (1500, 'SECRET-pending')`)
	waitMaterialized(t, d)
	// An old snapshot makes the detach wait in its second phase.
	holder, detacher := ownConn(t, d), ownConn(t, d)
	connExec(t, holder, `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM app.parts`)
	done := connAsync(detacher, `ALTER TABLE app.parts DETACH PARTITION app.parts_2 CONCURRENTLY`)
	waitLockWait(t, d, detacher.PgConn().PID())
	d.Exec(t, `SELECT pg_cancel_backend($1)`, int64(detacher.PgConn().PID()))
	requireState(t, asyncResult(t, done), "57014", "")
	connExec(t, holder, `COMMIT`)
	if !queryBool(t, d, `SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = 'app.parts_2'::regclass`) {
		t.Fatal("the interrupted detach did not leave the partition pending")
	}
	held := commitTxn(t, d, `INSERT INTO app.t VALUES ('k2', 'SECRET-123', '7', 'a2')`)
	later := commitTxn(t, d, `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`)
	requireBlockedByCatalogDrift(t, d, e.cfg.WorkerID, e.log, later)
	waitReadiness(t, d, "worker", "registry")
	requireOneDrift(t, d, "app.parts lost partition app.parts_2 (detached or dropped")

	_, err := d.Pool.Exec(ctx, `SELECT synchro.detach_partition('app.parts_2')`)
	if err == nil {
		t.Fatal("detach_partition released a pending partition holding a row")
	}
	requireNoSecret(t, err)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.relation_partition WHERE partition_name = 'app.parts_2'`); n != 1 {
		t.Fatalf("the refused detach_partition changed the records: %d", n)
	}
	d.Exec(t, `ALTER TABLE app.parts DETACH PARTITION app.parts_2 FINALIZE`)
	requireOneDrift(t, d, "app.parts lost partition app.parts_2 (detached or dropped")
	d.Exec(t, `ALTER TABLE app.parts ATTACH PARTITION app.parts_2 FOR VALUES FROM (1000) TO (2000)`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, held, later)
	requireImage(t, d, "app.parts", "1500", `{"id": 1500, "v": "SECRET-pending"}`)
	requireUnblocked(t, e)
}

// TestPartitionReattachWithOtherBounds: a recorded partition detached
// directly and attached again with other bounds (still holding its rows) is
// the same partition: capture resumes with the held transactions once each,
// and the published rows are the live ones.
func TestPartitionReattachWithOtherBounds(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	d := e.d
	d.Exec(t, `ALTER TABLE app.parts DETACH PARTITION app.parts_1`)
	held := commitTxn(t, d, `INSERT INTO app.t VALUES ('k2', 'SECRET-123', '7', 'a2')`)
	later := commitTxn(t, d, `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`)
	requireBlockedByCatalogDrift(t, d, e.cfg.WorkerID, e.log, later)
	requireOneDrift(t, d, "app.parts lost partition app.parts_1 (detached or dropped")
	d.Exec(t, `ALTER TABLE app.parts ATTACH PARTITION app.parts_1 FOR VALUES FROM (0) TO (500)`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, held, later)
	after := commitTxn(t, d, `UPDATE app.parts SET v = 'after' WHERE id = 1; INSERT INTO app.parts VALUES (3, 'new')`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 2, after)
	requireUnblocked(t, e)
}

// TestPartitionDroppedRoot: dropping the registered partitioned root
// (with its partitions) is "was dropped", not a lost partition; capture
// blocks without a poison record and readiness names it.
func TestPartitionDroppedRoot(t *testing.T) {
	t.Parallel()
	e := newPartitionEnv(t)
	d := e.d
	d.Exec(t, `DROP TABLE app.parts`)
	later := commitTxn(t, d, `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`)
	requireBlockedByCatalogDrift(t, d, e.cfg.WorkerID, e.log, later)
	waitReadiness(t, d, "worker", "registry", "triggers", "publication")
	requireOneDrift(t, d, "app.parts was dropped")
}

// TestPartitionAttachPopulatedTable: documented: rows a table holds when
// it is attached are captured only when next written. Nothing is published
// for them before; an update publishes the whole row; a delete of a row never
// published publishes nothing wrong; capture and readiness stay fine.
func TestPartitionAttachPopulatedTable(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	d := e.d
	d.Exec(t, `CREATE TABLE app.parts_3 (id bigint PRIMARY KEY, v text);
		INSERT INTO app.parts_3 VALUES (2001, 'SECRET-a'), (2002, 'SECRET-b'), (2003, 'SECRET-c');
		ALTER TABLE app.parts ATTACH PARTITION app.parts_3 FOR VALUES FROM (2000) TO (3000);
		SELECT synchro.guard_partitions()`)
	waitReadiness(t, d)
	for _, k := range []string{"2001", "2002", "2003"} {
		requireImage(t, d, "app.parts", k, "")
	}
	upd := commitTxn(t, d, `UPDATE app.parts SET v = 'SECRET-changed' WHERE id = 2001`)
	del := commitTxn(t, d, `DELETE FROM app.parts WHERE id = 2002`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, upd, del)
	requireImage(t, d, "app.parts", "2001", `{"id": 2001, "v": "SECRET-changed"}`)
	requireImage(t, d, "app.parts", "2002", "")
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.effect WHERE key = '2002' AND op <> 'delete'`); n != 0 {
		t.Fatalf("%d upsert effects of a deleted row", n)
	}
	// The untouched row is documented as not published until written.
	d.Exec(t, `UPDATE app.parts SET v = v WHERE id = 2003`)
	requireUnblocked(t, e)
}

// TestPartitionRegisteredTableAttached: a registered plain table cannot
// become a partition of the registered partitioned root (its writes would be
// published under the root, with the root's fence cloned beside its own):
// PostgreSQL refuses the attach, because the cloned capture triggers collide
// with its own (42710), and capture goes on with both relations intact.
func TestPartitionRegisteredTableAttached(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	d := e.d
	d.Exec(t, `CREATE TABLE app.extra (id bigint PRIMARY KEY, v text);
		SELECT synchro.register_table('app.extra', '{"kind":"shared","scope":"all"}')`)
	commitTxn(t, d, `INSERT INTO app.extra VALUES (2500, 'SECRET-extra')`)
	waitMaterialized(t, d)
	err := d.ExecErr(`ALTER TABLE app.parts ATTACH PARTITION app.extra FOR VALUES FROM (2000) TO (3000)`)
	requireState(t, err, "42710", `trigger "synchro_fence" for relation "extra" already exists`)
	c := commitTxn(t, d, `UPDATE app.extra SET v = 'SECRET-changed' WHERE id = 2500; INSERT INTO app.parts VALUES (2, 'after')`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 2, c)
	requireImage(t, d, "app.extra", "2500", `{"id": 2500, "v": "SECRET-changed"}`)
	requireUnblocked(t, e)
}

// TestPartitionForgetDroppedSubtree: dropping a recorded intermediate
// partition drops its leaves with it; each is a lost partition, and capture
// stays blocked until the owner has attested every one of them
// (forget_lost_partition per recorded name, as catalog_drift names them),
// then resumes with the held transactions once each.
func TestPartitionForgetDroppedSubtree(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	d := e.d
	d.Exec(t, `CREATE TABLE app.parts_2 PARTITION OF app.parts FOR VALUES FROM (1000) TO (2000) PARTITION BY RANGE (id);
		CREATE TABLE app.parts_2a PARTITION OF app.parts_2 FOR VALUES FROM (1000) TO (2000);
		SELECT synchro.guard_partitions();
		DROP TABLE app.parts_2`)
	held := commitTxn(t, d, `INSERT INTO app.t VALUES ('k2', 'SECRET-123', '7', 'a2')`)
	later := commitTxn(t, d, `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`)
	requireBlockedByCatalogDrift(t, d, e.cfg.WorkerID, e.log, later)
	requireOneDrift(t, d, "app.parts lost partition app.parts_2 (detached or dropped")
	if n := queryInt(t, d, `SELECT synchro.forget_lost_partition('app.parts_2')`); n != 1 {
		t.Fatalf("forgot %d partitions, want 1", n)
	}
	requireOneDrift(t, d, "app.parts lost partition app.parts_2a (detached or dropped")
	waitBlocked(t, d, e.cfg.WorkerID, 300*time.Millisecond)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, later.xid); n != 0 {
		t.Fatal("capture resumed with a lost partition not attested")
	}
	d.Exec(t, `SELECT synchro.forget_lost_partition('app.parts_2a')`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, held, later)
	requireUnblocked(t, e)
}

// TestPartitionDetachUnderRepeatableRead: detach_partition checks that
// the partition is empty after locking it, "so no row can enter it in
// between". In a REPEATABLE READ or SERIALIZABLE transaction the check reads
// the transaction's snapshot, which may predate a row that committed before
// the lock was granted: it refuses to run there at all (25000), and the row
// stays published.
func TestPartitionDetachUnderRepeatableRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, begin string }{
		{"repeatable_read", `BEGIN ISOLATION LEVEL REPEATABLE READ`},
		{"serializable", `BEGIN ISOLATION LEVEL SERIALIZABLE`},
	} {
		t.Run(tc.name+"_snapshot_before_insert", func(t *testing.T) {
			t.Parallel()
			e := newPartitionEnv(t)
			d := e.d
			detacher := ownConn(t, d)
			connExec(t, detacher, tc.begin+`; SELECT count(*) FROM app.other`)
			commitTxn(t, d, `INSERT INTO app.parts VALUES (1500, 'SECRET-rr')`)
			_, err := detacher.Exec(context.Background(), `SELECT synchro.detach_partition('app.parts_2')`)
			requireState(t, err, "25000", "detach_partition must run in a READ COMMITTED transaction")
			_, cerr := detacher.Exec(context.Background(), `COMMIT`)
			requireDetachRefused(t, e, err, cerr)
		})
		t.Run(tc.name+"_insert_pending_at_call", func(t *testing.T) {
			t.Parallel()
			e := newPartitionEnv(t)
			d := e.d
			writer, detacher := ownConn(t, d), ownConn(t, d)
			connExec(t, writer, `BEGIN; INSERT INTO app.parts VALUES (1500, 'SECRET-rr')`)
			connExec(t, detacher, tc.begin)
			// Refused before it waits for the partition's lock.
			_, err := detacher.Exec(context.Background(), `SELECT synchro.detach_partition('app.parts_2')`)
			requireState(t, err, "25000", "detach_partition must run in a READ COMMITTED transaction")
			connExec(t, writer, `COMMIT`)
			_, cerr := detacher.Exec(context.Background(), `COMMIT`)
			requireDetachRefused(t, e, err, cerr)
		})
	}
}

// requireDetachRefused: detach_partition of app.parts_2, which holds the
// row 1500, was refused (err) or its transaction failed to commit (cerr); the
// row stays in the registered relation and is published.
func requireDetachRefused(t *testing.T, e *driftEnv, err, cerr error) {
	t.Helper()
	d := e.d
	requireNoSecret(t, err)
	if err == nil && cerr == nil {
		waitMaterialized(t, d)
		t.Errorf("detach_partition detached app.parts_2 holding a committed row: partition of %q, rows in the detached table %d, catalog drift %q",
			queryText(t, d, `SELECT coalesce((SELECT inhparent::regclass::text FROM pg_inherits WHERE inhrelid = 'app.parts_2'::regclass), 'none')`),
			queryInt(t, d, `SELECT count(*) FROM app.parts_2`),
			rowsOf(t, d, `SELECT relation || ' ' || problem FROM synchro.catalog_drift()`))
		requirePartsLive(t, d)
		t.FailNow()
	}
	if err != nil && sqlState(err) != "25000" {
		requireState(t, err, "55000", "partition app.parts_2 still holds rows")
	}
	requireRecorded(t, d, "app.parts_1", "app.parts_2")
	waitMaterialized(t, d)
	requireImage(t, d, "app.parts", "1500", `{"id": 1500, "v": "SECRET-rr"}`)
	requireUnblocked(t, e)
}

// TestPartitionWritesWhileDetached: a recorded partition detached
// directly blocks capture until it is attached again. While it is detached
// its cloned fence triggers are gone, so its partition guard refuses writes
// to it (55000, without row data); attached again, capture resumes with the
// published rows equal to the live ones.
func TestPartitionWritesWhileDetached(t *testing.T) {
	t.Parallel()
	e := newDriftEnv(t)
	d := e.d
	commitTxn(t, d, `INSERT INTO app.parts VALUES (2, 'SECRET-gone'), (3, 'plain')`)
	waitMaterialized(t, d)
	d.Exec(t, `ALTER TABLE app.parts DETACH PARTITION app.parts_1`)
	later := commitTxn(t, d, `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`)
	requireBlockedByCatalogDrift(t, d, e.cfg.WorkerID, e.log, later)
	requireOneDrift(t, d, "app.parts lost partition app.parts_1 (detached or dropped")
	// The partition guard, which DETACH leaves in place, refuses every write
	// to the detached table (the cloned fence went with the detach).
	for _, write := range []string{`UPDATE app.parts_1 SET v = 'SECRET-stale' WHERE id = 1`,
		`DELETE FROM app.parts_1 WHERE id = 2`, `INSERT INTO app.parts_1 VALUES (4, 'SECRET-unseen')`,
		`COPY app.parts_1 FROM PROGRAM 'echo 5'`} {
		err := d.ExecErr(write)
		requireState(t, err, "55000", "app.parts_1 was detached from its registered relation")
		requireNoSecret(t, err)
	}
	d.Exec(t, `ALTER TABLE app.parts ATTACH PARTITION app.parts_1 FOR VALUES FROM (0) TO (1000)`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, later)
	waitReadiness(t, d)
	requirePartsLive(t, d)
}

// TestPartitionLostPartitionMovedElsewhere: a recorded partition detached
// directly (drift) and attached to an unregistered partitioned table is no
// longer a partition of the registered relation: detach_partition must refuse
// it (42809) and change nothing, and not release it as if its rows had left
// through captured deletes. (Moving an old partition into an archive table is
// a common habit.)
func TestPartitionLostPartitionMovedElsewhere(t *testing.T) {
	t.Parallel()
	e := newPartitionEnv(t)
	d := e.d
	commitTxn(t, d, `INSERT INTO app.parts VALUES (1500, 'SECRET-archived')`)
	waitMaterialized(t, d)
	d.Exec(t, `ALTER TABLE app.parts DETACH PARTITION app.parts_2;
		CREATE TABLE app.archive (id bigint PRIMARY KEY, v text) PARTITION BY RANGE (id);
		ALTER TABLE app.archive ATTACH PARTITION app.parts_2 FOR VALUES FROM (1000) TO (2000);
		DELETE FROM app.archive WHERE id = 1500`)
	later := commitTxn(t, d, `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`)
	requireBlockedByCatalogDrift(t, d, e.cfg.WorkerID, e.log, later)
	requireOneDrift(t, d, "app.parts lost partition app.parts_2 (detached or dropped")
	_, err := d.Pool.Exec(context.Background(), `SELECT synchro.detach_partition('app.parts_2')`)
	if err == nil {
		t.Errorf("detach_partition released app.parts_2, a partition of the unregistered app.archive: still a partition of app.archive: %v; catalog drift now %q",
			queryBool(t, d, `SELECT EXISTS (SELECT FROM pg_inherits WHERE inhrelid = 'app.parts_2'::regclass)`),
			rowsOf(t, d, `SELECT relation || ' ' || problem FROM synchro.catalog_drift()`))
		waitMaterialized(t, d)
		requirePartsLive(t, d)
		t.FailNow()
	}
	requireState(t, err, "42809", "app.parts_2 is not a recorded partition of a registered relation")
	requireOneDrift(t, d, "app.parts lost partition app.parts_2 (detached or dropped")
}

// TestPartitionWriteToPendingPartition: while an interrupted DETACH
// CONCURRENTLY leaves a recorded partition pending detach, PostgreSQL still
// accepts writes into the partition itself and fires its cloned fence, but
// pgoutput no longer describes its rows by the root: the partition guard
// refuses such a write (55000). Capture is blocked by the drift; after the
// documented repair (FINALIZE, then attach again) it resumes, with no poison
// record and the published rows equal to the live ones.
func TestPartitionWriteToPendingPartition(t *testing.T) {
	t.Parallel()
	e := newPartitionEnv(t)
	d := e.d
	holder, detacher := ownConn(t, d), ownConn(t, d)
	connExec(t, holder, `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM app.parts`)
	done := connAsync(detacher, `ALTER TABLE app.parts DETACH PARTITION app.parts_2 CONCURRENTLY`)
	waitLockWait(t, d, detacher.PgConn().PID())
	d.Exec(t, `SELECT pg_cancel_backend($1)`, int64(detacher.PgConn().PID()))
	requireState(t, asyncResult(t, done), "57014", "")
	connExec(t, holder, `COMMIT`)
	requireOneDrift(t, d, "app.parts lost partition app.parts_2 (detached or dropped")
	_, err := tryCommit(t, d, sqlStep(`INSERT INTO app.parts_2 VALUES (1500, 'SECRET-pending')`))
	requireState(t, err, "55000", "app.parts_2 was detached from its registered relation, or is being detached")
	requireNoSecret(t, err)
	later := commitTxn(t, d, `INSERT INTO app.k VALUES (2, 'SECRET-123', 7)`)
	waitBlocked(t, d, e.cfg.WorkerID, 300*time.Millisecond)
	d.Exec(t, `ALTER TABLE app.parts DETACH PARTITION app.parts_2 FINALIZE;
		ALTER TABLE app.parts ATTACH PARTITION app.parts_2 FOR VALUES FROM (1000) TO (2000)`)
	waitMaterialized(t, d)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("%d poison records, want none", n)
	}
	requireMaterializedOnce(t, d, 1, later)
	requireUnblocked(t, e)
}

// TestPartitionDetachUnderRowSecurity: detach_partition runs as its
// caller, who must own the partitioned table. On a managed PostgreSQL the
// owner is no superuser, so row security enabled and forced on the
// partition would filter the emptiness check: with row security off, a
// policy that would hide rows makes the check fail (42501) instead, and the
// partition stays attached.
func TestPartitionDetachUnderRowSecurity(t *testing.T) {
	t.Parallel()
	e := newPartitionEnv(t)
	d := e.d
	role := "part_owner_" + strings.ToLower(d.Name[len(d.Name)-8:])
	d.Exec(t, `CREATE ROLE `+role+` NOLOGIN`)
	t.Cleanup(func() {
		_ = d.ExecErr(`DROP OWNED BY ` + role)
		_ = d.ExecErr(`DROP ROLE ` + role)
	})
	d.Exec(t, `ALTER TABLE app.parts OWNER TO `+role+`; ALTER TABLE app.parts_1 OWNER TO `+role+`;
		ALTER TABLE app.parts_2 OWNER TO `+role+`;
		GRANT USAGE ON SCHEMA app, synchro TO `+role+`;
		GRANT SELECT, DELETE ON synchro.relation_partition TO `+role+`; GRANT SELECT ON synchro.relation TO `+role+`;
		GRANT EXECUTE ON FUNCTION synchro.detach_partition(regclass), synchro.qualified_name(oid), synchro.partition_relation(oid) TO `+role+`;
		ALTER TABLE app.parts_2 ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
		CREATE POLICY visible ON app.parts_2 USING (v LIKE 'visible%')`)
	commitTxn(t, d, `INSERT INTO app.parts VALUES (1500, 'SECRET-hidden')`)
	waitMaterialized(t, d)
	requireImage(t, d, "app.parts", "1500", `{"id": 1500, "v": "SECRET-hidden"}`)
	err := asRole(t, d, role, `SELECT synchro.detach_partition('app.parts_2')`)
	requireNoSecret(t, err)
	if err == nil {
		// asRole rolled back: detach it for good to show the consequence.
		if _, cerr := tryCommit(t, d, sqlStep(`SET LOCAL ROLE `+role+`; SELECT synchro.detach_partition('app.parts_2')`)); cerr != nil {
			t.Fatalf("committing the detach: %v", cerr)
		}
		waitMaterialized(t, d)
		t.Errorf("detach_partition, run by the owner under forced row security, detached app.parts_2 holding a row the policy hides: catalog drift %q",
			rowsOf(t, d, `SELECT relation || ' ' || problem FROM synchro.catalog_drift()`))
		requirePartsLive(t, d)
		t.FailNow()
	}
	requireState(t, err, "42501", "row-level security")
	requireUnblocked(t, e)
}

// TestPartitionPendingDetachRefusesWritesThroughRoot: while DETACH ...
// CONCURRENTLY waits for older snapshots, a transaction holding one still
// routes writes through the root into the partition, but pgoutput no longer
// describes them by the root: the write could never be captured and used to
// block capture for good as an unmatched fence. The fence refuses it (55000);
// after the detach and a new attach, capture goes on with no poison record.
func TestPartitionPendingDetachRefusesWritesThroughRoot(t *testing.T) {
	t.Parallel()
	e := newPartitionEnv(t)
	d := e.d
	commitTxn(t, d, `INSERT INTO app.parts VALUES (1500, 'before')`)
	waitMaterialized(t, d)
	writer, detacher := ownConn(t, d), ownConn(t, d)
	connExec(t, writer, `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM app.parts`)
	done := connAsync(detacher, `ALTER TABLE app.parts DETACH PARTITION app.parts_2 CONCURRENTLY`)
	waitLockWait(t, d, detacher.PgConn().PID())
	_, err := writer.Exec(context.Background(), `UPDATE app.parts SET v = 'SECRET-123' WHERE id = 1500`)
	requireState(t, err, "55000", "")
	requireNoSecret(t, err)
	connExec(t, writer, `ROLLBACK`)
	if err := asyncResult(t, done); err != nil {
		t.Fatalf("detach: %v", err)
	}
	d.Exec(t, `ALTER TABLE app.parts ATTACH PARTITION app.parts_2 FOR VALUES FROM (1000) TO (2000)`)
	c := commitTxn(t, d, `UPDATE app.parts SET v = 'after' WHERE id = 1500`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, c)
	requireImage(t, d, "app.parts", "1500", `{"id": 1500, "v": "after"}`)
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
		t.Fatalf("%d poison records, want none", n)
	}
	requireUnblocked(t, e)
}
