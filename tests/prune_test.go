package tests

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/metrics"
	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// prune calls synchro.prune_capture_history and returns what it reports.
func prune(t *testing.T, d *testdb.DB, keep string, maxTxns int) (txns, events int64) {
	t.Helper()
	if err := d.Pool.QueryRow(context.Background(),
		`SELECT transactions, events FROM synchro.prune_capture_history($1::interval, $2)`, keep, maxTxns).Scan(&txns, &events); err != nil {
		t.Fatal(err)
	}
	return txns, events
}

// history counts a transaction's capture history: its event-ledger rows and its
// fences (pruned) beside its transaction-ledger rows and effects (kept).
type history struct{ events, fences, ledger, effects int64 }

func historyOf(t *testing.T, d *testdb.DB, c committed) history {
	t.Helper()
	var h history
	if err := d.Pool.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM synchro.event_ledger e JOIN synchro.txn_ledger l USING (stream_generation, commit_lsn) WHERE l.xid = $1),
		       (SELECT count(*) FROM synchro.fence WHERE fence_id = ANY ($2::uuid[])),
		       (SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1),
		       (SELECT count(*) FROM synchro.effect f JOIN synchro.txn_ledger l ON l.commit_lsn = f.commit_lsn WHERE l.xid = $1)`,
		c.xid, c.fences).Scan(&h.events, &h.fences, &h.ledger, &h.effects); err != nil {
		t.Fatal(err)
	}
	return h
}

// waitAcknowledged waits until the durable acknowledgement covers the WAL
// written so far.
func waitAcknowledged(t *testing.T, d *testdb.DB) {
	t.Helper()
	var target string
	if err := d.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_flush_lsn()::text`).Scan(&target); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "acknowledgement", 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT FROM synchro.progress WHERE acknowledged_end_lsn >= $1::pg_lsn)`, target).Scan(&ok)
		return ok, err
	})
}

// Pruning removes the event ledger and fences of acknowledged transactions
// only: not of a transaction materialized but not acknowledged (the slot sends it
// again after a crash, and its replay must find it durable), not of one that is
// not materialized, not of one younger than the retention. Replay identities,
// versions, effects and digests stay, and replays after pruning change nothing.
func TestPruneCaptureHistoryOnlyOfAcknowledgedTransactions(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg := workerConfig(d, "pruning")
	w := startStreaming(t, d, cfg)
	a := commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'a'), (2, 'b')`)
	waitMaterialized(t, d)
	waitAcknowledged(t, d)
	if err := w.stop(t); err != nil {
		t.Fatal(err)
	}
	b := commitTxn(t, d, `UPDATE app.docs SET v = 'bb' WHERE id = 2`)
	before := historyOf(t, d, a)
	if before != (history{events: 2, fences: 2, ledger: 1, effects: 2}) {
		t.Fatalf("history of the first transaction before pruning: %+v", before)
	}

	if n, e := prune(t, d, "1 hour", 100); n != 0 || e != 0 {
		t.Fatalf("history younger than the retention was pruned: %d transactions, %d events", n, e)
	}
	if _, e := prune(t, d, "0", 100); e != 2 {
		t.Fatalf("pruned %d events, want the first transaction's 2", e)
	}
	if got := historyOf(t, d, a); got != (history{events: 0, fences: 0, ledger: 1, effects: 2}) {
		t.Fatalf("history of the first transaction after pruning: %+v", got)
	}
	if got := historyOf(t, d, b); got.fences != 1 {
		t.Fatalf("the pending fence of an unmaterialized transaction was pruned: %+v", got)
	}

	// The second transaction is materialized, then the worker dies before the
	// slot advance: its history must survive pruning.
	crashCfg := cfg
	crashCfg.AfterStep = func(s wal.Step) error {
		if s == wal.StepMaterialized {
			return errors.New("simulated crash")
		}
		return nil
	}
	crashed := startWorker(t, d, crashCfg)
	if err := crashed.waitExit(t, 30*time.Second); !errors.Is(err, wal.ErrStopped) {
		t.Fatalf("worker did not stop at the hook: %v", err)
	}
	requireMaterializedOnce(t, d, 1, b)
	prune(t, d, "0", 100)
	if got := historyOf(t, d, b); got.events != 1 || got.fences != 1 {
		t.Fatalf("the history of a materialized, unacknowledged transaction was pruned: %+v", got)
	}

	// The restarted worker replays it as a no-op and acknowledges it; then it is pruned.
	startWorker(t, d, cfg)
	waitMaterialized(t, d)
	waitAcknowledged(t, d)
	requireMaterializedOnce(t, d, 2, a)
	requireMaterializedOnce(t, d, 1, b)
	if _, e := prune(t, d, "0", 100); e != 1 {
		t.Fatalf("pruned %d events, want the second transaction's 1", e)
	}
	if got := historyOf(t, d, b); got != (history{events: 0, fences: 0, ledger: 1, effects: 1}) {
		t.Fatalf("history of the second transaction after pruning: %+v", got)
	}
	requireDigests(t, d)
	requireEffectVersions(t, d)
	if n, e := prune(t, d, "0", 100); n != 0 || e != 0 {
		t.Fatalf("a second pruning found %d transactions, %d events", n, e)
	}
}

