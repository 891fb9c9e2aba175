package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The retention workload: retentionUsers users own retentionWidth rows each of
// bench.items; every transaction writes the retentionWidth rows of one user
// (first an INSERT of them, then retentionPasses UPDATEs), so that
// retentionUsers * (1 + retentionPasses) transactions of retentionWidth
// changes make 1,000,000 changes to 10,000 rows. Every tenth pass moves each
// row to its user's other scope (user:u<k> <-> user:v<k>), closing a
// membership edge.
const (
	retentionUsers  = 100
	retentionWidth  = 100
	retentionPasses = 99
)

// retentionWrites is the writer: one call writes the transactions of users
// first..first+users-1, each committed on its own.
const retentionWrites = `
CREATE PROCEDURE bench.retention_writes(first integer, users integer, passes integer, width integer)
LANGUAGE plpgsql AS $$
BEGIN
    FOR u IN first .. first + users - 1 LOOP
        INSERT INTO bench.items SELECT g, 'u' || u, md5(g::text) FROM generate_series(u * width, u * width + width - 1) g;
        COMMIT;
    END LOOP;
    FOR p IN 1 .. passes LOOP
        FOR u IN first .. first + users - 1 LOOP
            UPDATE bench.items
            SET body = md5(id || ':' || p),
                owner = CASE WHEN p % 10 = 0 THEN CASE WHEN owner LIKE 'u%' THEN 'v' ELSE 'u' END || u ELSE owner END
            WHERE id BETWEEN u * width AND u * width + width - 1;
            COMMIT;
        END LOOP;
    END LOOP;
END $$`

// retentionRun writes 1,000,000 changes to 10,000 rows of bench.items (two
// writer sessions) while a worker that keeps the whole history captures them,
// and measures the synchro schema after VACUUM; then a worker with a
// one-second retention of both histories prunes all of it in one round (the
// capture history, then synchro.prune_history in the worker's batches), and
// the schema is measured again after VACUUM FULL, beside the bytes of those
// rows' own projections. The prune rate is the pull history's rows removed a
// second in that round (from synchro.history_horizon), beside the same rows
// written a second by the capture.
func retentionRun(ctx context.Context, adminURL string) ([]row, error) {
	url, pool, drop, err := benchDB(ctx, adminURL, "bench_retention")
	if err != nil {
		return nil, err
	}
	defer drop()
	if _, err := pool.Exec(ctx, retentionWrites); err != nil {
		return nil, err
	}
	stop := startWorker(url, pool)
	defer func() { stop() }()
	if err := waitFor(ctx, pool, `SELECT EXISTS (SELECT FROM synchro.progress)`); err != nil {
		return nil, err
	}

	changes := retentionUsers * (1 + retentionPasses) * retentionWidth
	progress("retention: writing %d changes to %d rows in %d-change transactions while the worker captures them",
		changes, retentionUsers*retentionWidth, retentionWidth)
	t0 := time.Now()
	if err := retentionWrite(ctx, pool); err != nil {
		return nil, err
	}
	written := time.Since(t0)
	// A transaction of its own ends the writes; the wait reads the progress
	// row, not the ledgers: it must not load the database it measures.
	var end string
	if err := pool.QueryRow(ctx, `SELECT pg_logical_emit_message(true, 'synchrobench', 'end')::text`).Scan(&end); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, pool, `SELECT coalesce(materialized_end_lsn >= $1::pg_lsn, false) FROM synchro.progress`, end); err != nil {
		return nil, err
	}
	captureDur := time.Since(t0)
	stop()
	var txns int64
	var last string
	if err := pool.QueryRow(ctx, `SELECT count(*), max(commit_lsn)::text FROM synchro.txn_ledger`).Scan(&txns, &last); err != nil {
		return nil, err
	}
	progress("retention: written in %s, %d transactions materialized in %s (%.0f changes/s)", written.Round(time.Millisecond),
		txns, captureDur.Round(time.Millisecond), float64(changes)/captureDur.Seconds())

	if _, err := pool.Exec(ctx, `VACUUM`); err != nil {
		return nil, err
	}
	unpruned, err := schemaSize(ctx, pool, "unpruned, after VACUUM")
	if err != nil {
		return nil, err
	}

	progress("retention: pruning with a 1s retention of both histories")
	cfg := workerConfig(url)
	cfg.HistoryRetention, cfg.PullHistoryRetention, cfg.PruneInterval = time.Second, time.Second, time.Second
	p0 := time.Now()
	stop = startWorkerConfig(cfg, pool)
	if err := waitFor(ctx, pool, `SELECT coalesce((SELECT horizon_lsn >= $1::pg_lsn FROM synchro.history_horizon)
		AND (SELECT pruned_commit_lsn >= $1::pg_lsn FROM synchro.capture_history), false)`, last); err != nil {
		return nil, err
	}
	stop()
	progress("retention: both histories pruned %s after the worker started (its first round begins after %s)",
		time.Since(p0).Round(time.Millisecond), cfg.PruneInterval)
	var pruneSecs float64
	var effects, versions, edges, digests int64
	if err := pool.QueryRow(ctx, `SELECT round_effects, round_versions, round_edges, round_digests,
			extract(epoch FROM round_ended_at - round_started_at)::float8
		FROM synchro.history_horizon`).Scan(&effects, &versions, &edges, &digests, &pruneSecs); err != nil {
		return nil, err
	}
	removed := effects + versions + edges + digests
	progress("retention: prune_history removed %d effects, %d versions, %d edges, %d digests in %.1fs",
		effects, versions, edges, digests, pruneSecs)
	var leftVersions, leftEffects int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM synchro.row_version), (SELECT count(*) FROM synchro.effect)`).
		Scan(&leftVersions, &leftEffects); err != nil {
		return nil, err
	}
	if leftVersions != retentionUsers*retentionWidth || leftEffects != 0 {
		return nil, fmt.Errorf("pruned history keeps %d row versions and %d effects, want %d and 0",
			leftVersions, leftEffects, retentionUsers*retentionWidth)
	}

	if err := vacuumFull(ctx, pool); err != nil {
		return nil, err
	}
	pruned, err := schemaSize(ctx, pool, "pruned, after VACUUM FULL")
	if err != nil {
		return nil, err
	}
	var projections int64
	if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size('synchro.projection')`).Scan(&projections); err != nil {
		return nil, err
	}
	const projName = "projections of the 10,000 rows"
	return []row{
		{Name: "synchro schema size after 1M changes, pruned", Value: float64(pruned), Unit: "bytes",
			Baseline: projName, BaseVal: float64(projections), Target: "<= 2x"},
		{Name: "synchro schema size after 1M changes, unpruned", Value: float64(unpruned), Unit: "bytes",
			Baseline: projName, BaseVal: float64(projections)},
		{Name: "prune rate (synchro.prune_history, 1M changes' history in one round)", Value: float64(removed) / pruneSecs, Unit: "rows/s",
			Baseline: "the same rows written by capture", BaseVal: float64(removed) / captureDur.Seconds()},
	}, nil
}

