package tests

import (
	"context"
	"testing"
	"time"

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