// Pruning goes oldest first, at most max_txns transactions a call, and stops at
// the first transaction that is not prunable.
func TestPruneCaptureHistoryInChunks(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	startStreaming(t, d, workerConfig(d, "chunks"))
	var txns []committed
	for i := range 5 {
		txns = append(txns, commitTxn(t, d, fmt.Sprintf(`INSERT INTO app.docs VALUES (%d, 'x')`, i)))
	}
	waitMaterialized(t, d)
	waitAcknowledged(t, d)
	if n, e := prune(t, d, "0", 2); n != 2 || e != 2 {
		t.Fatalf("first chunk: %d transactions, %d events; want 2 and 2", n, e)
	}
	for i, c := range txns {
		want := int64(0)
		if i >= 2 {
			want = 1
		}
		if got := historyOf(t, d, c); got.events != want || got.fences != want || got.ledger != 1 {
			t.Fatalf("transaction %d after the first chunk: %+v", i, got)
		}
	}
	if n, e := prune(t, d, "0", 10); n != 3 || e != 3 {
		t.Fatalf("second chunk: %d transactions, %d events; want 3 and 3", n, e)
	}

	// A retention longer than any history prunes nothing (no timestamp overflow).
	if n, e := prune(t, d, "10000 years", 10); n != 0 || e != 0 {
		t.Fatalf("keep '10000 years' pruned %d transactions, %d events", n, e)
	}
	// Arguments are checked; nothing changes on a refusal.
	for _, sql := range []string{
		`SELECT synchro.prune_capture_history('-1 second', 10)`,
		`SELECT synchro.prune_capture_history('0', 0)`,
		`SELECT synchro.prune_capture_history(NULL, 10)`,
	} {
		requireState(t, d.ExecErr(sql), "22023", "retention of zero or more")
	}
}

// pruningConfig is a test worker's configuration that prunes acknowledged
// history at once every interval, logging into logs and serving its metrics at
// metricsURL.
func pruningConfig(t *testing.T, d *testdb.DB, id string, interval time.Duration) (cfg wal.Config, logs *lockedBuffer, metricsURL string) {
	t.Helper()
	cfg = workerConfig(d, id)
	cfg.HistoryRetention, cfg.PruneInterval = time.Microsecond, interval
	logs = logTo(&cfg)
	cfg.Metrics = metrics.New(d.Pool)
	srv := httptest.NewServer(cfg.Metrics.Handler())
	t.Cleanup(srv.Close)
	return cfg, logs, srv.URL
}

