package tests

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synchro-sync/synchro/internal/testdb"
)

// TestAwaitVisible: materialization waits for decoded source transactions that
// are not yet visible to other snapshots (their commit is decoded from WAL a
// moment before the committing backend leaves the proc array). A transaction
// still in progress makes synchro.await_visible wait; past its timeout it raises
// serialization_failure (40001, a passing condition the worker retries, never a
// poison); once the transaction ends the wait returns.
func TestAwaitVisible(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := context.Background()
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var xid int64
	if err := tx.QueryRow(ctx, `SELECT (pg_current_xact_id()::text::numeric % 4294967296)::bigint`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	requireState(t, d.ExecErr(`SELECT synchro.await_visible(ARRAY[$1::bigint], '50 milliseconds')`, xid), "40001", "still not visible")
	var done1, done2 int64 // two transactions that have ended: one committed, one rolled back
	if err := d.Pool.QueryRow(ctx, `SELECT (pg_current_xact_id()::text::numeric % 4294967296)::bigint`).Scan(&done1); err != nil {
		t.Fatal(err)
	}
	aborted, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := aborted.QueryRow(ctx, `SELECT (pg_current_xact_id()::text::numeric % 4294967296)::bigint`).Scan(&done2); err != nil {
		t.Fatal(err)
	}
	if err := aborted.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.ExecErr(`SELECT synchro.await_visible(ARRAY[$1::bigint, $2::bigint], '50 milliseconds')`, done1, done2); err != nil {
		t.Fatalf("transactions that ended: %v", err)
	}

	done := make(chan error, 1)
	go func() { done <- d.ExecErr(`SELECT synchro.await_visible(ARRAY[$1::bigint], '60 seconds')`, xid) }()
	waitFor(t, "the wait to be running", 30*time.Second, func() (bool, error) {
		return queryBool(t, d, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE query LIKE '%synchro.await_visible%'
			AND query NOT LIKE '%pg_stat_activity%' AND state = 'active')`), nil
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the wait did not end with the transaction: %v", err)
	}
}

// TestCaptureWaitsForCommitsDecodedBeforeVisible: with a synchronous standby a
// committing backend waits for it after its commit record is in the WAL, and
// only then becomes visible; the worker decodes the transaction meanwhile. A
// write must wait to be materialized (its fence rows are not visible yet), and
// so must a registration: its activation names a registry generation the
// worker cannot read yet, which used to quarantine the healthy transaction as
// registry_unknown. Each waits, then is materialized once, without poison.
func TestCaptureWaitsForCommitsDecodedBeforeVisible(t *testing.T) {
	t.Parallel()
	const table = `CREATE SCHEMA app; CREATE TABLE app.a (id int PRIMARY KEY, v text)`
	const register = `SELECT synchro.register_table('app.a', '{"kind":"shared","scope":"all"}')`
	for _, tc := range []struct{ name, setup, txn string }{
		{"write", table + "; " + register, `INSERT INTO app.a VALUES (1, 'x')`},
		{"registration", table, register + `; INSERT INTO app.a VALUES (1, 'x')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := testdb.New(t)
			if got := queryText(t, d, `SELECT current_setting('synchronous_standby_names') || '/' || current_setting('synchronous_commit')`); got != "synchro_test_absent_standby/local" {
				t.Fatalf("the test cluster's synchronous standby setting is %q: this test needs the absent standby that scripts/pgcluster.sh configures (PGCLUSTER_FAST=1, as make test runs it)", got)
			}
			d.Exec(t, tc.setup)
			startStreaming(t, d, workerConfig(d, "w1"))

			conn, err := pgx.Connect(ctx, d.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var before, xid8 string
			if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&before); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, "BEGIN; SET LOCAL synchronous_commit = on; "+tc.txn); err != nil {
				t.Fatal(err)
			}
			if err := conn.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid8); err != nil {
				t.Fatal(err)
			}
			committing := make(chan error, 1)
			go func() {
				_, err := conn.Exec(ctx, "COMMIT")
				committing <- err
			}()
			pid := conn.PgConn().PID()
			// Cancelling the wait leaves the transaction committed; also when the
			// test fails first, so that the connection is free to close.
			commit := func() error {
				if _, err := d.Pool.Exec(ctx, `SELECT pg_cancel_backend($1)`, pid); err != nil {
					return err
				}
				return <-committing
			}
			released := false
			defer func() {
				if !released {
					_ = commit()
				}
			}()
			waitFor(t, "the commit to wait for the standby", 30*time.Second, func() (bool, error) {
				return queryBool(t, d, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep')`, pid), nil
			})
			waitFor(t, "the worker to wait for the decoded transaction to become visible", 30*time.Second, func() (bool, error) {
				if p := queryText(t, d, `SELECT coalesce(string_agg(failure_class, ', '), '') FROM synchro.poison_txn`); p != "" {
					return false, fmt.Errorf("the decoded transaction was quarantined: %s", p)
				}
				return queryBool(t, d, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()
					AND wait_event = 'PgSleep' AND query LIKE '%synchro.%' AND pid <> pg_backend_pid())`), nil
			})
			if queryBool(t, d, `SELECT EXISTS (SELECT FROM synchro.txn_ledger WHERE xid = ($1::xid8::text::numeric % 4294967296)::bigint)`, xid8) {
				t.Fatal("the transaction was materialized before it was visible")
			}
			released = true
			if err := commit(); err != nil {
				t.Fatalf("commit: %v", err)
			}
			var after string
			if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&after); err != nil {
				t.Fatal(err)
			}
			c := committedXid(t, conn, xid8, before, after)
			waitMaterialized(t, d)
			if _, _, events, applied := ledgerOf(t, d, c); events != 1 || applied != 1 {
				t.Fatalf("txn_ledger: event_count %d, applied_count %d; want 1 and 1", events, applied)
			}
			if got := rowsOf(t, d, `SELECT key FROM synchro.synced_row`); !slices.Equal(got, []string{"1"}) {
				t.Fatalf("synced rows %v, want the row the transaction wrote", got)
			}
			if n := queryInt(t, d, `SELECT count(*) FROM synchro.poison_txn`); n != 0 {
				t.Fatalf("%d poison records", n)
			}
		})
	}
}
