package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro-sync/synchro/internal/testdb"
	"github.com/synchro-sync/synchro/internal/wal"
)

// runningWorker is a capture worker running in the test process.
type runningWorker struct {
	cancel context.CancelFunc
	done   chan error
}

// testSpillBytes is the row data of one transaction test workers hold in
// memory: transactions of more than a few rows keep the rest in a spill file,
// so that the suite runs both ways of holding a transaction.
const testSpillBytes = 2048

// workerConfig is the configuration tests run workers with: the test database's
// own slot, quick batches and idle acknowledgements, and a small spill threshold.
func workerConfig(d *testdb.DB, id string) wal.Config {
	return wal.Config{
		DatabaseURL:       d.URL,
		Slot:              "w_" + strings.ReplaceAll(strings.ToLower(d.Name), "-", "_"),
		Publication:       "synchro",
		WorkerID:          id,
		BatchMaxDelay:     5 * time.Millisecond,
		SpillBytes:        testSpillBytes,
		IdleAckInterval:   100 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		RetryInterval:     50 * time.Millisecond,
		Log:               slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// startWorker runs a worker until stop or the end of the test; the slot it
// creates is dropped at the end of the test.
func startWorker(t *testing.T, d *testdb.DB, cfg wal.Config) *runningWorker {
	t.Helper()
	return startWorkerOn(t, d, d.Pool, cfg)
}

// startWorkerOn is startWorker with the worker's own pool.
func startWorkerOn(t *testing.T, d *testdb.DB, pool *pgxpool.Pool, cfg wal.Config) *runningWorker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &runningWorker{cancel: cancel, done: make(chan error, 1)}
	go func() { w.done <- wal.New(cfg, pool).Run(ctx) }()
	t.Cleanup(func() {
		w.stop(t)
		d.DropSlot(t, cfg.Slot)
	})
	return w
}

// stop ends the worker and returns what Run returned.
func (w *runningWorker) stop(t *testing.T) error {
	t.Helper()
	w.cancel()
	select {
	case err, ok := <-w.done:
		if ok {
			close(w.done)
			return err
		}
		return nil
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not stop within 30s")
		return nil
	}
}

// reportStreaming makes worker $1's heartbeat row say streaming, now. A worker
// that stops records the state stopped, which fails readiness at once; a test of
// what happens while capture lags behind a live worker stops the worker and
// keeps its heartbeat a streaming worker's with this.
const reportStreaming = `UPDATE synchro.worker_heartbeat SET state = 'streaming', heartbeat_at = now() WHERE worker_id = $1`

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	if err := waitUntil(what, timeout, cond); err != nil {
		t.Fatal(err)
	}
}

// waitUntil is waitFor for a goroutine other than the test's: it returns the
// failure instead of failing the test.
func waitUntil(what string, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitMaterialized waits until every fence written so far is materialized and
// the stream has processed the WAL written so far; a blocking poison
// transaction fails it at once.
func waitMaterialized(t *testing.T, d *testdb.DB) {
	t.Helper()
	var target string
	if err := d.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_flush_lsn()::text`).Scan(&target); err != nil {
		t.Fatal(err)
	}
	// A fence is materialized once the event ledger names it, or (after a
	// stream reset) the activated baseline covers it (retirement removes the
	// fences it covered with their coverage). A schema of an earlier version
	// (an upgrade test's) has no resets.
	covered := `false`
	if queryBool(t, d, `SELECT to_regclass('synchro.reset_coverage') IS NOT NULL`) {
		covered = `EXISTS (SELECT FROM synchro.reset_coverage c JOIN synchro.stream_reset r USING (reset_id)
		                   WHERE c.fence_id = f.fence_id AND r.phase = 'activated')`
	}
	waitFor(t, "materialization", 120*time.Second, func() (bool, error) {
		var ok bool
		var poison *string
		err := d.Pool.QueryRow(context.Background(), `
			SELECT NOT EXISTS (SELECT FROM synchro.fence f WHERE NOT EXISTS (SELECT FROM synchro.event_ledger e WHERE e.fence_id = f.fence_id)
			                     AND NOT `+covered+`)
			   AND EXISTS (SELECT FROM synchro.progress WHERE processed_end_lsn >= $1::pg_lsn),
			   (SELECT string_agg(p::text, ', ') FROM synchro.poison_txn p WHERE resolved_at IS NULL AND retry_requested_at IS NULL)`,
			target).Scan(&ok, &poison)
		if err == nil && poison != nil {
			err = fmt.Errorf("the stream is blocked by a poison transaction: %s", *poison)
		}
		return ok, err
	})
}

// waitExit waits for a worker that stops by itself (a hook) and returns what Run
// returned; stop is a no-op afterwards.
func (w *runningWorker) waitExit(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-w.done:
		close(w.done)
		return err
	case <-time.After(timeout):
		t.Fatalf("worker did not stop by itself within %s", timeout)
		return nil
	}
}

// waitStream waits until the worker started the stream generation: from then on
// every committed write reaches its slot.
func waitStream(t *testing.T, d *testdb.DB) {
	t.Helper()
	waitFor(t, "stream start", 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM synchro.progress)`).Scan(&ok)
		return ok, err
	})
}