// A worker with a retention prunes by itself, and capture goes on.
func TestWorkerPrunesCaptureHistory(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	cfg, logs, metricsURL := pruningConfig(t, d, "retaining", 20*time.Millisecond)
	startStreaming(t, d, cfg)
	first := commitTxn(t, d, `INSERT INTO app.docs SELECT g, 'x' FROM generate_series(1, 50) g`)
	second := commitTxn(t, d, `UPDATE app.docs SET v = 'y' WHERE id <= 10; DELETE FROM app.docs WHERE id > 40`)
	waitMaterialized(t, d)
	waitFor(t, "capture history pruned", 30*time.Second, func() (bool, error) {
		var left int64
		err := d.Pool.QueryRow(context.Background(),
			`SELECT (SELECT count(*) FROM synchro.event_ledger) + (SELECT count(*) FROM synchro.fence)`).Scan(&left)
		return left == 0, err
	})
	// The worker counts what it pruned once the pruning committed.
	waitFor(t, "pruning metric", 30*time.Second, func() (bool, error) {
		return metricValue(t, scrape(t, metricsURL), "synchro_capture_history_pruned_events_total") == 70, nil
	})
	requireMaterializedOnce(t, d, 50, first)
	requireMaterializedOnce(t, d, 20, second)
	if got := historyOf(t, d, second); got.effects != 20 {
		t.Fatalf("effects of the second transaction after pruning: %+v", got)
	}
	third := commitTxn(t, d, `INSERT INTO app.docs VALUES (100, 'z')`)
	waitMaterialized(t, d)
	requireMaterializedOnce(t, d, 1, third)
	requireDigests(t, d)
	if !strings.Contains(logs.String(), "capture history pruned") {
		t.Fatalf("the worker did not log its pruning:\n%s", logs.String())
	}
}

// TestWorkerPrunesUnderSessionTimeouts: a statement_timeout and lock_timeout
// that an operator sets for every session of the database (here on the worker's
// pool) do not reach pruning: a chunk of a few thousand transactions takes
// longer than the tiny statement_timeout, and pruning failed every round with a
// warning, the history never pruned.
func TestWorkerPrunesUnderSessionTimeouts(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	createWriteMany(t, d, "'x'")
	w := startStreaming(t, d, workerConfig(d, "writer"))
	d.Exec(t, `CALL app.write_many(3000)`)
	waitMaterialized(t, d)
	waitAcknowledged(t, d)
	if err := w.stop(t); err != nil {
		t.Fatal(err)
	}

	pool, err := pgxpool.New(context.Background(), d.URL+"&statement_timeout=5&lock_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the worker stops (cleanups run last first)
	cfg, logs, _ := pruningConfig(t, d, "pruner", 20*time.Millisecond)
	startWorkerOn(t, d, pool, cfg)
	waitFor(t, "capture history pruned under a 5 ms statement_timeout", 30*time.Second, func() (bool, error) {
		var left int64
		err := d.Pool.QueryRow(context.Background(),
			`SELECT (SELECT count(*) FROM synchro.event_ledger) + (SELECT count(*) FROM synchro.fence)`).Scan(&left)
		if failed := strings.Count(logs.String(), "capture history pruning failed"); err == nil && left > 0 && failed >= 100 {
			err = fmt.Errorf("pruning failed %d times, %d rows left; the first: %s", failed, left, regexp.MustCompile(`capture history pruning failed.*`).FindString(logs.String()))
		}
		return left == 0, err
	})
	requireHistoryInvariant(t, d)
	requirePrunedThroughHighWatermark(t, d)
}

// Pruning takes no lock a materialization holds: with the progress row locked
// as materialize_transaction locks it until it commits, a pruning call still
// prunes and returns (it used to wait on that row, holding one of the worker's
// few pool connections for a whole batch and starving its heartbeat).
func TestPruneNeverWaitsForMaterialization(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	sharedDocs(t, d)
	startStreaming(t, d, workerConfig(d, "locked"))
	commitTxn(t, d, `INSERT INTO app.docs VALUES (1, 'a'), (2, 'b')`)
	waitMaterialized(t, d)
	waitAcknowledged(t, d)
	ctx := context.Background()
	// The lock is held outside the pool, as the materialization's own
	// connection holds it: the worker's idle acknowledgement waits on the row
	// with a pool connection, and a holder from the pool as well would leave the
	// call below none.
	holder, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, `BEGIN; SELECT FROM synchro.progress FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		events int64
		err    error
	}
	done := make(chan result, 1)
	go func() {
		var n, e int64
		err := d.Pool.QueryRow(ctx, `SELECT transactions, events FROM synchro.prune_capture_history('0', 100)`).Scan(&n, &e)
		done <- result{e, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.events != 2 {
			t.Fatalf("pruning beside a locked progress row: %d events, %v; want 2", r.events, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("pruning waited 30s for the progress row a materialization holds; sessions:\n%s", sessionsOf(t, d))
	}
}