// retentionWrite runs the writer in two sessions, each on half of the users.
func retentionWrite(ctx context.Context, pool *pgxpool.Pool) error {
	const sessions = 2
	errs := make(chan error, sessions)
	for s := 0; s < sessions; s++ {
		go func(s int) {
			_, err := pool.Exec(ctx, `CALL bench.retention_writes($1, $2, $3, $4)`,
				s*retentionUsers/sessions, retentionUsers/sessions, retentionPasses, retentionWidth)
			errs <- err
		}(s)
	}
	var first error
	for s := 0; s < sessions; s++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// synchroTables is every table of schema synchro with its total size (heap,
// TOAST and indexes) and its indexes' share, largest first.
const synchroTables = `SELECT c.relname, pg_total_relation_size(c.oid), pg_indexes_size(c.oid)
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = 'synchro' AND c.relkind = 'r'
	ORDER BY 2 DESC, 1`

// schemaSize returns the bytes of the tables of schema synchro and logs, as
// what, each table of more than 64 kB with its indexes' share.
func schemaSize(ctx context.Context, pool *pgxpool.Pool, what string) (int64, error) {
	rows, err := pool.Query(ctx, synchroTables)
	if err != nil {
		return 0, err
	}
	var total, small int64
	var parts []string
	var name string
	var size, indexes int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &size, &indexes}, func() error {
		total += size
		if size > 64<<10 {
			parts = append(parts, fmt.Sprintf("%s %d (indexes %d)", name, size, indexes))
		} else {
			small += size
		}
		return nil
	}); err != nil {
		return 0, err
	}
	progress("retention: synchro schema %s: %d bytes: %s, the other tables %d", what, total, strings.Join(parts, ", "), small)
	return total, nil
}

// vacuumFull rewrites every table of schema synchro.
func vacuumFull(ctx context.Context, pool *pgxpool.Pool) error {
	var list string
	if err := pool.QueryRow(ctx, `SELECT string_agg(format('%I.%I', n.nspname, c.relname), ', ')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'synchro' AND c.relkind = 'r'`).Scan(&list); err != nil {
		return err
	}
	t0 := time.Now()
	_, err := pool.Exec(ctx, `VACUUM FULL `+list)
	progress("retention: VACUUM FULL of schema synchro in %s", time.Since(t0).Round(time.Millisecond))
	return err
}