// startStreaming starts a worker and waits until its stream generation exists.
func startStreaming(t *testing.T, d *testdb.DB, cfg wal.Config) *runningWorker {
	t.Helper()
	w := startWorker(t, d, cfg)
	waitStream(t, d)
	return w
}

// restartAfterAcknowledgementPast waits until the durable acknowledgement is
// past lsn, stops worker w and starts another one (worker id w2) with cfg,
// which resumes the stream from that acknowledgement.
func restartAfterAcknowledgementPast(t *testing.T, d *testdb.DB, w *runningWorker, cfg wal.Config, lsn, what string) {
	t.Helper()
	waitFor(t, "an acknowledgement past "+what, 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(context.Background(), `SELECT coalesce(acknowledged_end_lsn > $1::pg_lsn, false) FROM synchro.progress`, lsn).Scan(&ok)
		return ok, err
	})
	w.stop(t)
	cfg.WorkerID = "w2"
	startWorker(t, d, cfg)
	waitState(t, d, "w2", "streaming")
}

// waitState waits until the worker's heartbeat reports state.
func waitState(t *testing.T, d *testdb.DB, workerID, state string) {
	t.Helper()
	waitFor(t, "worker "+workerID+" state "+state, 30*time.Second, func() (bool, error) {
		var ok bool
		err := d.Pool.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT FROM synchro.worker_heartbeat WHERE worker_id = $1 AND state = $2)`, workerID, state).Scan(&ok)
		return ok, err
	})
}

// waitBlocked waits until the worker is blocked and has kept reporting so in
// heartbeats spanning more than span, so that it had several chances to move
// on. Between its retries it may report starting; it must never report streaming.
func waitBlocked(t *testing.T, d *testdb.DB, workerID string, span time.Duration) {
	t.Helper()
	waitState(t, d, workerID, "blocked")
	var since time.Time
	if err := d.Pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "heartbeats of blocked worker "+workerID, 30*time.Second, func() (bool, error) {
		var state string
		var at time.Time
		err := d.Pool.QueryRow(context.Background(),
			`SELECT state, heartbeat_at FROM synchro.worker_heartbeat WHERE worker_id = $1`, workerID).Scan(&state, &at)
		if err != nil {
			return false, err
		}
		if state == "streaming" {
			return false, fmt.Errorf("blocked worker %s reports state streaming", workerID)
		}
		return state == "blocked" && at.After(since.Add(span)), nil
	})
}

// requireMaterializedOnce asserts that each transaction was materialized once with
// events row events, all applied.
func requireMaterializedOnce(t *testing.T, d *testdb.DB, events int, txns ...committed) {
	t.Helper()
	for _, c := range txns {
		if n := queryInt(t, d, `SELECT count(*) FROM synchro.txn_ledger WHERE xid = $1`, c.xid); n != 1 {
			t.Fatalf("transaction %d has %d ledger rows, want 1", c.xid, n)
		}
		if _, _, ev, applied := ledgerOf(t, d, c); ev != events || applied != events {
			t.Fatalf("transaction %d: %d events, %d applied; want %d and %d", c.xid, ev, applied, events, events)
		}
	}
}

// committed describes a source transaction a test wrote: its 32-bit xid (as
// pgoutput reports it), the fence ids it created in DML order, and WAL insert
// positions read before it began and after it committed, which bound its
// commit record.
type committed struct {
	xid           int64
	fences        []string
	before, after string
}

// commitTxn runs the statements as one transaction on one connection.
func commitTxn(t *testing.T, d *testdb.DB, statements string) committed {
	t.Helper()
	return commitSteps(t, d, sqlStep(statements))
}

// commitEach commits each entry of statements as a transaction of its own, in order.
func commitEach(t *testing.T, d *testdb.DB, statements []string) []committed {
	t.Helper()
	cs := make([]committed, 0, len(statements))
	for _, sql := range statements {
		cs = append(cs, commitTxn(t, d, sql))
	}
	return cs
}

// txnStep is one step of a source transaction, run on its connection.
type txnStep func(ctx context.Context, conn *pgx.Conn) error

// shapeSQL is a step running statements (simple protocol: several at once).
func sqlStep(sql string) txnStep {
	return func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, sql)
		return err
	}
}

// shapeCopy is a step copying text-format data into a relation's columns.
func copyStep(copySQL, data string) txnStep {
	return func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.PgConn().CopyFrom(ctx, strings.NewReader(data), copySQL)
		return err
	}
}

// copyText escapes a value for COPY's text format.
func copyText(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\r", `\r`).Replace(s)
}

// commitSteps runs the steps as one transaction on one connection and commits
// it (tryCommit); the test fails if it does not commit.
func commitSteps(t *testing.T, d *testdb.DB, steps ...txnStep) committed {
	t.Helper()
	c, err := tryCommit(t, d, steps...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tryCommit runs the steps as one transaction on one connection and commits it,
// or returns the error that ended it (rolled back). It reads the transaction's
// fences after the commit, on the same connection, so that fences of deferred
// triggers (which fire at commit) are included.
func tryCommit(t *testing.T, d *testdb.DB, steps ...txnStep) (committed, error) {
	t.Helper()
	ctx := context.Background()
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var c committed
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&c.before); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	for i, step := range steps {
		if err := step(ctx, conn.Conn()); err != nil {
			_, _ = conn.Exec(ctx, "ROLLBACK")
			return c, fmt.Errorf("step %d of the transaction: %w", i, err)
		}
	}
	var xid8 string
	if err := conn.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid8); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return c, fmt.Errorf("commit: %w", err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&c.after); err != nil {
		t.Fatal(err)
	}
	return committedXid(t, conn, xid8, c.before, c.after), nil
}

// committedXid describes the committed transaction with full xid xid8, reading
// its fences through q (a connection, or the pool).
func committedXid(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, xid8, before, after string) committed {
	t.Helper()
	c := committed{before: before, after: after}
	if err := q.QueryRow(context.Background(), `
		SELECT ($1::xid8::text::numeric % 4294967296)::bigint,
		       coalesce((SELECT array_agg(fence_id::text ORDER BY dml_ordinal) FROM synchro.fence WHERE xid = $1::xid8), '{}')`,
		xid8).Scan(&c.xid, &c.fences); err != nil {
		t.Fatal(err)
	}
	return c
}

// ledgerOf returns the txn_ledger row of a committed transaction (by xid) and
// checks that its commit record lies between the bounds the test read.
func ledgerOf(t *testing.T, d *testdb.DB, c committed) (commitLSN, endLSN string, eventCount, applied int) {
	t.Helper()
	var inBounds bool
	err := d.Pool.QueryRow(context.Background(), `
		SELECT commit_lsn::text, end_lsn::text, event_count, applied_count,
		       commit_lsn > $2::pg_lsn AND end_lsn <= $3::pg_lsn
		FROM synchro.txn_ledger WHERE xid = $1`, c.xid, c.before, c.after).Scan(&commitLSN, &endLSN, &eventCount, &applied, &inBounds)
	if err != nil {
		t.Fatalf("txn_ledger row of xid %d: %v", c.xid, err)
	}
	if !inBounds {
		t.Fatalf("txn_ledger row of xid %d at %s..%s lies outside the transaction's WAL bounds %s..%s", c.xid, commitLSN, endLSN, c.before, c.after)
	}
	return
}

// effect is one pull effect, with its transaction as an index in commit order
// among the materialized transactions.
type effect struct {
	txn           int
	scope         string
	event, ordNum int
	tableID       int
	key, op       string
	version       string // "" for a delete
}

func (e effect) String() string {
	return fmt.Sprintf("t%d %s e%d/%d %d:%s %s", e.txn, e.scope, e.event, e.ordNum, e.tableID, e.key, e.op)
}

// effects returns the effects in delivery position order per transaction
// (commit_lsn, scope, event_ordinal, effect_ordinal), or only those of one
// commit (then txn is 0).
func effects(t *testing.T, d *testdb.DB, commitLSN string) []effect {
	t.Helper()
	rows, err := d.Pool.Query(context.Background(), `
		SELECT l.idx, e.scope, e.event_ordinal, e.effect_ordinal, e.table_id, e.key, e.op, coalesce(e.version, '')
		FROM synchro.effect e
		JOIN (SELECT commit_lsn, (row_number() OVER (ORDER BY commit_lsn) - 1)::int AS idx FROM synchro.txn_ledger) l USING (commit_lsn)
		WHERE nullif($1, '')::pg_lsn IS NULL OR e.commit_lsn = nullif($1, '')::pg_lsn
		ORDER BY e.commit_lsn, e.scope COLLATE "C", e.event_ordinal, e.effect_ordinal`, commitLSN)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []effect
	for rows.Next() {
		var e effect
		if err := rows.Scan(&e.txn, &e.scope, &e.event, &e.ordNum, &e.tableID, &e.key, &e.op, &e.version); err != nil {
			t.Fatal(err)
		}
		if commitLSN != "" {
			e.txn = 0 // the effects of one commit: no index
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// rowsOf runs a query and renders every row as its text columns joined by "|".
func rowsOf(t *testing.T, d *testdb.DB, sql string, args ...any) []string {
	t.Helper()
	rows, err := d.Pool.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("query %q: %v", sql, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = fmt.Sprint(v)
		}
		out = append(out, strings.Join(parts, "|"))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// requireDigests checks every recorded scope digest against the membership
// edges and row versions: at each (scope, commit) it is the sum mod 2^32 of the
// checksums of the row versions current at that commit over the rows whose edge
// is open there, and row_count is their number, all within the digest's stream
// generation (after a stream reset the old generation's state stays until
// retirement). The latest digest of each scope of the active generation also
// equals the sum over its open edges and synchro.synced_row.
func requireDigests(t *testing.T, d *testdb.DB) {
	t.Helper()
	bad := rowsOf(t, d, `
		SELECT sd.scope, sd.commit_lsn::text, sd.digest, sd.row_count, x.total % 4294967296, x.n
		FROM synchro.scope_digest sd
		CROSS JOIN LATERAL (
			SELECT coalesce(sum(v.checksum), 0) AS total, count(*) AS n
			FROM synchro.membership m
			CROSS JOIN LATERAL (SELECT rv.checksum FROM synchro.row_version rv
			                    WHERE rv.stream_generation = sd.stream_generation
			                      AND rv.table_id = m.table_id AND rv.key = m.key AND rv.commit_lsn <= sd.commit_lsn
			                    ORDER BY rv.commit_lsn DESC LIMIT 1) v
			WHERE m.stream_generation = sd.stream_generation AND m.scope = sd.scope
			  AND m.from_lsn <= sd.commit_lsn AND (m.to_lsn IS NULL OR m.to_lsn > sd.commit_lsn)) x
		WHERE sd.digest <> x.total % 4294967296 OR sd.row_count <> x.n`)
	if len(bad) > 0 {
		t.Fatalf("scope digests disagree with the membership edges (scope|commit|digest|row_count|want digest|want count): %v", bad)
	}
	bad = rowsOf(t, d, `
		WITH latest AS (SELECT DISTINCT ON (scope) scope, digest, row_count FROM synchro.scope_digest
		                JOIN synchro.progress p USING (stream_generation) ORDER BY scope, commit_lsn DESC),
		     open AS (SELECT m.scope, sum(s.checksum) AS total, count(*) AS n
		              FROM synchro.membership m JOIN synchro.progress p USING (stream_generation)
		              JOIN synchro.synced_row s USING (table_id, key)
		              WHERE m.to_lsn IS NULL GROUP BY m.scope)
		SELECT scope, l.digest, l.row_count, coalesce(o.total, 0) % 4294967296, coalesce(o.n, 0)
		FROM latest l FULL JOIN open o USING (scope)
		WHERE l.digest IS DISTINCT FROM coalesce(o.total, 0) % 4294967296 OR l.row_count IS DISTINCT FROM coalesce(o.n, 0)`)
	if len(bad) > 0 {
		t.Fatalf("latest scope digests disagree with synced_row over open membership (scope|digest|row_count|sum|count): %v", bad)
	}
	if n := queryInt(t, d, `SELECT count(*) FROM synchro.membership m JOIN synchro.progress p USING (stream_generation) WHERE m.to_lsn IS NULL
		AND NOT EXISTS (SELECT FROM synchro.synced_row s WHERE s.table_id = m.table_id AND s.key = m.key)`); n != 0 {
		t.Fatalf("%d open membership edges of rows without a current version", n)
	}
}

// sessionsOf lists the test database's other sessions (pid, wait event, state,
// start of the query), read over a connection of its own, for a failure message
// when something waits: the pool may be what is exhausted.
func sessionsOf(t *testing.T, d *testdb.DB) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		return err.Error()
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT format('%s %s/%s %s %s', pid, wait_event_type, wait_event, state, left(query, 120))
		FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() ORDER BY pid`)
	if err != nil {
		return err.Error()
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	return strings.Join(lines, "\n")
}

// logTo makes cfg log (debug and up) into a new buffer.
func logTo(cfg *wal.Config) *lockedBuffer {
	b := &lockedBuffer{}
	cfg.Log = slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return b
}

// requireEffectVersions checks that every upsert effect carries the row version
// current at its commit (the latest row_version of the row in the effect's
// stream generation at or before it, with an image) and every delete carries
// none.
func requireEffectVersions(t *testing.T, d *testdb.DB) {
	t.Helper()
	bad := rowsOf(t, d, `
		SELECT e.scope, e.commit_lsn::text, e.table_id, e.key, e.op, e.version, cur.version
		FROM synchro.effect e
		LEFT JOIN LATERAL (SELECT rv.version, rv.image FROM synchro.row_version rv
		                   WHERE rv.stream_generation = e.stream_generation
		                     AND rv.table_id = e.table_id AND rv.key = e.key AND rv.commit_lsn <= e.commit_lsn
		                   ORDER BY rv.commit_lsn DESC LIMIT 1) cur ON true
		WHERE (e.op = 'upsert' AND (e.version IS DISTINCT FROM cur.version OR cur.image IS NULL))
		   OR (e.op = 'delete' AND e.version IS NOT NULL)`)
	if len(bad) > 0 {
		t.Fatalf("effects whose version is not the row's current version (scope|commit|table|key|op|version|current): %v", bad)
	}
}

// tableID is the logical table id of a synced table by wire name.
func tableID(t *testing.T, d *testdb.DB, name string) int {
	t.Helper()
	return int(queryInt(t, d, `SELECT table_id FROM synchro.synced_table WHERE name = $1`, name))
}

// rowVersion is the current opaque version of a registered row (its identity
// reservation, which holds the version of the row's last fence).
func rowVersion(t *testing.T, d *testdb.DB, relation, key string) string {
	t.Helper()
	return queryText(t, d, `SELECT h.version FROM synchro.row_head h
		WHERE h.relation_id = (SELECT relation_id FROM synchro.relation WHERE relation_oid = $1::regclass) AND h.key = $2`, relation, key)
}

// requireEffects compares effect lists.
func requireEffects(t *testing.T, what string, got, want []effect) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d effects, want %d\ngot:  %v\nwant: %v", what, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: effect %d is %v (version %q), want %v (version %q)\ngot:  %v\nwant: %v",
				what, i, got[i], got[i].version, want[i], want[i].version, got, want)
		}
	}
}

// sharedDocs creates app.docs(id int, v text) registered with one shared scope
// "all", the schema most worker tests need.
func sharedDocs(t *testing.T, d *testdb.DB) {
	t.Helper()
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.docs (id int PRIMARY KEY, v text);
		SELECT synchro.register_table('app.docs', '{"kind":"shared","scope":"all"}')`)
}

// ownedDocs registers app.docs (id, owner) with the column rule user:{owner}.
func ownedDocs(t *testing.T, d *testdb.DB) {
	t.Helper()
	d.Exec(t, `CREATE SCHEMA app; CREATE TABLE app.docs (id int PRIMARY KEY, owner text);
		SELECT synchro.register_table('app.docs', '{"kind":"column","template":"user:{owner}"}')`)
}
